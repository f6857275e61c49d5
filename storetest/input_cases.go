package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// testBadInput checks that malformed requests are refused with an error
// that is not a skip, and write nothing.
func testBadInput(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)

	// Invalid sources. Each has a valid counterpart, which a store that
	// cut or cleaned the name might have claimed instead: claiming that
	// afterwards shows nothing was written.
	for _, tc := range badSources(prefix) {
		_, err := s.Claim(ctx, claimReq(tc.source, "owner", longLease))
		if !errors.Is(err, runclaim.ErrInvalidSource) || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("claim of %s source %q: %v, want ErrInvalidSource and not ErrNotClaimed", tc.name, tc.source, err)
		}
		r := mustClaim(t, ctx, s, claimReq(tc.valid, "owner", longLease))
		mustFinish(t, ctx, s, succeeded(r))
	}

	// Invalid owners, leases and intervals on a valid source.
	src := prefix + "/valid"
	for _, tc := range []struct {
		name string
		req  runclaim.ClaimRequest
	}{
		{"empty owner", claimReq(src, "", longLease)},
		{"owner with NUL", claimReq(src, "own\x00er", longLease)},
		{"owner too long", claimReq(src, strings.Repeat("o", runclaim.MaxOwnerLen+1), longLease)},
		{"zero lease", claimReq(src, "owner", 0)},
		{"negative lease", claimReq(src, "owner", -time.Second)},
		{"lease below MinLease", claimReq(src, "owner", runclaim.MinLease-time.Nanosecond)},
		{"lease above MaxLease", claimReq(src, "owner", runclaim.MaxLease+time.Second)},
		{"negative interval", runclaim.ClaimRequest{Source: src, Owner: "owner", Lease: longLease, MinInterval: -time.Second}},
		{"interval above MaxLease", runclaim.ClaimRequest{Source: src, Owner: "owner", Lease: longLease, MinInterval: runclaim.MaxLease + time.Second}},
		{"tick after the year 9999", tickReq(src, "owner", time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC))},
		{"tick before the year 1", tickReq(src, "owner", time.Date(0, time.December, 31, 23, 0, 0, 0, time.UTC))},
		{"tick within a microsecond of the zero time", tickReq(src, "owner", time.Time{}.Add(time.Nanosecond))},
	} {
		_, err := s.Claim(ctx, tc.req)
		if err == nil || errors.Is(err, runclaim.ErrNotClaimed) || errors.Is(err, runclaim.ErrInvalidSource) {
			t.Errorf("claim with %s: %v, want an error that matches neither ErrNotClaimed nor ErrInvalidSource", tc.name, err)
		}
	}
	// Nothing was written: the source is free, and not too soon either.
	r := mustClaim(t, ctx, s, runclaim.ClaimRequest{Source: src, Owner: "owner", Lease: longLease, MinInterval: time.Hour})

	// Malformed heartbeats and finishes of the running run r change nothing.
	for _, tc := range []struct {
		name string
		req  runclaim.HeartbeatRequest
	}{
		{"zero ID", runclaim.HeartbeatRequest{ID: 0, Source: r.Source, StartedAt: r.StartedAt, Lease: longLease}},
		{"no source", runclaim.HeartbeatRequest{ID: r.ID, StartedAt: r.StartedAt, Lease: longLease}},
		{"no start", runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, Lease: longLease}},
		{"negative ID", runclaim.HeartbeatRequest{ID: -r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: longLease}},
		{"zero lease", runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: 0}},
		{"lease below MinLease", runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: runclaim.MinLease - time.Nanosecond}},
		{"lease above MaxLease", runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: runclaim.MaxLease + time.Second}},
	} {
		if _, err := s.Heartbeat(ctx, tc.req); err == nil || errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("heartbeat with %s: %v, want an error other than ErrLeaseLost", tc.name, err)
		}
	}
	for _, tc := range []struct {
		name string
		req  runclaim.FinishRequest
	}{
		{"zero ID", runclaim.FinishRequest{ID: 0, Source: r.Source, StartedAt: r.StartedAt, Status: runclaim.StatusSucceeded}},
		{"no source", runclaim.FinishRequest{ID: r.ID, StartedAt: r.StartedAt, Status: runclaim.StatusSucceeded}},
		{"no start", runclaim.FinishRequest{ID: r.ID, Source: r.Source, Status: runclaim.StatusSucceeded}},
		{"NUL in the error text", failed(r, "before\x00after")},
		{"error text not UTF-8", failed(r, "bad \xff byte")},
		{"status running", runclaim.FinishRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Status: runclaim.StatusRunning}},
		{"status expired", runclaim.FinishRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Status: runclaim.StatusExpired}},
		{"status released", runclaim.FinishRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Status: runclaim.StatusReleased}},
		{"empty status", runclaim.FinishRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt}},
		{"unknown status", runclaim.FinishRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Status: "done"}},
		{"succeeded with error text", runclaim.FinishRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Status: runclaim.StatusSucceeded, Error: "boom"}},
		{"error text too long", failed(r, strings.Repeat("e", runclaim.MaxErrorLen+64))},
	} {
		if err := s.Finish(ctx, tc.req); err == nil || errors.Is(err, runclaim.ErrLeaseLost) || errors.Is(err, runclaim.ErrFinished) {
			t.Errorf("finish with %s: %v, want an error other than ErrLeaseLost and ErrFinished", tc.name, err)
		}
	}
	_, err := s.Claim(ctx, claimReq(src, "other", longLease))
	wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), r)
	mustHeartbeat(t, ctx, s, r, longLease)
	mustFinish(t, ctx, s, succeeded(r))
}

// badSource is a source name every store refuses, with a valid
// counterpart that a store that cut or cleaned the name might claim
// instead.
type badSource struct{ name, source, valid string }

// badSources are the invalid source names the cases try, under prefix.
func badSources(prefix string) []badSource {
	long := prefix + "/" + strings.Repeat("x", runclaim.MaxSourceLen)
	return []badSource{
		{"empty", "", prefix + "/empty"},
		{"NUL", prefix + "/nul\x00tail", prefix + "/nul"},
		{"too long", long[:runclaim.MaxSourceLen+1], long[:runclaim.MaxSourceLen]},
		{"invalid UTF-8", prefix + "/utf8\xff", prefix + "/utf8"},
		{"newline", prefix + "/nl\n", prefix + "/nl"},
		{"tab", prefix + "/tab\t", prefix + "/tab"},
	}
}

package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// unclaimer is a Store with the Unclaim method that runclaim.ManyStore's
// doc describes.
type unclaimer interface {
	Unclaim(ctx context.Context, run runclaim.RunInfo) error
}

// testUnclaim checks a Store that has an Unclaim method: a run taken
// back serves no tick, counts for no minimum interval and leaves its
// source free, with the source's earlier run counting again; a run that
// is not running, or is named with another start or source, is not taken
// back, and the call returns runclaim.ErrLeaseLost and changes nothing.
func testUnclaim(t *testing.T, s runclaim.Store) {
	uc, ok := s.(unclaimer)
	if !ok {
		t.Skipf("storetest: %T has no Unclaim method", s)
	}
	ctx, prefix := setup(t)
	lost := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("Unclaim of %s: %v, want an error matching ErrLeaseLost", what, err)
		}
	}

	// A tick run taken back: the tick can be claimed again, and the
	// minimum interval does not count the run.
	a := prefix + "/a"
	req := tickReq(a, "first", baseTick)
	req.MinInterval = time.Hour
	r := mustClaim(t, ctx, s, req)
	if err := uc.Unclaim(ctx, r); err != nil {
		t.Fatalf("Unclaim(run %d of %q): %v", r.ID, a, err)
	}
	again := mustClaim(t, ctx, s, req) // neither ErrTickDone nor ErrTooSoon
	if again.ID <= r.ID {
		t.Errorf("the claim after Unclaim got run %d, want an ID above the run taken back, %d", again.ID, r.ID)
	}
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: longLease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of run %d, taken back: %v, want ErrLeaseLost", r.ID, err)
	}
	lost("a run taken back already", uc.Unclaim(ctx, r))
	// A finished run is not taken back: its tick stays served.
	mustFinish(t, ctx, s, failed(again, "boom"))
	lost("a finished run", uc.Unclaim(ctx, again))
	_, err := s.Claim(ctx, tickReq(a, "second", baseTick))
	tickDone(t, err, a, baseTick, baseTick)

	// The source's earlier run counts for the interval again.
	b := prefix + "/b"
	first := mustClaim(t, ctx, s, claimReq(b, "first", longLease))
	mustFinish(t, ctx, s, succeeded(first))
	second := mustClaim(t, ctx, s, claimReq(b, "second", longLease))
	if err := uc.Unclaim(ctx, second); err != nil {
		t.Fatalf("Unclaim(run %d of %q): %v", second.ID, b, err)
	}
	_, err = s.Claim(ctx, runclaim.ClaimRequest{Source: b, Owner: "third", Lease: longLease, MinInterval: time.Hour})
	nc := skipOf(t, err, b, runclaim.ErrTooSoon)
	if want := first.StartedAt.Add(time.Hour); !nc.RetryAfter.Equal(want) {
		t.Errorf("RetryAfter = %v, want the start of run %d, before the one taken back, plus the interval, %v", nc.RetryAfter, first.ID, want)
	}

	// A run named with another start or source is not taken back.
	c := prefix + "/c"
	held := mustClaim(t, ctx, s, claimReq(c, "holder", longLease))
	wrongStart := held
	wrongStart.StartedAt = held.StartedAt.Add(-time.Second)
	lost("a run named with another start", uc.Unclaim(ctx, wrongStart))
	wrongSource := held
	wrongSource.Source = c + "x"
	lost("a run named with another source", uc.Unclaim(ctx, wrongSource))
	held.LeaseUntil = mustHeartbeat(t, ctx, s, held, longLease)
	_, err = s.Claim(ctx, claimReq(c, "other", longLease))
	wantHolder(t, skipOf(t, err, c, runclaim.ErrAlreadyRunning), held)
	mustFinish(t, ctx, s, succeeded(held))
}

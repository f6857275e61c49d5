package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/runclaim/runclaim"
)

// testFinishGuards checks repeated and conflicting Finish calls, and
// heartbeats of runs that are not running.
func testFinishGuards(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"

	a := mustClaim(t, ctx, s, claimReq(src, "owner", longLease))
	mustFinish(t, ctx, s, succeeded(a))
	if err := s.Finish(ctx, succeeded(a)); err != nil {
		t.Errorf("second Finish(succeeded) of run %d: %v, want nil", a.ID, err)
	}
	if err := s.Finish(ctx, failed(a, "boom")); !errors.Is(err, runclaim.ErrFinished) {
		t.Errorf("Finish(failed) of succeeded run %d: %v, want ErrFinished", a.ID, err)
	}
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: longLease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of finished run %d: %v, want ErrLeaseLost", a.ID, err)
	}

	b := mustClaim(t, ctx, s, claimReq(src, "owner", longLease))
	mustFinish(t, ctx, s, failed(b, "boom"))
	if err := s.Finish(ctx, failed(b, "boom")); err != nil {
		t.Errorf("second Finish(failed, same text) of run %d: %v, want nil", b.ID, err)
	}
	if err := s.Finish(ctx, failed(b, "other text")); !errors.Is(err, runclaim.ErrFinished) {
		t.Errorf("Finish(failed, other text) of failed run %d: %v, want ErrFinished", b.ID, err)
	}
	if err := s.Finish(ctx, succeeded(b)); !errors.Is(err, runclaim.ErrFinished) {
		t.Errorf("Finish(succeeded) of failed run %d: %v, want ErrFinished", b.ID, err)
	}
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: b.ID, Source: b.Source, StartedAt: b.StartedAt, Lease: longLease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of failed run %d: %v, want ErrLeaseLost", b.ID, err)
	}

	// A run the store never issued is not this holder's either.
	unknown := b
	unknown.ID += 1 << 40
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: unknown.ID, Source: unknown.Source, StartedAt: unknown.StartedAt, Lease: longLease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of unknown run %d: %v, want ErrLeaseLost", unknown.ID, err)
	}
	if err := s.Finish(ctx, succeeded(unknown)); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Finish of unknown run %d: %v, want ErrLeaseLost", unknown.ID, err)
	}

	// None of it left the source held.
	c := mustClaim(t, ctx, s, claimReq(src, "owner", longLease))
	mustFinish(t, ctx, s, succeeded(c))
}

// testFinishLongError checks repeated Finish calls with the longest error
// texts: runclaim.MaxErrorLen bytes, and the longest that
// FinishRequest.Validate accepts, which is what a Claimer sends for a longer
// error (cut, and marked as cut). The retry comes both straight to the store
// and through a Claimer whose first Finish lost its answer.
func testFinishLongError(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"

	limit := runclaim.MaxErrorLen
	for n := runclaim.MaxErrorLen + 256; n > runclaim.MaxErrorLen; n-- {
		if (runclaim.FinishRequest{ID: 1, Source: src, StartedAt: time.Now(), Status: runclaim.StatusFailed, Error: strings.Repeat("e", n)}).Validate() == nil {
			limit = n
			break
		}
	}
	for _, n := range []int{runclaim.MaxErrorLen, limit} {
		text := errorText(n)
		a := mustClaim(t, ctx, s, claimReq(src, "owner", longLease))
		mustFinish(t, ctx, s, failed(a, text))
		if err := s.Finish(ctx, failed(a, text)); err != nil {
			t.Errorf("Finish of run %d repeated with the same %d-byte error text: %v, want nil", a.ID, n, err)
		}
		for _, other := range []string{text[:n-1] + "!", "!" + text[1:], text[:n-1]} {
			if err := s.Finish(ctx, failed(a, other)); !errors.Is(err, runclaim.ErrFinished) {
				t.Errorf("Finish of run %d with a %d-byte error text that differs from the recorded one at one end: %v, want ErrFinished", a.ID, len(other), err)
			}
		}
	}

	// Through a Claimer, with an error longer than any store keeps: the
	// store's first answer is lost, so the Claimer's caller sends Finish
	// again, and the store must see it is the same.
	lossy := &loseFirstFinish{Store: s}
	c, err := runclaim.New(lossy, runclaim.WithOwner("owner"), runclaim.WithLease(longLease))
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Claim(ctx, src)
	if err != nil {
		t.Fatalf("Claimer.Claim(%q): %v", src, err)
	}
	jobErr := errors.New(errorText(2 * runclaim.MaxErrorLen))
	if err := run.Finish(ctx, jobErr); !errors.Is(err, errAnswerLost) {
		t.Fatalf("first Run.Finish: %v, want the lost answer", err)
	}
	if err := run.Finish(ctx, jobErr); err != nil {
		t.Errorf("Run.Finish sent again after its answer was lost, with a %d-byte error text: %v, want nil", len(lossy.sent.Error), err)
	}
	if n := len(lossy.sent.Error); n <= runclaim.MaxErrorLen || n > limit {
		t.Errorf("the Claimer sent a %d-byte error text, want more than %d and at most %d bytes", n, runclaim.MaxErrorLen, limit)
	}
}

// errorText returns an error text of exactly n bytes: valid UTF-8 with
// characters of one to four bytes, its first and last bytes ASCII.
func errorText(n int) string {
	const pattern = "job failed: é, 日本, 🙂; "
	var b strings.Builder
	for b.Len() < n-1 {
		for _, r := range pattern {
			if b.Len()+utf8.RuneLen(r) > n-1 {
				break
			}
			b.WriteRune(r)
		}
		for b.Len() < n-1 && b.Len()+utf8.UTFMax > n-1 {
			b.WriteByte('.')
		}
	}
	b.WriteByte('.')
	return b.String()
}

// errAnswerLost is what loseFirstFinish returns for the Finish it lost the
// answer of.
var errAnswerLost = errors.New("storetest: the answer to Finish was lost")

// loseFirstFinish is a Store whose first Finish reaches the store but
// returns errAnswerLost, as a Finish whose connection broke after it was
// sent does. It records the request.
type loseFirstFinish struct {
	runclaim.Store
	sent runclaim.FinishRequest
	lost bool
}

func (s *loseFirstFinish) Finish(ctx context.Context, req runclaim.FinishRequest) error {
	err := s.Store.Finish(ctx, req)
	if s.lost {
		return err
	}
	s.lost, s.sent = true, req
	if err != nil {
		return fmt.Errorf("the first Finish failed: %w", err)
	}
	return errAnswerLost
}

// finishManyStore is a store that records many outcomes in one call, as
// runclaim.PostgresStore.FinishMany does.
type finishManyStore interface {
	FinishMany(ctx context.Context, reqs []runclaim.FinishRequest) ([]error, error)
}

// testFinishMany checks that FinishMany answers each request as Finish
// would, and records what it answers: a live run succeeded, another
// failed with its text, a run finished before with the same outcome (nil)
// and with another (ErrFinished), and a run whose lease has ended
// (ErrLeaseLost, recorded expired). The sources of the runs it recorded
// are free again; the others' are not.
func testFinishMany(t *testing.T, s runclaim.Store) {
	fm, ok := s.(finishManyStore)
	if !ok {
		t.Skipf("storetest: %T has no FinishMany", s)
	}
	ctx, prefix := setup(t)
	const lease = 150 * time.Millisecond
	clock := newStoreClock(t, ctx, s, prefix+"/clock")
	lapsed := mustClaim(t, ctx, s, claimReq(prefix+"/lapsed", "owner", lease))
	live := mustClaim(t, ctx, s, claimReq(prefix+"/live", "owner", longLease))
	fails := mustClaim(t, ctx, s, claimReq(prefix+"/fails", "owner", longLease))
	again := mustClaim(t, ctx, s, claimReq(prefix+"/again", "owner", longLease))
	other := mustClaim(t, ctx, s, claimReq(prefix+"/other", "owner", longLease))
	mustFinish(t, ctx, s, succeeded(again))
	mustFinish(t, ctx, s, succeeded(other))
	clock.waitPast(t, ctx, lapsed.LeaseUntil, 20*time.Second)
	reqs := []runclaim.FinishRequest{succeeded(live), failed(fails, "boom"), succeeded(again), failed(other, "late"), succeeded(lapsed)}
	errs, err := fm.FinishMany(ctx, reqs)
	if err != nil {
		t.Fatalf("FinishMany: %v", err)
	}
	if len(errs) != len(reqs) {
		t.Fatalf("FinishMany of %d requests: %d answers", len(reqs), len(errs))
	}
	for i, want := range []error{nil, nil, nil, runclaim.ErrFinished, runclaim.ErrLeaseLost} {
		if want == nil && errs[i] != nil || want != nil && !errors.Is(errs[i], want) {
			t.Errorf("FinishMany answer %d (run %d): %v, want %v", i, reqs[i].ID, errs[i], want)
		}
	}
	// What it answered is what it recorded: the same requests again, one
	// by one, say the same (a repeated outcome is nil, another ErrFinished).
	if err := s.Finish(ctx, succeeded(live)); err != nil {
		t.Errorf("Finish(succeeded) of run %d after FinishMany recorded it: %v, want nil", live.ID, err)
	}
	if err := s.Finish(ctx, succeeded(fails)); !errors.Is(err, runclaim.ErrFinished) {
		t.Errorf("Finish(succeeded) of run %d, which FinishMany recorded failed: %v, want ErrFinished", fails.ID, err)
	}
	for _, r := range []runclaim.RunInfo{live, fails, lapsed} {
		b := mustClaim(t, ctx, s, claimReq(r.Source, "owner-b", longLease))
		mustFinish(t, ctx, s, succeeded(b))
	}
	if errs, err := fm.FinishMany(ctx, nil); err != nil || len(errs) != 0 {
		t.Errorf("FinishMany(nil) = %v, %v; want no answers, no error", errs, err)
	}
}

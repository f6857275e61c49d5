package runclaim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/testclock"
)

// The Store behaviour that every backend shares is checked by package
// storetest (storetest/storetest_test.go runs it on the memory store). This
// file checks what only an injected clock can show exactly: lease and
// interval boundaries, to the nanosecond, without sleeping.

// newManualClock returns a clock for WithClock that moves only when told to.
func newManualClock() *testclock.Clock {
	return testclock.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
}

func memClaim(t *testing.T, s runclaim.Store, source, owner string, lease, minInterval time.Duration) (runclaim.RunInfo, error) {
	t.Helper()
	return s.Claim(t.Context(), runclaim.ClaimRequest{Source: source, Owner: owner, Lease: lease, MinInterval: minInterval})
}

func memMustClaim(t *testing.T, s runclaim.Store, source, owner string, lease, minInterval time.Duration) runclaim.RunInfo {
	t.Helper()
	info, err := memClaim(t, s, source, owner, lease, minInterval)
	if err != nil {
		t.Fatalf("Claim(%q) by %q: %v", source, owner, err)
	}
	return info
}

// memWantSkip checks that err is a skip for reason and returns its details.
func memWantSkip(t *testing.T, err, reason error) *runclaim.NotClaimedError {
	t.Helper()
	var nc *runclaim.NotClaimedError
	if !errors.Is(err, reason) || !errors.As(err, &nc) {
		t.Fatalf("got %v, want a *NotClaimedError matching %v", err, reason)
	}
	return nc
}

func TestMemoryStoreLeaseEndsExactly(t *testing.T) {
	clk := newManualClock()
	s := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
	t0 := clk.Now()
	const lease = time.Minute

	a := memMustClaim(t, s, "src", "a", lease, 0)
	if !a.StartedAt.Equal(t0) || !a.LeaseUntil.Equal(t0.Add(lease)) {
		t.Fatalf("claim at %v: started %v, lease until %v; want the store's clock and that plus %v", t0, a.StartedAt, a.LeaseUntil, lease)
	}

	// One nanosecond before the lease ends the run still holds.
	clk.Advance(lease - time.Nanosecond)
	_, err := memClaim(t, s, "src", "b", lease, 0)
	nc := memWantSkip(t, err, runclaim.ErrAlreadyRunning)
	if nc.Holder == nil || nc.Holder.ID != a.ID || nc.Holder.Owner != "a" || !nc.RetryAfter.Equal(a.LeaseUntil) {
		t.Fatalf("skip names holder %+v retry after %v; want run %d by a, retry after %v", nc.Holder, nc.RetryAfter, a.ID, a.LeaseUntil)
	}

	// At the lease end it no longer does: the claim expires it and takes over.
	now := clk.Advance(time.Nanosecond)
	b := memMustClaim(t, s, "src", "b", lease, 0)
	if !b.StartedAt.Equal(now) || b.ID <= a.ID {
		t.Fatalf("takeover: run %d started %v; want an ID above %d and start %v", b.ID, b.StartedAt, a.ID, now)
	}
	ctx := t.Context()
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: lease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of expired run: %v, want ErrLeaseLost", err)
	}
	if err := s.Finish(ctx, runclaim.FinishRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Status: runclaim.StatusSucceeded}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Finish of expired run: %v, want ErrLeaseLost", err)
	}
}

func TestMemoryStoreHeartbeatExtendsFromNow(t *testing.T) {
	clk := newManualClock()
	s := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
	ctx := t.Context()
	const lease = time.Minute

	a := memMustClaim(t, s, "src", "a", lease, 0)
	now := clk.Advance(40 * time.Second)
	until, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: lease})
	if err != nil || !until.Equal(now.Add(lease)) {
		t.Fatalf("Heartbeat at %v = %v, %v; want %v", now, until, err, now.Add(lease))
	}

	// Past the first lease end, before the extended one: still held.
	clk.Advance(50 * time.Second)
	_, err = memClaim(t, s, "src", "b", lease, 0)
	if nc := memWantSkip(t, err, runclaim.ErrAlreadyRunning); nc.Holder == nil || !nc.Holder.LeaseUntil.Equal(until) {
		t.Fatalf("skip names holder %+v, want lease until %v", nc.Holder, until)
	}

	// A shorter lease does not shorten it: a heartbeat never moves the end
	// back, and the run is held until the end the last one set.
	short, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: time.Second})
	if err != nil || !short.Equal(until) {
		t.Fatalf("Heartbeat with a 1s lease = %v, %v; want the end kept, %v", short, err, until)
	}
	clk.Advance(until.Sub(clk.Now()) - time.Millisecond)
	_, err = memClaim(t, s, "src", "b", lease, 0)
	memWantSkip(t, err, runclaim.ErrAlreadyRunning)
	clk.Advance(time.Millisecond)
	b := memMustClaim(t, s, "src", "b", lease, 0)
	if b.ID <= a.ID {
		t.Fatalf("run %d took over run %d", b.ID, a.ID)
	}
}

// A run whose lease has ended but which no claim has expired yet is lost
// all the same: a late heartbeat does not revive it, and the next claim
// takes the source over.
func TestMemoryStoreLateHeartbeatBeforeTakeover(t *testing.T) {
	clk := newManualClock()
	s := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
	const lease = time.Minute

	a := memMustClaim(t, s, "src", "a", lease, 0)
	clk.Advance(time.Hour)
	if _, err := s.Heartbeat(t.Context(), runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: lease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Fatalf("late Heartbeat = %v, want ErrLeaseLost", err)
	}
	memMustClaim(t, s, "src", "b", lease, 0)
}

func TestMemoryStoreMinIntervalExactly(t *testing.T) {
	clk := newManualClock()
	s := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
	ctx := t.Context()
	const lease, interval = time.Minute, 10 * time.Minute

	a := memMustClaim(t, s, "src", "a", lease, interval)
	clk.Advance(time.Second)
	if err := s.Finish(ctx, runclaim.FinishRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Status: runclaim.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}

	clk.Advance(interval - time.Second - time.Nanosecond)
	_, err := memClaim(t, s, "src", "b", lease, interval)
	nc := memWantSkip(t, err, runclaim.ErrTooSoon)
	if want := a.StartedAt.Add(interval); !nc.RetryAfter.Equal(want) || nc.Holder != nil {
		t.Fatalf("too soon: RetryAfter %v holder %+v; want %v and no holder", nc.RetryAfter, nc.Holder, want)
	}
	if errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Errorf("too-soon skip matches ErrAlreadyRunning: %v", err)
	}

	now := clk.Advance(time.Nanosecond)
	b := memMustClaim(t, s, "src", "b", lease, interval)
	if !b.StartedAt.Equal(now) {
		t.Fatalf("run started %v, want %v", b.StartedAt, now)
	}

	// b's interval is recorded with it and binds c, which asked for none,
	// although b's lease has ended.
	clk.Advance(lease)
	_, err = memClaim(t, s, "src", "c", lease, 0)
	if nc := memWantSkip(t, err, runclaim.ErrTooSoon); !nc.RetryAfter.Equal(b.StartedAt.Add(interval)) {
		t.Errorf("RetryAfter %v, want b's start plus b's recorded interval, %v", nc.RetryAfter, b.StartedAt.Add(interval))
	}
	// An expired run's start counts too: c takes over from b once b's
	// interval has passed, c's lease ends, and a claim a lease later is too
	// soon after c's start.
	clk.Advance(interval)
	c := memMustClaim(t, s, "src", "c", lease, 0)
	clk.Advance(lease)
	_, err = memClaim(t, s, "src", "d", lease, interval)
	if nc := memWantSkip(t, err, runclaim.ErrTooSoon); !nc.RetryAfter.Equal(c.StartedAt.Add(interval)) {
		t.Errorf("RetryAfter %v, want the latest start plus the interval, %v", nc.RetryAfter, c.StartedAt.Add(interval))
	}
}

// The Claimer on a memory store reports the store's clock, not the local one.
func TestMemoryStoreClaimerUsesStoreClock(t *testing.T) {
	clk := newManualClock()
	s := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
	c, err := runclaim.New(s, runclaim.WithLease(time.Minute), runclaim.WithOwner("me"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	run, err := c.Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	if !run.StartedAt.Equal(clk.Now()) || !run.LeaseUntil.Equal(clk.Now().Add(time.Minute)) || !run.Deadline().Equal(run.LeaseUntil) {
		t.Fatalf("run started %v, lease until %v, deadline %v; want the store's clock %v plus a minute", run.StartedAt, run.LeaseUntil, run.Deadline(), clk.Now())
	}
	now := clk.Advance(30 * time.Second)
	if err := run.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if !run.Deadline().Equal(now.Add(time.Minute)) || !run.LeaseUntil.Equal(now.Add(30*time.Second)) {
		t.Fatalf("after a heartbeat at %v: deadline %v, LeaseUntil %v; want %v and the claim's lease end unchanged", now, run.Deadline(), run.LeaseUntil, now.Add(time.Minute))
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// WithClock(nil) and a zero ClockOption leave the real clock in place.
func TestMemoryStoreNilOptions(t *testing.T) {
	s := runclaim.NewMemoryStore(runclaim.WithClock(nil), runclaim.ClockOption{})
	before := time.Now()
	a := memMustClaim(t, s, "src", "a", time.Minute, 0)
	after := time.Now()
	if a.StartedAt.Before(before) || a.StartedAt.After(after) {
		t.Fatalf("run started %v, want between %v and %v", a.StartedAt, before, after)
	}
}

// A cancelled context is reported as such, never as a skip, even when the
// source is held.
func TestMemoryStoreCancelledWhileHeld(t *testing.T) {
	s := runclaim.NewMemoryStore()
	memMustClaim(t, s, "src", "a", time.Minute, 0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Claim(ctx, runclaim.ClaimRequest{Source: "src", Owner: "b", Lease: time.Minute})
	if !errors.Is(err, context.Canceled) || errors.Is(err, runclaim.ErrNotClaimed) {
		t.Fatalf("claim with a cancelled context of a held source: %v, want context.Canceled and no skip", err)
	}
}

package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// testLapsedLease checks that a lease that has ended by the store's clock
// is lost, whether or not a claim has expired the run: Heartbeat and Finish
// answer ErrLeaseLost alike, a retried Finish says the same, and the source
// is free for the next claim.
func testLapsedLease(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	// A lease under a second: the case waits for it to end, by the
	// store's own clock (waitPast), and asserts only what holds after that
	// moment, so a slow machine makes the wait longer, never the answer
	// different.
	const lease = 150 * time.Millisecond
	clock := newStoreClock(t, ctx, s, prefix+"/clock")
	for _, takeover := range []bool{false, true} {
		src := prefix + "/lapsed"
		if takeover {
			src = prefix + "/taken-over"
		}
		a := mustClaim(t, ctx, s, claimReq(src, "owner-a", lease))
		clock.waitPast(t, ctx, a.LeaseUntil, 20*time.Second)
		var b runclaim.RunInfo
		if takeover {
			b = mustClaim(t, ctx, s, claimReq(src, "owner-b", longLease))
		}
		if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: longLease}); !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("takeover=%v: Heartbeat of run %d after its lease ended: %v, want ErrLeaseLost", takeover, a.ID, err)
		}
		for range 2 { // a retried Finish says the same
			if err := s.Finish(ctx, succeeded(a)); !errors.Is(err, runclaim.ErrLeaseLost) {
				t.Errorf("takeover=%v: Finish of run %d after its lease ended: %v, want ErrLeaseLost", takeover, a.ID, err)
			}
		}
		if !takeover {
			b = mustClaim(t, ctx, s, claimReq(src, "owner-b", longLease))
		}
		if b.ID <= a.ID {
			t.Errorf("run %d after run %d", b.ID, a.ID)
		}
		mustFinish(t, ctx, s, succeeded(b))
	}
}

// testTooSoonOverLapsedRun checks that when the source's running run has
// lapsed but the interval it recorded has not passed, a claim is skipped
// as too soon, not as already running, and names no holder.
func testTooSoonOverLapsedRun(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	// A lease under a second: the case waits for it to end, by the
	// store's own clock (waitPast), and asserts only what holds after that
	// moment, so a slow machine makes the wait longer, never the answer
	// different.
	const lease = 150 * time.Millisecond
	a := mustClaim(t, ctx, s, runclaim.ClaimRequest{Source: src, Owner: "owner-a", Lease: lease, MinInterval: time.Hour})
	newStoreClock(t, ctx, s, prefix+"/clock").waitPast(t, ctx, a.LeaseUntil, 20*time.Second)
	_, err := s.Claim(ctx, claimReq(src, "owner-b", longLease))
	nc := skipOf(t, err, src, runclaim.ErrTooSoon)
	if nc.Holder != nil {
		t.Errorf("a too-soon skip names holder %+v", *nc.Holder)
	}
	if want := a.StartedAt.Add(time.Hour); !nc.RetryAfter.Equal(want) {
		t.Errorf("RetryAfter = %v, want run %d's start plus its recorded interval, %v", nc.RetryAfter, a.ID, want)
	}
	if err := s.Finish(ctx, succeeded(a)); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Finish of the lapsed run %d: %v, want ErrLeaseLost", a.ID, err)
	}
}

// testFinishRace checks that identical Finish calls racing, through one
// Store or through several replicas (a retry whose first answer was lost,
// sent through another connection), all succeed, and a different outcome
// racing them is refused or wins alone.
func testFinishRace(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	stores := openReplicas(open, replicas)
	for round := range 8 {
		a := mustClaim(t, ctx, stores[0], claimReq(prefix+"/a", "owner", longLease))
		req := succeeded(a)
		if round%2 == 1 {
			req = failed(a, "the same failure, reported twice")
		}
		errs := make([]error, 2*replicas)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := range errs {
			s := stores[i%len(stores)]
			wg.Go(func() {
				<-gate
				errs[i] = s.Finish(ctx, req)
			})
		}
		close(gate)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: identical Finish #%d racing the others: %v, want nil", round, i, err)
			}
		}
	}
}

// testSourceMustMatch checks that a run is found by its ID and its source:
// a heartbeat or finish that names another source is answered as for a run
// that is not running, and changes nothing.
func testSourceMustMatch(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	a := mustClaim(t, ctx, s, claimReq(prefix+"/a", "owner", longLease))
	other := a
	other.Source = prefix + "/b"
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: other.ID, Source: other.Source, StartedAt: other.StartedAt, Lease: longLease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of run %d naming another source: %v, want ErrLeaseLost", a.ID, err)
	}
	if err := s.Finish(ctx, succeeded(other)); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Finish of run %d naming another source: %v, want ErrLeaseLost", a.ID, err)
	}
	mustHeartbeat(t, ctx, s, a, longLease)
	mustFinish(t, ctx, s, failed(a, "still mine"))
}

// testStartMustMatch checks that a run is found by its start too (G14): a
// heartbeat or finish that names the run's ID and source but another
// start, as the holder of a run whose ID was handed out again after an
// asynchronous failover does, is answered as for a run that is not
// running, and changes nothing. HeartbeatMany too, on a ManyStore.
func testStartMustMatch(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	a := mustClaim(t, ctx, s, claimReq(prefix+"/a", "owner", longLease))
	for _, shift := range []time.Duration{-time.Microsecond, time.Microsecond, -time.Hour} {
		other := a
		other.StartedAt = a.StartedAt.Add(shift)
		if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: other.ID, Source: other.Source, StartedAt: other.StartedAt, Lease: 2 * longLease}); !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("Heartbeat of run %d naming a start %v off: %v, want ErrLeaseLost", a.ID, shift, err)
		}
		if mh, ok := s.(runclaim.ManyStore); ok {
			res, err := mh.HeartbeatMany(ctx, []runclaim.HeartbeatRequest{{ID: other.ID, Source: other.Source, StartedAt: other.StartedAt, Lease: 2 * longLease}})
			if err != nil || len(res) != 1 || !errors.Is(res[0].Err, runclaim.ErrLeaseLost) {
				t.Errorf("HeartbeatMany of run %d naming a start %v off: %v, %v; want ErrLeaseLost for it", a.ID, shift, res, err)
			}
		}
		if err := s.Finish(ctx, failed(other, "not mine")); !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("Finish of run %d naming a start %v off: %v, want ErrLeaseLost", a.ID, shift, err)
		}
	}
	// Still running, with the lease the claim gave it: a heartbeat asking
	// for the same lease as the claim's from now ends after the claim's
	// end, and a lease of 2*longLease would have ended later still.
	until := mustHeartbeat(t, ctx, s, a, longLease)
	if !until.Before(a.StartedAt.Add(2 * longLease)) {
		t.Errorf("run %d's lease ends at %v after its heartbeat of %v: a heartbeat naming another start extended it", a.ID, until, longLease)
	}
	mustFinish(t, ctx, s, succeeded(a))
}

// testLostClaimAnswer checks what a caller whose answer was lost can count
// on. A claim that committed but whose answer never reached its caller
// (here: the RunInfo dropped) holds the source against every claim, a
// retry with the same owner included, until its lease ends: a store that
// handed a running run back to its owner would give it to two callers at
// once, as two goroutines of one Claimer are. Then the next claim expires
// it and takes over. A heartbeat sent again after its answer was lost
// extends the lease again. (A Finish sent again is in FinishGuards.)
//
// The lease is short, so that the test is quick; a machine that stalls
// for longer than it between the claims lets the lease end before the
// retries (a claim that wins then started, by the store's clock, after the
// lease ended, which is no fault), and the case starts again on another
// source with a lease four times as long, up to four times.
func testLostClaimAnswer(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	var (
		src    string
		lease  = 150 * time.Millisecond
		orphan runclaim.RunInfo
	)
retry:
	for attempt := 0; ; attempt, lease = attempt+1, 4*lease {
		src = fmt.Sprintf("%s/a%d", prefix, attempt)
		orphan = mustClaim(t, ctx, s, claimReq(src, "owner-a", lease)) // its answer is lost
		for _, owner := range []string{"owner-a", "owner-b"} {
			info, err := s.Claim(ctx, claimReq(src, owner, lease))
			if err == nil {
				if !info.StartedAt.Before(orphan.LeaseUntil) && attempt < 4 {
					mustFinish(t, ctx, s, succeeded(info))
					continue retry // the machine stalled past the lease
				}
				t.Fatalf("%s claimed %q as run %d, at %v, while run %d held it until %v", owner, src, info.ID, info.StartedAt, orphan.ID, orphan.LeaseUntil)
			}
			wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), orphan)
		}
		break
	}
	b := claimWhenFree(t, ctx, s, claimReq(src, "owner-a", longLease), 20*lease, func(err error) {
		wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), orphan)
	})
	if b.ID <= orphan.ID || b.StartedAt.Before(orphan.LeaseUntil) {
		t.Errorf("run %d, started at %v, took over run %d, whose lease ended at %v", b.ID, b.StartedAt, orphan.ID, orphan.LeaseUntil)
	}
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: orphan.ID, Source: src, StartedAt: orphan.StartedAt, Lease: lease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of the orphaned run %d after the takeover: %v, want ErrLeaseLost", orphan.ID, err)
	}
	first := mustHeartbeat(t, ctx, s, b, longLease) // its answer is lost
	if again := mustHeartbeat(t, ctx, s, b, longLease); again.Before(first) {
		t.Errorf("a heartbeat sent again moved the lease back, from %v to %v", first, again)
	}
	mustFinish(t, ctx, s, succeeded(b))
}

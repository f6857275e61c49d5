package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// testExclusion hammers one source from many goroutines, spread over the
// replicas, and checks, with a counter of holders kept on the Go side, that
// no two ever hold it at once. Each winner counts itself in after its claim
// returned and out before it finishes, so the counted interval lies inside
// the store's.
func testExclusion(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	stores := openReplicas(open, replicas)
	src := prefix + "/hot"
	const workers = 16
	// The workers hammer for duration, and on a slow or loaded machine
	// longer, until enough claims both won and lost for the test to mean
	// something, but never past maxDuration.
	const duration, maxDuration = time.Second, 10 * time.Second
	const enough = 10

	var (
		holders  atomic.Int32
		overlaps atomic.Int64
		wins     atomic.Int64
		skips    atomic.Int64
		lastID   atomic.Int64 // written only by the holder
	)
	start := time.Now()
	more := func() bool {
		switch d := time.Since(start); {
		case ctx.Err() != nil || d >= maxDuration:
			return false
		case d < duration:
			return true
		}
		return wins.Load() < enough || skips.Load() < enough
	}
	var wg sync.WaitGroup
	for w := range workers {
		owner := fmt.Sprintf("worker-%d", w)
		s := stores[w%len(stores)]
		wg.Go(func() {
			req := claimReq(src, owner, longLease)
			for more() {
				info, err := s.Claim(ctx, req)
				if err != nil {
					var nc *runclaim.NotClaimedError
					if !errors.As(err, &nc) || !errors.Is(err, runclaim.ErrAlreadyRunning) {
						t.Errorf("%s: Claim: %v, want a run or an ErrAlreadyRunning skip", owner, err)
						return
					}
					if nc.Holder != nil && nc.Holder.Owner == owner {
						t.Errorf("%s: skipped because of its own run %d, which it had finished", owner, nc.Holder.ID)
					}
					skips.Add(1)
					continue
				}
				if n := holders.Add(1); n != 1 {
					overlaps.Add(1)
					t.Errorf("%s: run %d started while %d other holders held %q", owner, info.ID, n-1, src)
				}
				if prev := lastID.Swap(info.ID); info.ID <= prev {
					t.Errorf("%s: run %d started after run %d: IDs must strictly increase", owner, info.ID, prev)
				}
				if info.Owner != owner || info.Source != src {
					t.Errorf("%s: claim returned owner %q source %q", owner, info.Owner, info.Source)
				}
				runtime.Gosched() // hold the source for a moment
				holders.Add(-1)
				if err := s.Finish(ctx, succeeded(info)); err != nil {
					t.Errorf("%s: Finish(run %d): %v", owner, info.ID, err)
					return
				}
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	took := time.Since(start).Round(time.Millisecond)
	t.Logf("%d workers for %v: %d runs, %d skips, %d overlaps", workers, took, wins.Load(), skips.Load(), overlaps.Load())
	if wins.Load() < enough {
		t.Errorf("only %d claims won in %v: the suite needs a store that lets a finished source be claimed again at once", wins.Load(), took)
	}
	if skips.Load() < enough {
		t.Errorf("only %d claims were skipped in %v with %d workers: they hardly contended", skips.Load(), took, workers)
	}
	// The source is free again, and the next ID is the greatest.
	last := mustClaim(t, ctx, stores[0], claimReq(src, "after", longLease))
	if last.ID <= lastID.Load() {
		t.Errorf("run %d started after run %d", last.ID, lastID.Load())
	}
	mustFinish(t, ctx, stores[1], succeeded(last))
}

// testExclusionFresh releases eight claimants at once, two on each
// replica, on each of many sources that never ran, and checks that exactly
// one of them wins each source. The winners keep their runs, so two winners
// are two runs holding one source at once.
func testExclusionFresh(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	stores := openReplicas(open, replicas)
	const sources, perReplica = 32, 2
	doubles := 0
	for i := range sources {
		src := fmt.Sprintf("%s/%d", prefix, i)
		outs := race(ctx, stores, perReplica, func(owner string) runclaim.ClaimRequest {
			return claimReq(src, owner, longLease)
		}, nil)
		won := winners(t, src, outs, nil, runclaim.ErrAlreadyRunning)
		if len(won) > 1 {
			doubles++
			if doubles <= 3 {
				t.Errorf("%d of %d claimants won %q, which never ran: %s", len(won), len(outs), src, describe(won))
			}
		}
		if len(won) == 0 {
			t.Errorf("no claimant won %q, which never ran", src)
		}
		for _, w := range won {
			// Finished through another replica than the winner's.
			mustFinish(t, ctx, stores[(w.replica+1)%len(stores)], succeeded(w.info))
		}
	}
	if doubles > 0 {
		t.Errorf("%d of %d sources had more than one winner", doubles, sources)
	}
}

// testExclusionLapsed lets the leases of many runs end, then releases eight
// claimants at once on each of their sources, and checks that exactly one
// of them takes over each, and that the old holder learns it lost.
func testExclusionLapsed(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	stores := openReplicas(open, replicas)
	const sources, perReplica = 16, 2
	// A lease under a second: the case waits for it to end, by the
	// store's own clock (waitPast), and asserts only what holds after that
	// moment, so a slow machine makes the wait longer, never the answer
	// different.
	const lease = 150 * time.Millisecond

	lapsed := make([]runclaim.RunInfo, sources)
	var last time.Time
	for i := range lapsed {
		src := fmt.Sprintf("%s/%d", prefix, i)
		lapsed[i] = mustClaim(t, ctx, stores[i%len(stores)], claimReq(src, "crashed", lease))
		last = lapsed[i].LeaseUntil
	}
	// Wait, without claiming, until the store's clock is past every lease
	// end, so that every claimant finds a lapsed run.
	clock := newStoreClock(t, ctx, stores[0], prefix+"/clock")
	clock.waitPast(t, ctx, last, 20*time.Second)

	doubles := 0
	for i, old := range lapsed {
		outs := race(ctx, stores, perReplica, func(owner string) runclaim.ClaimRequest {
			return claimReq(old.Source, owner, longLease)
		}, nil)
		won := winners(t, old.Source, outs, map[int64]bool{old.ID: true}, runclaim.ErrAlreadyRunning)
		switch {
		case len(won) > 1:
			doubles++
			if doubles <= 3 {
				t.Errorf("%d of %d claimants took over lapsed run %d of %q: %s", len(won), len(outs), old.ID, old.Source, describe(won))
			}
		case len(won) == 0:
			t.Errorf("no claimant took over lapsed run %d of %q", old.ID, old.Source)
		}
		for _, w := range won {
			if w.info.ID <= old.ID {
				t.Errorf("run %d took over run %d: IDs must strictly increase", w.info.ID, old.ID)
			}
		}
		// The old holder, whichever replica it asks, lost the run.
		s := stores[(i+1)%len(stores)]
		if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: old.ID, Source: old.Source, StartedAt: old.StartedAt, Lease: lease}); !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("Heartbeat of run %d, taken over: %v, want ErrLeaseLost", old.ID, err)
		}
		if err := s.Finish(ctx, succeeded(old)); !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("Finish of run %d, taken over: %v, want ErrLeaseLost", old.ID, err)
		}
		for _, w := range won {
			mustFinish(t, ctx, stores[w.replica], succeeded(w.info))
		}
	}
	if doubles > 0 {
		t.Errorf("%d of %d lapsed runs were taken over more than once", doubles, sources)
	}
}

// describe lists the runs of winners for a failure message.
func describe(won []outcome) string {
	var b strings.Builder
	for i, w := range won {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "run %d by %s", w.info.ID, w.owner)
	}
	return b.String()
}

// testReplicasShare checks that a run claimed through one replica is seen,
// extended and finished through the others, and that IDs increase across
// them.
func testReplicasShare(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	r := openReplicas(open, 3)
	src := prefix + "/a"
	lease := 20*time.Second + 654321*time.Microsecond

	a := mustClaim(t, ctx, r[0], claimReq(src, "owner-a", lease))
	_, err := r[1].Claim(ctx, claimReq(src, "owner-b", lease))
	wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), a)

	a.LeaseUntil = mustHeartbeat(t, ctx, r[1], a, lease)
	_, err = r[2].Claim(ctx, claimReq(src, "owner-c", lease))
	wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), a)

	mustFinish(t, ctx, r[2], failed(a, "boom"))
	if err := r[0].Finish(ctx, failed(a, "boom")); err != nil {
		t.Errorf("Finish of run %d repeated through another replica: %v, want nil", a.ID, err)
	}
	if err := r[1].Finish(ctx, succeeded(a)); !errors.Is(err, runclaim.ErrFinished) {
		t.Errorf("Finish(succeeded) of failed run %d through another replica: %v, want ErrFinished", a.ID, err)
	}
	if _, err := r[0].Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: lease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of finished run %d: %v, want ErrLeaseLost", a.ID, err)
	}

	// Claims through each replica in turn get increasing IDs.
	last := a.ID
	for i := range 6 {
		s := r[i%len(r)]
		b := mustClaim(t, ctx, s, claimReq(src, fmt.Sprintf("owner-%d", i), lease))
		if b.ID <= last {
			t.Errorf("claim through replica %d got ID %d after ID %d", i%len(r), b.ID, last)
		}
		last = b.ID
		mustFinish(t, ctx, r[(i+1)%len(r)], succeeded(b))
	}

	// An interval set through one replica holds back a claim through
	// another.
	iv := runclaim.ClaimRequest{Source: prefix + "/interval", Owner: "owner", Lease: lease, MinInterval: time.Hour}
	c := mustClaim(t, ctx, r[0], iv)
	mustFinish(t, ctx, r[1], succeeded(c))
	_, err = r[2].Claim(ctx, iv)
	if nc := skipOf(t, err, iv.Source, runclaim.ErrTooSoon); !nc.RetryAfter.Equal(c.StartedAt.Add(time.Hour)) {
		t.Errorf("RetryAfter = %v, want the last start plus the interval, %v", nc.RetryAfter, c.StartedAt.Add(time.Hour))
	}
}

// testSkipDoesNotWait checks that a claim of a source whose holder does
// nothing is answered at once, through every replica: a skip must not wait
// for the holder to finish or for its lease to end.
func testSkipDoesNotWait(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	stores := openReplicas(open, replicas)
	src := prefix + "/a"
	holder := mustClaim(t, ctx, stores[0], claimReq(src, "holder", longLease))

	// The claims run on a context of their own, cancelled if they hang, so
	// that a store that waits returns and its goroutines end.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	outs := make(chan outcome, 2*len(stores))
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range cap(outs) {
		r := i % len(stores)
		owner := fmt.Sprintf("replica-%d/claimant-%d", r, i/len(stores))
		wg.Go(func() {
			info, err := stores[r].Claim(cctx, claimReq(src, owner, longLease))
			outs <- outcome{replica: r, owner: owner, info: info, err: err}
		})
	}
	timeout := time.NewTimer(hangAfter)
	defer timeout.Stop()
	for range cap(outs) {
		select {
		case o := <-outs:
			if o.err == nil {
				t.Errorf("%s won %q, held by run %d: run %d", o.owner, src, holder.ID, o.info.ID)
				continue
			}
			wantHolder(t, skipOf(t, o.err, src, runclaim.ErrAlreadyRunning), holder)
		case <-timeout.C:
			cancel()
			t.Fatalf("a claim of %q, held by run %d, had not answered after %v: a skip must not wait for the holder", src, holder.ID, hangAfter)
		}
	}
	mustFinish(t, ctx, stores[1], succeeded(holder))
}

// testMinIntervalContention releases eight claimants at once, two on each
// replica, on each of many sources that never ran, all with an interval of
// an hour; each winner finishes its run as soon as its claim returns. Only
// one run may start per source.
func testMinIntervalContention(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	stores := openReplicas(open, replicas)
	const sources, perReplica = 32, 2
	doubles := 0
	for i := range sources {
		src := fmt.Sprintf("%s/%d", prefix, i)
		req := func(owner string) runclaim.ClaimRequest {
			return runclaim.ClaimRequest{Source: src, Owner: owner, Lease: longLease, MinInterval: time.Hour}
		}
		var finishErrs sync.Map
		outs := race(ctx, stores, perReplica, req, func(s runclaim.Store, info runclaim.RunInfo) {
			if err := s.Finish(ctx, succeeded(info)); err != nil {
				finishErrs.Store(info.ID, err)
			}
		})
		finishErrs.Range(func(id, err any) bool {
			t.Errorf("Finish(run %d of %q): %v", id, src, err)
			return true
		})
		won := winners(t, src, outs, nil, runclaim.ErrAlreadyRunning, runclaim.ErrTooSoon)
		switch {
		case len(won) > 1:
			doubles++
			if doubles <= 3 {
				t.Errorf("%d runs of %q started within its interval of an hour: %s", len(won), src, describe(won))
			}
		case len(won) == 0:
			t.Errorf("no claimant won %q, which never ran", src)
		default:
			_, err := stores[(won[0].replica+1)%len(stores)].Claim(ctx, req("after"))
			if nc := skipOf(t, err, src, runclaim.ErrTooSoon); !nc.RetryAfter.Equal(won[0].info.StartedAt.Add(time.Hour)) {
				t.Errorf("RetryAfter = %v, want the winner's start plus an hour, %v", nc.RetryAfter, won[0].info.StartedAt.Add(time.Hour))
			}
		}
	}
	if doubles > 0 {
		t.Errorf("%d of %d sources started more than one run within the interval", doubles, sources)
	}
}

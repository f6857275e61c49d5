// Package storetest is the conformance suite for implementations of
// runclaim.Store. Every Store in this module passes it (the Postgres store
// and the memory store), and a third-party backend proves that it behaves
// the same way by passing it too.
//
// # Running it against a backend
//
// Call Run from a test function of the backend's own package, with a
// function that returns a ready store (its tables created, its connections
// open) and registers its cleanup on the test it is given:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) runclaim.Store {
//			db := openTestDatabase(t) // closed with t.Cleanup
//			store, err := mybackend.New(db)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return store
//		})
//	}
//
// Run calls newStore once per subtest, one subtest at a time. Each subtest
// uses source names of its own, so newStore may return a fresh store every
// time or the same shared store. The suite uses only the Store interface
// and the exported types of package runclaim; it never reads the backend's
// storage directly.
//
// # What it checks
//
//   - Claim results: a won claim reports its source, owner, start and
//     lease end; a lost one a *runclaim.NotClaimedError naming the holder.
//   - Exclusion under contention: 16 goroutines hammer one source for a
//     second (longer on a slow machine, until at least ten claims won and
//     ten lost), and at no instant do two of them hold it.
//   - Expiry and takeover: a run whose lease has ended is expired by the
//     next claim, which starts a new run; the old holder's Heartbeat and
//     Finish then return runclaim.ErrLeaseLost.
//   - Heartbeats: a heartbeat extends the lease, and a run kept alive by
//     heartbeats holds its source past the end of its first lease.
//   - Fencing order: run IDs strictly increase across the whole store.
//   - Minimum interval: runclaim.ErrTooSoon, with RetryAfter the last start
//     plus the interval.
//   - Finish and heartbeat guards: a repeated Finish with the same outcome
//     succeeds, another outcome returns runclaim.ErrFinished, a heartbeat of
//     a finished or unknown run returns runclaim.ErrLeaseLost.
//   - Bad input: malformed requests are refused with an error that is not
//     a skip, and write nothing.
//   - Context: a cancelled or expired context makes every method return an
//     error matching its ctx.Err(), and a claim that returned it wrote
//     nothing.
//
// Tests that depend on time use real leases of 100 ms to 1 s and wait at
// most a few seconds, so they hold for a store whose clock is not the test
// process's own, such as a database server's. The whole suite takes about
// three seconds plus the backend's own latency.
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

// Run runs the conformance suite against the stores newStore returns, each
// check as a subtest of t. See the package documentation.
func Run(t *testing.T, newStore func(t *testing.T) runclaim.Store) {
	t.Helper()
	if newStore == nil {
		t.Fatal("storetest: Run: nil newStore")
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s runclaim.Store)
	}{
		{"ClaimResult", testClaimResult},
		{"ExclusionUnderContention", testExclusion},
		{"ExpiryAndTakeover", testExpiry},
		{"HeartbeatExtendsLease", testHeartbeat},
		{"FencingOrder", testFencing},
		{"MinInterval", testMinInterval},
		{"FinishGuards", testFinishGuards},
		{"BadInput", testBadInput},
		{"ContextEnded", testContext},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			if s == nil {
				t.Fatal("storetest: newStore returned nil")
			}
			tc.fn(t, s)
		})
	}
}

// suiteTimeout bounds every subtest, so that a store that hangs fails
// instead of blocking the test binary.
const suiteTimeout = 30 * time.Second

// pollEvery is how often a subtest that waits for a store's clock to pass a
// time tries again.
const pollEvery = 5 * time.Millisecond

// longLease is a lease no subtest outlives.
const longLease = time.Minute

// setup returns a context bounded by suiteTimeout and a prefix for source
// names unique to the subtest.
func setup(t *testing.T) (context.Context, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), suiteTimeout)
	t.Cleanup(cancel)
	return ctx, "storetest/" + t.Name()
}

func claimReq(source, owner string, lease time.Duration) runclaim.ClaimRequest {
	return runclaim.ClaimRequest{Source: source, Owner: owner, Lease: lease}
}

func succeeded(r runclaim.RunInfo) runclaim.FinishRequest {
	return runclaim.FinishRequest{ID: r.ID, Source: r.Source, Status: runclaim.StatusSucceeded}
}

func failed(r runclaim.RunInfo, text string) runclaim.FinishRequest {
	return runclaim.FinishRequest{ID: r.ID, Source: r.Source, Status: runclaim.StatusFailed, Error: text}
}

func mustClaim(t *testing.T, ctx context.Context, s runclaim.Store, req runclaim.ClaimRequest) runclaim.RunInfo {
	t.Helper()
	info, err := s.Claim(ctx, req)
	if err != nil {
		t.Fatalf("Claim(%q, owner %q): %v", req.Source, req.Owner, err)
	}
	if info.ID <= 0 {
		t.Fatalf("Claim(%q) returned run ID %d, want > 0", req.Source, info.ID)
	}
	return info
}

func mustFinish(t *testing.T, ctx context.Context, s runclaim.Store, req runclaim.FinishRequest) {
	t.Helper()
	if err := s.Finish(ctx, req); err != nil {
		t.Fatalf("Finish(%+v): %v", req, err)
	}
}

func mustHeartbeat(t *testing.T, ctx context.Context, s runclaim.Store, r runclaim.RunInfo, lease time.Duration) time.Time {
	t.Helper()
	until, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, Lease: lease})
	if err != nil {
		t.Fatalf("Heartbeat(run %d): %v", r.ID, err)
	}
	return until
}

// skipOf checks that err is a skip for reason and returns its details.
func skipOf(t *testing.T, err error, source string, reason error) *runclaim.NotClaimedError {
	t.Helper()
	if err == nil {
		t.Fatalf("claim of %q succeeded, want it skipped with %v", source, reason)
	}
	if !errors.Is(err, runclaim.ErrNotClaimed) || !errors.Is(err, reason) {
		t.Fatalf("claim of %q: got %v, want an error matching ErrNotClaimed and %v", source, err, reason)
	}
	var nc *runclaim.NotClaimedError
	if !errors.As(err, &nc) {
		t.Fatalf("claim of %q: %v is not a *runclaim.NotClaimedError", source, err)
	}
	if nc.Source != source {
		t.Errorf("NotClaimedError.Source = %q, want %q", nc.Source, source)
	}
	if nc.Reason != reason {
		t.Errorf("NotClaimedError.Reason = %v, want %v", nc.Reason, reason)
	}
	return nc
}

// wantHolder checks that a skip names want as the source's holder.
func wantHolder(t *testing.T, nc *runclaim.NotClaimedError, want runclaim.RunInfo) {
	t.Helper()
	if nc.Holder == nil {
		t.Fatalf("skip of %q names no holder, want run %d", nc.Source, want.ID)
	}
	h := *nc.Holder
	if h.ID != want.ID || h.Source != want.Source || h.Owner != want.Owner || !h.StartedAt.Equal(want.StartedAt) {
		t.Errorf("skip names holder %+v, want run %d of %q by %q started %v", h, want.ID, want.Source, want.Owner, want.StartedAt)
	}
	if !nc.RetryAfter.Equal(h.LeaseUntil) {
		t.Errorf("skip's RetryAfter = %v, want the holder's lease end %v", nc.RetryAfter, h.LeaseUntil)
	}
}

// claimWhenFree claims req.Source, trying again while it is skipped, until
// it succeeds or the deadline passes. check sees every skip.
func claimWhenFree(t *testing.T, ctx context.Context, s runclaim.Store, req runclaim.ClaimRequest, within time.Duration, check func(error)) runclaim.RunInfo {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		info, err := s.Claim(ctx, req)
		if err == nil {
			return info
		}
		if !errors.Is(err, runclaim.ErrNotClaimed) {
			t.Fatalf("Claim(%q): %v", req.Source, err)
		}
		check(err)
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("Claim(%q) still skipped after %v: %v", req.Source, within, err)
		case <-ctx.Done():
			t.Fatalf("Claim(%q): %v", req.Source, ctx.Err())
		}
	}
}

// testClaimResult checks what a won and a lost claim report.
func testClaimResult(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	lease := 45 * time.Second
	a := mustClaim(t, ctx, s, claimReq(src, "owner-a", lease))
	if a.Source != src || a.Owner != "owner-a" {
		t.Errorf("claim returned source %q owner %q, want %q and %q", a.Source, a.Owner, src, "owner-a")
	}
	if a.StartedAt.IsZero() {
		t.Error("claim returned a zero StartedAt")
	}
	if got := a.LeaseUntil.Sub(a.StartedAt); got != lease {
		t.Errorf("LeaseUntil - StartedAt = %v, want the lease %v", got, lease)
	}

	_, err := s.Claim(ctx, claimReq(src, "owner-b", lease))
	nc := skipOf(t, err, src, runclaim.ErrAlreadyRunning)
	wantHolder(t, nc, a)
	if !nc.Holder.LeaseUntil.Equal(a.LeaseUntil) {
		t.Errorf("holder's LeaseUntil = %v, want %v", nc.Holder.LeaseUntil, a.LeaseUntil)
	}
	// The same owner is refused too: a claim is per source, not per owner.
	_, err = s.Claim(ctx, claimReq(src, "owner-a", lease))
	wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), a)

	// Sources are independent.
	b := mustClaim(t, ctx, s, claimReq(prefix+"/b", "owner-b", lease))
	if b.ID == a.ID {
		t.Errorf("two running runs share ID %d", a.ID)
	}
	mustFinish(t, ctx, s, succeeded(b))

	// Finishing frees the source at once, whatever the lease.
	mustFinish(t, ctx, s, succeeded(a))
	c := mustClaim(t, ctx, s, claimReq(src, "owner-b", lease))
	mustFinish(t, ctx, s, failed(c, "boom"))
}

// testExclusion hammers one source from many goroutines and checks, with a
// counter of holders kept on the Go side, that no two ever hold it at once.
// Each winner counts itself in after its claim returned and out before it
// finishes, so the counted interval lies inside the store's.
func testExclusion(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
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
	last := mustClaim(t, ctx, s, claimReq(src, "after", longLease))
	if last.ID <= lastID.Load() {
		t.Errorf("run %d started after run %d", last.ID, lastID.Load())
	}
	mustFinish(t, ctx, s, succeeded(last))
}

// testExpiry checks that a run whose lease ended is taken over by the next
// claim, and that its holder then learns it lost the run.
func testExpiry(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	const lease = 150 * time.Millisecond
	a := mustClaim(t, ctx, s, claimReq(src, "owner-a", lease))

	// Until the lease ends every claim is refused and names a; then one
	// succeeds, and its start, by the store's clock, is not before a's
	// lease end.
	refused := 0
	b := claimWhenFree(t, ctx, s, claimReq(src, "owner-b", longLease), 20*lease, func(err error) {
		refused++
		wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), a)
	})
	t.Logf("claim refused %d times before the lease of %v ended", refused, lease)
	if b.StartedAt.Before(a.LeaseUntil) {
		t.Errorf("run %d took over at %v, before run %d's lease ended at %v", b.ID, b.StartedAt, a.ID, a.LeaseUntil)
	}
	if b.ID <= a.ID {
		t.Errorf("taking over run %d got ID %d, want a greater one", a.ID, b.ID)
	}

	// The expired holder learns it, whatever it tries.
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, Lease: lease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of expired run %d: %v, want ErrLeaseLost", a.ID, err)
	}
	if err := s.Finish(ctx, succeeded(a)); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Finish(succeeded) of expired run %d: %v, want ErrLeaseLost", a.ID, err)
	}
	if err := s.Finish(ctx, failed(a, "late")); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Finish(failed) of expired run %d: %v, want ErrLeaseLost", a.ID, err)
	}

	// None of that disturbed the new holder.
	_, err := s.Claim(ctx, claimReq(src, "owner-a", lease))
	wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), b)
	mustHeartbeat(t, ctx, s, b, longLease)
	mustFinish(t, ctx, s, succeeded(b))
}

// testHeartbeat checks that heartbeats extend the lease and keep the run's
// source held past the end of its first lease, by the store's own clock: a
// heartbeat's result minus the lease is the store's time of the heartbeat.
func testHeartbeat(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	const lease = time.Second
	const every = lease / 10
	a := mustClaim(t, ctx, s, claimReq(src, "owner-a", lease))

	_, err := s.Claim(ctx, claimReq(src, "owner-b", lease))
	wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), a)

	tick := time.NewTicker(every)
	defer tick.Stop()
	deadline := time.NewTimer(10 * lease)
	defer deadline.Stop()
	prev := a.LeaseUntil
	beats := 0
	for {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("after %d heartbeats in %v the store's clock has not passed the first lease end %v", beats, 10*lease, a.LeaseUntil)
		}
		until := mustHeartbeat(t, ctx, s, a, lease)
		beats++
		if !until.After(prev) {
			t.Fatalf("heartbeat %d returned lease end %v, not after the previous one %v", beats, until, prev)
		}
		prev = until
		// Sent after the heartbeat returned, so after the store extended
		// the lease: refused, and the holder's lease end is the new one.
		_, err := s.Claim(ctx, claimReq(src, "owner-b", lease))
		nc := skipOf(t, err, src, runclaim.ErrAlreadyRunning)
		wantHolder(t, nc, a)
		if nc.Holder != nil && !nc.Holder.LeaseUntil.Equal(until) {
			t.Errorf("after heartbeat %d the holder's lease ends %v, want %v", beats, nc.Holder.LeaseUntil, until)
		}
		if until.Add(-lease).After(a.LeaseUntil) {
			break // the store's clock passed the first lease end, and the run held
		}
	}
	t.Logf("run held past its first lease with %d heartbeats", beats)

	// A heartbeat with a longer lease extends by that lease.
	long := mustHeartbeat(t, ctx, s, a, longLease)
	if long.Sub(prev) < longLease-lease {
		t.Errorf("heartbeat with lease %v returned %v, want at least %v after the previous end %v", longLease, long, longLease-lease, prev)
	}
	mustFinish(t, ctx, s, succeeded(a))
}

// testFencing checks that IDs strictly increase across the whole store, in
// sequence and under concurrency.
func testFencing(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	var last int64
	for i := range 12 {
		src := fmt.Sprintf("%s/seq-%d", prefix, i%3)
		r := mustClaim(t, ctx, s, claimReq(src, "owner", longLease))
		if r.ID <= last {
			t.Errorf("claim %d of %q got ID %d after ID %d", i, src, r.ID, last)
		}
		last = r.ID
		if i%2 == 0 {
			mustFinish(t, ctx, s, succeeded(r))
		} else {
			mustFinish(t, ctx, s, failed(r, "odd"))
		}
	}

	const workers, each = 8, 10
	ids := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		src := fmt.Sprintf("%s/par-%d", prefix, w)
		wg.Go(func() {
			for range each {
				r, err := s.Claim(ctx, claimReq(src, "owner", longLease))
				if err != nil {
					t.Errorf("Claim(%q): %v", src, err)
					return
				}
				ids[w] = append(ids[w], r.ID)
				if err := s.Finish(ctx, succeeded(r)); err != nil {
					t.Errorf("Finish(run %d): %v", r.ID, err)
					return
				}
			}
		})
	}
	wg.Wait()
	seen := make(map[int64]bool)
	var maxID int64
	for w, list := range ids {
		for i, id := range list {
			if id <= last {
				t.Errorf("worker %d got ID %d, not above %d issued before it started", w, id, last)
			}
			if i > 0 && id <= list[i-1] {
				t.Errorf("worker %d got ID %d after ID %d", w, id, list[i-1])
			}
			if seen[id] {
				t.Errorf("ID %d issued twice", id)
			}
			seen[id] = true
			maxID = max(maxID, id)
		}
	}
	r := mustClaim(t, ctx, s, claimReq(prefix+"/seq-0", "owner", longLease))
	if r.ID <= maxID {
		t.Errorf("claim after all others got ID %d, not above %d", r.ID, maxID)
	}
	mustFinish(t, ctx, s, succeeded(r))
}

// testMinInterval checks ErrTooSoon and its RetryAfter.
func testMinInterval(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	const interval = 300 * time.Millisecond
	req := runclaim.ClaimRequest{Source: src, Owner: "owner", Lease: longLease, MinInterval: interval}

	a := mustClaim(t, ctx, s, req)
	// While a runs, the skip is a skip whatever its reason.
	if _, err := s.Claim(ctx, req); !errors.Is(err, runclaim.ErrNotClaimed) {
		t.Fatalf("claim while run %d runs: %v, want ErrNotClaimed", a.ID, err)
	}
	mustFinish(t, ctx, s, succeeded(a))

	// Finished, but too soon: the interval runs from start to start.
	retryAfter := a.StartedAt.Add(interval)
	refused := 0
	b := claimWhenFree(t, ctx, s, req, 20*interval, func(err error) {
		refused++
		nc := skipOf(t, err, src, runclaim.ErrTooSoon)
		if errors.Is(err, runclaim.ErrAlreadyRunning) {
			t.Errorf("a too-soon skip matches ErrAlreadyRunning: %v", err)
		}
		if nc.Holder != nil {
			t.Errorf("a too-soon skip names holder %+v", *nc.Holder)
		}
		if !nc.RetryAfter.Equal(retryAfter) {
			t.Errorf("RetryAfter = %v, want the last start plus the interval, %v", nc.RetryAfter, retryAfter)
		}
	})
	if refused == 0 {
		t.Logf("no claim was refused as too soon: the store took more than %v to finish a run", interval)
	}
	if b.StartedAt.Before(retryAfter) {
		t.Errorf("run %d started at %v, less than %v after run %d started at %v", b.ID, b.StartedAt, interval, a.ID, a.StartedAt)
	}
	mustFinish(t, ctx, s, failed(b, "failed runs count too"))

	// The interval is recorded with the run: it binds a claimer that asked
	// for none, until b's start plus b's interval.
	bare := claimReq(src, "other", longLease)
	c := claimWhenFree(t, ctx, s, bare, 20*interval, func(err error) {
		nc := skipOf(t, err, src, runclaim.ErrTooSoon)
		if want := b.StartedAt.Add(interval); !nc.RetryAfter.Equal(want) {
			t.Errorf("RetryAfter = %v, want run %d's start plus its recorded interval, %v", nc.RetryAfter, b.ID, want)
		}
	})
	if c.StartedAt.Before(b.StartedAt.Add(interval)) {
		t.Errorf("a claimer without an interval started run %d at %v, less than run %d's recorded %v after its start %v", c.ID, c.StartedAt, b.ID, interval, b.StartedAt)
	}
	mustFinish(t, ctx, s, succeeded(c))

	// It counts from the latest start, of any run, and the longer of the
	// claimer's interval and the recorded one wins.
	long := req
	long.MinInterval = time.Hour
	_, err := s.Claim(ctx, long)
	nc := skipOf(t, err, src, runclaim.ErrTooSoon)
	if want := c.StartedAt.Add(time.Hour); !nc.RetryAfter.Equal(want) {
		t.Errorf("RetryAfter = %v, want the latest start plus an hour, %v", nc.RetryAfter, want)
	}

	// A source that never ran is never too soon.
	d := mustClaim(t, ctx, s, runclaim.ClaimRequest{Source: prefix + "/fresh", Owner: "owner", Lease: longLease, MinInterval: time.Hour})
	mustFinish(t, ctx, s, succeeded(d))
}

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
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, Lease: longLease}); !errors.Is(err, runclaim.ErrLeaseLost) {
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
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: b.ID, Source: b.Source, Lease: longLease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of failed run %d: %v, want ErrLeaseLost", b.ID, err)
	}

	// A run the store never issued is not this holder's either.
	unknown := b
	unknown.ID += 1 << 40
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: unknown.ID, Source: unknown.Source, Lease: longLease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of unknown run %d: %v, want ErrLeaseLost", unknown.ID, err)
	}
	if err := s.Finish(ctx, succeeded(unknown)); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Finish of unknown run %d: %v, want ErrLeaseLost", unknown.ID, err)
	}

	// None of it left the source held.
	c := mustClaim(t, ctx, s, claimReq(src, "owner", longLease))
	mustFinish(t, ctx, s, succeeded(c))
}

// testBadInput checks that malformed requests are refused with an error
// that is not a skip, and write nothing.
func testBadInput(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)

	// Invalid sources. Each has a valid counterpart, which a store that
	// cut or cleaned the name might have claimed instead: claiming that
	// afterwards shows nothing was written.
	long := prefix + "/" + strings.Repeat("x", runclaim.MaxSourceLen)
	for _, tc := range []struct{ name, source, valid string }{
		{"empty", "", prefix + "/empty"},
		{"NUL", prefix + "/nul\x00tail", prefix + "/nul"},
		{"too long", long[:runclaim.MaxSourceLen+1], long[:runclaim.MaxSourceLen]},
		{"invalid UTF-8", prefix + "/utf8\xff", prefix + "/utf8"},
		{"newline", prefix + "/nl\n", prefix + "/nl"},
		{"tab", prefix + "/tab\t", prefix + "/tab"},
	} {
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
		{"zero ID", runclaim.HeartbeatRequest{ID: 0, Source: r.Source, Lease: longLease}},
		{"negative ID", runclaim.HeartbeatRequest{ID: -r.ID, Source: r.Source, Lease: longLease}},
		{"no source", runclaim.HeartbeatRequest{ID: r.ID, Lease: longLease}},
		{"zero lease", runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, Lease: 0}},
		{"lease below MinLease", runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, Lease: runclaim.MinLease - time.Nanosecond}},
		{"lease above MaxLease", runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, Lease: runclaim.MaxLease + time.Second}},
	} {
		if _, err := s.Heartbeat(ctx, tc.req); err == nil || errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("heartbeat with %s: %v, want an error other than ErrLeaseLost", tc.name, err)
		}
	}
	for _, tc := range []struct {
		name string
		req  runclaim.FinishRequest
	}{
		{"zero ID", runclaim.FinishRequest{ID: 0, Source: r.Source, Status: runclaim.StatusSucceeded}},
		{"no source", runclaim.FinishRequest{ID: r.ID, Status: runclaim.StatusSucceeded}},
		{"status running", runclaim.FinishRequest{ID: r.ID, Source: r.Source, Status: runclaim.StatusRunning}},
		{"status expired", runclaim.FinishRequest{ID: r.ID, Source: r.Source, Status: runclaim.StatusExpired}},
		{"status released", runclaim.FinishRequest{ID: r.ID, Source: r.Source, Status: runclaim.StatusReleased}},
		{"empty status", runclaim.FinishRequest{ID: r.ID, Source: r.Source}},
		{"unknown status", runclaim.FinishRequest{ID: r.ID, Source: r.Source, Status: "done"}},
		{"succeeded with error text", runclaim.FinishRequest{ID: r.ID, Source: r.Source, Status: runclaim.StatusSucceeded, Error: "boom"}},
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

// testContext checks that an ended context makes every method return its
// error, and a claim write nothing.
func testContext(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()

	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"past deadline", expired, context.DeadlineExceeded},
	} {
		_, err := s.Claim(c.ctx, claimReq(src, "owner", longLease))
		if !errors.Is(err, c.want) || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("Claim with a %s context: %v, want %v and not ErrNotClaimed", c.name, err, c.want)
		}
	}
	// Nothing was written: the source is free, and not too soon.
	r := mustClaim(t, ctx, s, runclaim.ClaimRequest{Source: src, Owner: "owner", Lease: longLease, MinInterval: time.Hour})

	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"past deadline", expired, context.DeadlineExceeded},
	} {
		if _, err := s.Heartbeat(c.ctx, runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, Lease: longLease}); !errors.Is(err, c.want) {
			t.Errorf("Heartbeat with a %s context: %v, want %v", c.name, err, c.want)
		}
		if err := s.Finish(c.ctx, succeeded(r)); !errors.Is(err, c.want) {
			t.Errorf("Finish with a %s context: %v, want %v", c.name, err, c.want)
		}
	}
	// Finish with the same outcome succeeds whether or not the refused
	// one was recorded.
	mustFinish(t, ctx, s, succeeded(r))
}

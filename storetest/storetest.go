package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// A suiteCase is one check of the suite. Exactly one of store and replicas
// is set: store for a check that needs one Store, replicas for one that
// opens several Stores on one backend, as the replicas of a service do.
// Adding a check is one function and one line in cases.
type suiteCase struct {
	name     string
	store    func(t *testing.T, s runclaim.Store)
	replicas func(t *testing.T, open func() runclaim.Store)
}

// cases is the whole suite, in the order it runs.
var cases = []suiteCase{
	{name: "ClaimResult", store: testClaimResult},
	{name: "ExclusionUnderContention", replicas: testExclusion},
	{name: "ExclusionOnFreshSources", replicas: testExclusionFresh},
	{name: "ExclusionOnLapsedRuns", replicas: testExclusionLapsed},
	{name: "ReplicasShareRuns", replicas: testReplicasShare},
	{name: "SkipDoesNotWait", replicas: testSkipDoesNotWait},
	{name: "ExpiryAndTakeover", store: testExpiry},
	{name: "HeartbeatExtendsLease", store: testHeartbeat},
	{name: "FencingOrder", store: testFencing},
	{name: "MinInterval", store: testMinInterval},
	{name: "MinIntervalCountsEveryRun", store: testMinIntervalEveryRun},
	{name: "MinIntervalUnderContention", replicas: testMinIntervalContention},
	{name: "FinishGuards", store: testFinishGuards},
	{name: "FinishLongErrorText", store: testFinishLongError},
	{name: "LookalikeSources", store: testLookalikeSources},
	{name: "BadInput", store: testBadInput},
	{name: "ContextEnded", store: testContext},
	{name: "ContextCancelledMidCall", replicas: testContextMidCall},
	{name: "LapsedLeaseIsLost", store: testLapsedLease},
	{name: "TooSoonOverLapsedRun", store: testTooSoonOverLapsedRun},
	{name: "FinishRace", replicas: testFinishRace},
	{name: "FinishMany", store: testFinishMany},
	{name: "SourceMustMatch", store: testSourceMustMatch},
	{name: "StartMustMatch", store: testStartMustMatch},
	{name: "LostClaimAnswer", store: testLostClaimAnswer},
	{name: "TickDone", store: testTickDone},
	{name: "TickLiveRun", store: testTickLiveRun},
	{name: "TickExpiredReopens", store: testTickExpiredReopens},
	{name: "TickMinInterval", store: testTickMinInterval},
	{name: "TickPrecision", store: testTickPrecision},
	{name: "TickPlainShare", store: testTickPlainShare},
	{name: "TickUnderContention", replicas: testTickUnderContention},
	{name: "ManyResult", store: testManyResult},
	{name: "ManyBadInput", store: testManyBadInput},
	{name: "ManyTakeover", store: testManyTakeover},
	{name: "ManyMinInterval", store: testManyMinInterval},
	{name: "ManyTickDone", store: testManyTickDone},
	{name: "ManyExclusive", replicas: testManyExclusive},
	{name: "ManyHeartbeats", store: testManyHeartbeats},
	{name: "ManyHeartbeatsByRun", store: testManyHeartbeatsByRun},
	{name: "Unclaim", store: testUnclaim},
	{name: "Pause", store: testPause},
	{name: "TimedPause", store: testTimedPause},
	{name: "TriggerOnce", store: testTriggerOnce},
	{name: "TriggerNotOverRunning", store: testTriggerNotOverRunning},
	{name: "TriggerNotOverPause", store: testTriggerNotOverPause},
	{name: "TriggerTickDone", store: testTriggerTickDone},
	{name: "TriggerUnderContention", replicas: testTriggerUnderContention},
	{name: "ManyControl", store: testManyControl},
	{name: "ControlBadInput", store: testControlBadInput},
	{name: "KeyMaxRunning", store: testKeyMaxRunning},
	{name: "KeyShared", store: testKeyShared},
	{name: "KeyUnclaim", store: testKeyUnclaim},
	{name: "KeyMaxStarts", store: testKeyMaxStarts},
	{name: "KeyMinGap", store: testKeyMinGap},
	{name: "KeyCooldown", store: testKeyCooldown},
	{name: "KeyOrder", store: testKeyOrder},
	{name: "ManyKeys", store: testManyKeys},
	{name: "ManyKeysRoom", store: testManyKeysRoom},
	{name: "KeyBadInput", store: testKeyBadInput},
	{name: "KeyRoomForBoth", replicas: testKeyRoomForBoth},
	{name: "KeyReplicas", replicas: testKeyReplicas},
	{name: "ReplaceAsks", store: testReplaceAsks},
	{name: "ReplaceSkipsFirst", store: testReplaceSkipsFirst},
	{name: "ReplaceDead", store: testReplaceDead},
	{name: "ReplaceTwo", store: testReplaceTwo},
	{name: "StateHandedOn", store: testStateHandedOn},
	{name: "StateFencedByLease", store: testStateFencedByLease},
	{name: "StateBadInput", store: testStateBadInput},
	{name: "StateMany", store: testStateMany},
}

// RunReplicas runs the whole suite, each check as a subtest of t, the cases
// that need several replicas included: newBackend makes a fresh, empty
// backend and returns a function that opens one more Store on it, as
// another replica of a service would. A backend whose Store value is
// shared by its replicas (the memory store) returns that one value from
// open.
//
// newBackend is called once per subtest, with the subtest's t; open is
// called only from that subtest's goroutine, at most a few times. See the
// package documentation.
func RunReplicas(t *testing.T, newBackend func(t *testing.T) (open func() runclaim.Store)) {
	t.Helper()
	if newBackend == nil {
		t.Fatal("storetest: RunReplicas: nil newBackend")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			open := newBackend(t)
			if open == nil {
				t.Fatal("storetest: newBackend returned a nil open function")
			}
			checked := func() runclaim.Store {
				s := open()
				if s == nil {
					t.Fatal("storetest: open returned nil")
				}
				return s
			}
			if tc.store != nil {
				tc.store(t, checked())
				return
			}
			tc.replicas(t, checked)
		})
	}
}

// suiteTimeout bounds every subtest, so that a store that hangs fails
// instead of blocking the test binary.
const suiteTimeout = 30 * time.Second

// hangAfter is how long the suite waits for a call that a correct store
// answers at once before it reports the call as waiting. It is far above
// any latency, so that a loaded machine does not trip it.
const hangAfter = 10 * time.Second

// pollEvery is how often a subtest that waits for a store's clock to pass a
// time tries again.
const pollEvery = 5 * time.Millisecond

// longLease is a lease no subtest outlives.
const longLease = time.Minute

// replicas is how many Stores a replica case opens.
const replicas = 4

// setup returns a context bounded by suiteTimeout and a prefix for source
// names unique to the subtest.
func setup(t *testing.T) (context.Context, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), suiteTimeout)
	t.Cleanup(cancel)
	return ctx, "storetest/" + t.Name()
}

// openReplicas opens n Stores on the subtest's backend.
func openReplicas(open func() runclaim.Store, n int) []runclaim.Store {
	stores := make([]runclaim.Store, n)
	for i := range stores {
		stores[i] = open()
	}
	return stores
}

func claimReq(source, owner string, lease time.Duration) runclaim.ClaimRequest {
	return runclaim.ClaimRequest{Source: source, Owner: owner, Lease: lease}
}

func succeeded(r runclaim.RunInfo) runclaim.FinishRequest {
	return runclaim.FinishRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Status: runclaim.StatusSucceeded}
}

func failed(r runclaim.RunInfo, text string) runclaim.FinishRequest {
	return runclaim.FinishRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Status: runclaim.StatusFailed, Error: text}
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
		t.Fatalf("Finish(run %d as %s): %v", req.ID, req.Status, err)
	}
}

func mustHeartbeat(t *testing.T, ctx context.Context, s runclaim.Store, r runclaim.RunInfo, lease time.Duration) time.Time {
	t.Helper()
	until, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: lease})
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

// wantHolder checks that a skip names want as the source's holder, as it is
// now: want.LeaseUntil must be the lease end of the holder's last claim or
// heartbeat.
func wantHolder(t *testing.T, nc *runclaim.NotClaimedError, want runclaim.RunInfo) {
	t.Helper()
	if nc.Holder == nil {
		t.Fatalf("skip of %q names no holder, want run %d", nc.Source, want.ID)
	}
	h := *nc.Holder
	if h.ID != want.ID || h.Source != want.Source || h.Owner != want.Owner || !h.StartedAt.Equal(want.StartedAt) {
		t.Errorf("skip names holder %+v, want run %d of %q by %q started %v", h, want.ID, want.Source, want.Owner, want.StartedAt)
	}
	if !h.LeaseUntil.Equal(want.LeaseUntil) {
		t.Errorf("skip names holder run %d with lease end %v, want %v, the end its claim or last heartbeat returned", h.ID, h.LeaseUntil, want.LeaseUntil)
	}
	if !nc.RetryAfter.Equal(h.LeaseUntil) {
		t.Errorf("skip's RetryAfter = %v, want the holder's lease end %v", nc.RetryAfter, h.LeaseUntil)
	}
}

// claimWhenFree claims req.Source, trying again while it is skipped, until
// it succeeds or the deadline passes. check sees every skip.
func claimWhenFree(t *testing.T, ctx context.Context, s runclaim.Store, req runclaim.ClaimRequest, within time.Duration, check func(error)) runclaim.RunInfo {
	t.Helper()
	var info runclaim.RunInfo
	poll(t, ctx, within, func() (bool, string) {
		var err error
		if info, err = s.Claim(ctx, req); err == nil {
			return true, ""
		}
		if !errors.Is(err, runclaim.ErrNotClaimed) {
			t.Fatalf("Claim(%q): %v", req.Source, err)
		}
		check(err)
		return false, fmt.Sprintf("Claim(%q) still skipped: %v", req.Source, err)
	})
	return info
}

// poll calls try every pollEvery until it reports done, and fails the
// test with what try last said once within has passed or ctx has ended.
func poll(t *testing.T, ctx context.Context, within time.Duration, try func() (done bool, why string)) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		done, why := try()
		if done {
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("after %v: %s", within, why)
		case <-ctx.Done():
			t.Fatalf("%s: %v", why, ctx.Err())
		}
	}
}

// A storeClock reads a store's clock: a heartbeat returns the store's time
// of the heartbeat plus the lease. It holds a run of a source of its own.
type storeClock struct {
	s   runclaim.Store
	run runclaim.RunInfo
}

func newStoreClock(t *testing.T, ctx context.Context, s runclaim.Store, source string) *storeClock {
	t.Helper()
	c := &storeClock{s: s, run: mustClaim(t, ctx, s, claimReq(source, "clock", longLease))}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), suiteTimeout)
		defer cancel()
		if err := s.Finish(ctx, succeeded(c.run)); err != nil {
			t.Errorf("Finish(clock run %d): %v", c.run.ID, err)
		}
	})
	return c
}

// now returns the store's time.
func (c *storeClock) now(t *testing.T, ctx context.Context) time.Time {
	t.Helper()
	return mustHeartbeat(t, ctx, c.s, c.run, longLease).Add(-longLease)
}

// waitPast waits until the store's clock is past when.
func (c *storeClock) waitPast(t *testing.T, ctx context.Context, when time.Time, within time.Duration) {
	t.Helper()
	poll(t, ctx, within, func() (bool, string) {
		now := c.now(t, ctx)
		return now.After(when), fmt.Sprintf("the store's clock reads %v, not past %v", now, when)
	})
}

// An outcome is what one claimant of a race got.
type outcome struct {
	replica int
	owner   string
	info    runclaim.RunInfo
	err     error
}

// race releases perReplica claimants on each of stores at once, each
// claiming with the request that req makes for its owner name, and returns
// what they got. onWin, if not nil, runs in the winner's goroutine as soon
// as its claim returned.
func race(ctx context.Context, stores []runclaim.Store, perReplica int, req func(owner string) runclaim.ClaimRequest, onWin func(s runclaim.Store, info runclaim.RunInfo)) []outcome {
	outs := make([]outcome, len(stores)*perReplica)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range outs {
		r := i % len(stores)
		s := stores[r]
		o := &outs[i]
		o.replica, o.owner = r, fmt.Sprintf("replica-%d/claimant-%d", r, i/len(stores))
		wg.Go(func() {
			<-gate
			o.info, o.err = s.Claim(ctx, req(o.owner))
			if o.err == nil && onWin != nil {
				onWin(s, o.info)
			}
		})
	}
	close(gate)
	wg.Wait()
	return outs
}

// winners checks a race for source: every claimant either won or was
// skipped for one of reasons, a skip naming as holder only a run in known or
// a winner, and it returns the winners.
func winners(t *testing.T, source string, outs []outcome, known map[int64]bool, reasons ...error) []outcome {
	t.Helper()
	var won []outcome
	for _, o := range outs {
		if o.err == nil {
			if o.info.Source != source || o.info.Owner != o.owner {
				t.Errorf("%s: claim of %q returned source %q owner %q", o.owner, source, o.info.Source, o.info.Owner)
			}
			won = append(won, o)
		}
	}
	for _, o := range outs {
		if o.err == nil {
			continue
		}
		var nc *runclaim.NotClaimedError
		ok := errors.As(o.err, &nc) && errors.Is(o.err, runclaim.ErrNotClaimed)
		matched := false
		for _, r := range reasons {
			matched = matched || errors.Is(o.err, r)
		}
		if !ok || !matched {
			t.Errorf("%s: claim of %q: %v, want a run or a skip matching one of %v", o.owner, source, o.err, reasons)
			continue
		}
		if nc.Holder == nil {
			continue
		}
		named := known[nc.Holder.ID]
		for _, w := range won {
			named = named || w.info.ID == nc.Holder.ID
		}
		if !named {
			t.Errorf("%s: claim of %q skipped, naming run %d as holder, which is neither a winner nor an earlier run", o.owner, source, nc.Holder.ID)
		}
	}
	return won
}

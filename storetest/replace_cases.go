package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// replaceReq is a claim of source with Replace and token.
func replaceReq(source, owner, token string, lease time.Duration) runclaim.ClaimRequest {
	req := claimReq(source, owner, lease)
	req.Replace = token
	return req
}

// wantAsked checks that run's heartbeat extends its lease and says
// whether the run was asked to stop (an error matching ErrReplaced and
// ErrLeaseLost), and returns run with its new lease.
func wantAsked(t *testing.T, s runclaim.Store, run runclaim.RunInfo, asked bool) runclaim.RunInfo {
	t.Helper()
	until, err := s.Heartbeat(t.Context(), runclaim.HeartbeatRequest{ID: run.ID, Source: run.Source, StartedAt: run.StartedAt, Lease: longLease})
	switch {
	case asked && (!errors.Is(err, runclaim.ErrReplaced) || !errors.Is(err, runclaim.ErrLeaseLost)):
		t.Errorf("heartbeat of run %d, asked to stop: %v; want ErrReplaced, which matches ErrLeaseLost", run.ID, err)
	case !asked && err != nil:
		t.Errorf("heartbeat of run %d, not asked to stop: %v", run.ID, err)
	}
	if !until.After(run.StartedAt) {
		t.Errorf("heartbeat of run %d: lease until %v; want it extended, asked to stop or not", run.ID, until)
	}
	run.LeaseUntil = until
	return run
}

// testReplaceAsks: a claim with Replace of a source whose live run has no
// stop request records one and is skipped (ErrAlreadyRunning, naming the
// holder), and the holder keeps its lease: its heartbeats extend it and
// say it was asked (ErrReplaced). Claims without the token are skipped
// while the holder runs and after it has finished (the reservation); the
// claim with the token wins once it has, and the replaced run's Finish,
// of any outcome, returns nil. Once the replacer's run has started, the
// reservation is gone.
func testReplaceAsks(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	holder := mustClaim(t, ctx, s, claimReq(src, "holder", longLease))
	rep := replaceReq(src, "replacer", "token-1", longLease)
	wantHolder(t, skipOf(t, tryClaim(ctx, s, rep), src, runclaim.ErrAlreadyRunning), holder)
	holder = wantAsked(t, s, holder, true)
	wantHolder(t, skipOf(t, tryClaim(ctx, s, claimReq(src, "plain", longLease)), src, runclaim.ErrAlreadyRunning), holder)
	wantHolder(t, skipOf(t, tryClaim(ctx, s, rep), src, runclaim.ErrAlreadyRunning), holder)
	mustFinish(t, ctx, s, succeeded(holder))
	if err := s.Finish(ctx, failed(holder, "after the fact")); err != nil {
		t.Errorf("a second Finish of the replaced run, with another outcome: %v, want nil", err)
	}
	for _, other := range []runclaim.ClaimRequest{claimReq(src, "plain", longLease), replaceReq(src, "other", "token-2", longLease)} {
		nc := skipOf(t, tryClaim(ctx, s, other), src, runclaim.ErrAlreadyRunning)
		if nc.RetryAfter.IsZero() {
			t.Errorf("a claim of %q reserved for another claim: no RetryAfter", src)
		}
	}
	won := mustClaim(t, ctx, s, rep)
	mustFinish(t, ctx, s, succeeded(won))
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, claimReq(src, "plain", longLease))))

	// A source with no running run is claimed at once.
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, replaceReq(prefix+"/free", "replacer", "token-3", longLease))))
}

// testReplaceSkipsFirst: a pause, a tick served (the running run's own,
// too) and the minimum interval skip a claim with Replace at once, and it
// asks nothing: the holder's heartbeat says nothing of a request.
func testReplaceSkipsFirst(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ticked := prefix + "/tick"
	treq := claimReq(ticked, "holder", longLease)
	treq.Tick = tick
	holder := mustClaim(t, ctx, s, treq)
	trep := replaceReq(ticked, "replacer", "token-t", longLease)
	trep.Tick = tick
	skipOf(t, tryClaim(ctx, s, trep), ticked, runclaim.ErrTickDone)
	_ = wantAsked(t, s, holder, false)
	mustFinish(t, ctx, s, succeeded(holder))

	young := prefix + "/young"
	yreq := claimReq(young, "holder", longLease)
	yreq.MinInterval = time.Hour
	holder = mustClaim(t, ctx, s, yreq)
	yrep := replaceReq(young, "replacer", "token-y", longLease)
	yrep.MinInterval = time.Hour
	nc := skipOf(t, tryClaim(ctx, s, yrep), young, runclaim.ErrTooSoon)
	if !nc.RetryAfter.Equal(holder.StartedAt.Add(time.Hour)) {
		t.Errorf("a claim with Replace of a run younger than the interval: RetryAfter %v, want %v", nc.RetryAfter, holder.StartedAt.Add(time.Hour))
	}
	_ = wantAsked(t, s, holder, false)
	mustFinish(t, ctx, s, succeeded(holder))

	c, ok := s.(runclaim.Controller)
	if !ok {
		return
	}
	paused := prefix + "/paused"
	holder = mustClaim(t, ctx, s, claimReq(paused, "holder", longLease))
	mustPause(t, ctx, c, paused, time.Time{}, "hold")
	skipOf(t, tryClaim(ctx, s, replaceReq(paused, "replacer", "token-p", longLease)), paused, runclaim.ErrPaused)
	_ = wantAsked(t, s, holder, false)
	mustFinish(t, ctx, s, succeeded(holder))
}

// testReplaceDead: a holder asked to stop that dies keeps the source until
// its lease ends, by the store's clock, and then the claim that asked
// wins, while claims without its token are still skipped; a replacer that
// never comes back keeps the source for its lease after the replaced run
// ended, and no longer.
func testReplaceDead(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	const short = 150 * time.Millisecond
	clock := newStoreClock(t, ctx, s, prefix+"/clock")

	src := prefix + "/dead-holder"
	holder := mustClaim(t, ctx, s, claimReq(src, "holder", short))
	rep := replaceReq(src, "replacer", "token-d", longLease)
	skipOf(t, tryClaim(ctx, s, rep), src, runclaim.ErrAlreadyRunning)
	clock.waitPast(t, ctx, holder.LeaseUntil, 20*time.Second)
	skipOf(t, tryClaim(ctx, s, claimReq(src, "plain", longLease)), src, runclaim.ErrAlreadyRunning)
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, rep)))

	gone := prefix + "/dead-replacer"
	holder = mustClaim(t, ctx, s, claimReq(gone, "holder", longLease))
	skipOf(t, tryClaim(ctx, s, replaceReq(gone, "replacer", "token-g", short)), gone, runclaim.ErrAlreadyRunning)
	mustFinish(t, ctx, s, succeeded(holder))
	ended := clock.now(t, ctx)
	plain := claimReq(gone, "plain", longLease)
	won := claimWhenFree(t, ctx, s, plain, 20*time.Second, func(err error) {
		if nc := skipOf(t, err, gone, runclaim.ErrAlreadyRunning); nc.Holder != nil {
			t.Errorf("a claim of %q reserved for a replacer: skipped for holder run %d", gone, nc.Holder.ID)
		}
	})
	if won.StartedAt.Before(ended) {
		t.Errorf("a plain claim won at %v, within the replacer's lease after the replaced run ended (%v)", won.StartedAt, ended)
	}
	mustFinish(t, ctx, s, succeeded(won))
}

// testReplaceTwo: of two claims with Replace, the first asks; the second
// is skipped, and stays skipped once the holder has finished (the source
// is the first's); after the first has won, the second asks its run in
// turn.
func testReplaceTwo(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	holder := mustClaim(t, ctx, s, claimReq(src, "holder", longLease))
	first, second := replaceReq(src, "first", "token-1", longLease), replaceReq(src, "second", "token-2", longLease)
	skipOf(t, tryClaim(ctx, s, first), src, runclaim.ErrAlreadyRunning)
	skipOf(t, tryClaim(ctx, s, second), src, runclaim.ErrAlreadyRunning)
	_ = wantAsked(t, s, holder, true)
	mustFinish(t, ctx, s, succeeded(holder))
	skipOf(t, tryClaim(ctx, s, second), src, runclaim.ErrAlreadyRunning)
	won := mustClaim(t, ctx, s, first)
	wantHolder(t, skipOf(t, tryClaim(ctx, s, second), src, runclaim.ErrAlreadyRunning), won)
	_ = wantAsked(t, s, won, true)
	mustFinish(t, ctx, s, succeeded(won))
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, second)))
}

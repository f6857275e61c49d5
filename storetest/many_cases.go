package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// The cases of many-source claims. A Store that is a runclaim.ManyStore
// is asked through its ClaimMany; another one through Claim, one request
// at a time, as runclaim.Claimer asks it.

// claimMany asks s to decide reqs together.
func claimMany(ctx context.Context, s runclaim.Store, reqs []runclaim.ClaimRequest) ([]runclaim.ClaimResult, error) {
	if mc, ok := s.(runclaim.ManyStore); ok {
		return mc.ClaimMany(ctx, reqs)
	}
	// What runclaim refuses before it asks a Store one source at a time,
	// asked of runclaim itself: a throwaway MemoryStore's ClaimMany.
	if _, err := runclaim.NewMemoryStore().ClaimMany(context.Background(), reqs); err != nil {
		return nil, err
	}
	out := make([]runclaim.ClaimResult, len(reqs))
	for i, r := range reqs {
		out[i].Run, out[i].Err = s.Claim(ctx, r)
		if out[i].Err != nil && !errors.Is(out[i].Err, runclaim.ErrNotClaimed) {
			return nil, out[i].Err
		}
	}
	return out, nil
}

// mustClaimMany is claimMany that fails the test on an error and on a
// result count other than len(reqs).
func mustClaimMany(t *testing.T, ctx context.Context, s runclaim.Store, reqs []runclaim.ClaimRequest) []runclaim.ClaimResult {
	t.Helper()
	res, err := claimMany(ctx, s, reqs)
	if err != nil {
		t.Fatalf("ClaimMany of %d sources: %v", len(reqs), err)
	}
	if len(res) != len(reqs) {
		t.Fatalf("ClaimMany of %d sources returned %d results", len(reqs), len(res))
	}
	return res
}

// wonRun checks that res is a run won for req and returns it.
func wonRun(t *testing.T, req runclaim.ClaimRequest, res runclaim.ClaimResult) runclaim.RunInfo {
	t.Helper()
	if res.Err != nil {
		t.Fatalf("ClaimMany: %q skipped: %v, want it won", req.Source, res.Err)
	}
	r := res.Run
	if r.ID <= 0 || r.Source != req.Source || r.Owner != req.Owner {
		t.Fatalf("ClaimMany: result for %q is run %d of %q by %q, want a run of %q by %q", req.Source, r.ID, r.Source, r.Owner, req.Source, req.Owner)
	}
	if d := r.LeaseUntil.Sub(r.StartedAt); d != req.Lease {
		t.Errorf("ClaimMany: run %d of %q has a lease of %v, want %v", r.ID, r.Source, d, req.Lease)
	}
	return r
}

// testManyResult checks a many-source claim: results in the order asked,
// a won run for each free source, a skip for each held or too-soon one,
// the skipped sources' holders untouched, and IDs above every earlier one.
func testManyResult(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := func(name string) string { return prefix + "/" + name }
	held := mustClaim(t, ctx, s, claimReq(src("b"), "holder", longLease))
	recent := mustClaim(t, ctx, s, runclaim.ClaimRequest{Source: src("d"), Owner: "recent", Lease: longLease, MinInterval: time.Hour})
	mustFinish(t, ctx, s, succeeded(recent))

	names := []string{"e", "b", "a", "d", "c"}
	reqs := make([]runclaim.ClaimRequest, len(names))
	for i, n := range names {
		reqs[i] = claimReq(src(n), "many", longLease)
	}
	res := mustClaimMany(t, ctx, s, reqs)
	won := map[string]runclaim.RunInfo{}
	for i, n := range names {
		switch n {
		case "b":
			wantHolder(t, skipOf(t, res[i].Err, src(n), runclaim.ErrAlreadyRunning), held)
		case "d":
			nc := skipOf(t, res[i].Err, src(n), runclaim.ErrTooSoon)
			if want := recent.StartedAt.Add(time.Hour); !nc.RetryAfter.Equal(want) {
				t.Errorf("ClaimMany: skip of %q: RetryAfter = %v, want %v", src(n), nc.RetryAfter, want)
			}
		default:
			r := wonRun(t, reqs[i], res[i])
			if r.ID <= recent.ID || r.ID <= held.ID {
				t.Errorf("ClaimMany: run %d of %q: ID not above the earlier runs %d and %d", r.ID, r.Source, held.ID, recent.ID)
			}
			won[n] = r
		}
	}
	// The skips wrote nothing: the holder is as it was; the won sources
	// are held by the runs ClaimMany returned.
	_, err := s.Claim(ctx, claimReq(src("b"), "later", longLease))
	wantHolder(t, skipOf(t, err, src("b"), runclaim.ErrAlreadyRunning), held)
	for n, r := range won {
		_, err := s.Claim(ctx, claimReq(src(n), "later", longLease))
		wantHolder(t, skipOf(t, err, src(n), runclaim.ErrAlreadyRunning), r)
		mustFinish(t, ctx, s, succeeded(r))
	}
	mustFinish(t, ctx, s, succeeded(held))
}

// testManyBadInput checks that a many-source claim with a source listed
// twice, an invalid request or more than MaxClaimMany sources is refused
// with an error that is not a skip, and claims none of its valid sources.
func testManyBadInput(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	ok := []runclaim.ClaimRequest{claimReq(prefix+"/a", "many", longLease), claimReq(prefix+"/b", "many", longLease)}
	tooMany := make([]runclaim.ClaimRequest, runclaim.MaxClaimMany+1)
	for i := range tooMany {
		tooMany[i] = claimReq(fmt.Sprintf("%s/n%d", prefix, i), "many", longLease)
	}
	for _, tc := range []struct {
		name string
		reqs []runclaim.ClaimRequest
	}{
		{"a source twice", append(ok[:2:2], ok[0])},
		{"an empty source", append(ok[:2:2], claimReq("", "many", longLease))},
		{"a NUL byte", append(ok[:2:2], claimReq(prefix+"/\x00", "many", longLease))},
		{"a zero lease", append(ok[:2:2], claimReq(prefix+"/c", "many", 0))},
		{"more than MaxClaimMany", tooMany},
	} {
		res, err := claimMany(ctx, s, tc.reqs)
		if err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("ClaimMany with %s: %d results, error %v; want an error that is not a skip", tc.name, len(res), err)
		}
	}
	// Nothing was claimed: every valid source is free.
	for _, r := range append(ok, tooMany[0], tooMany[len(tooMany)-1]) {
		mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, r)))
	}
	if res, err := claimMany(ctx, s, nil); err != nil || len(res) != 0 {
		t.Errorf("ClaimMany of no source: %d results, %v; want none and nil", len(res), err)
	}
}

// testManyTakeover checks that a many-source claim takes over a run whose
// lease has ended, which then counts as lost.
func testManyTakeover(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	// A lease under a second: the case waits for it to end by the store's
	// clock (waitPast) and asserts only what holds after that.
	const lease = 150 * time.Millisecond
	old := mustClaim(t, ctx, s, claimReq(prefix+"/a", "crashed", lease))
	newStoreClock(t, ctx, s, prefix+"/clock").waitPast(t, ctx, old.LeaseUntil, 20*time.Second)
	reqs := []runclaim.ClaimRequest{claimReq(prefix+"/b", "many", longLease), claimReq(prefix+"/a", "many", longLease)}
	res := mustClaimMany(t, ctx, s, reqs)
	wonRun(t, reqs[0], res[0])
	r := wonRun(t, reqs[1], res[1])
	if r.ID <= old.ID {
		t.Errorf("takeover run %d has an ID not above the lapsed run's %d", r.ID, old.ID)
	}
	if err := s.Finish(ctx, succeeded(old)); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Finish of the run taken over: %v, want ErrLeaseLost", err)
	}
	mustFinish(t, ctx, s, succeeded(r))
	mustFinish(t, ctx, s, succeeded(res[0].Run))
}

// testManyMinInterval checks that a many-source claim respects the minimum
// interval recorded with a source's last run and its own.
func testManyMinInterval(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	recorded := mustClaim(t, ctx, s, runclaim.ClaimRequest{Source: prefix + "/a", Owner: "first", Lease: longLease, MinInterval: time.Hour})
	mustFinish(t, ctx, s, succeeded(recorded))
	plain := mustClaim(t, ctx, s, claimReq(prefix+"/b", "first", longLease))
	mustFinish(t, ctx, s, succeeded(plain))

	// Without an interval of its own: the recorded one binds a, b is free.
	reqs := []runclaim.ClaimRequest{claimReq(prefix+"/a", "many", longLease), claimReq(prefix+"/b", "many", longLease)}
	res := mustClaimMany(t, ctx, s, reqs)
	nc := skipOf(t, res[0].Err, prefix+"/a", runclaim.ErrTooSoon)
	if want := recorded.StartedAt.Add(time.Hour); !nc.RetryAfter.Equal(want) {
		t.Errorf("RetryAfter = %v, want %v", nc.RetryAfter, want)
	}
	b := wonRun(t, reqs[1], res[1])
	mustFinish(t, ctx, s, succeeded(b))

	// With an interval of its own: b, which just ran, is too soon.
	reqs = []runclaim.ClaimRequest{{Source: prefix + "/b", Owner: "many", Lease: longLease, MinInterval: time.Hour}, claimReq(prefix+"/c", "many", longLease)}
	res = mustClaimMany(t, ctx, s, reqs)
	skipOf(t, res[0].Err, prefix+"/b", runclaim.ErrTooSoon)
	mustFinish(t, ctx, s, succeeded(wonRun(t, reqs[1], res[1])))
}

// testManyTickDone checks that a many-source claim of a tick skips the
// sources whose tick is done and claims the others.
func testManyTickDone(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	tick := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req := func(src string, tick time.Time) runclaim.ClaimRequest {
		return runclaim.ClaimRequest{Source: prefix + "/" + src, Owner: "many", Lease: longLease, Tick: tick}
	}
	done := mustClaim(t, ctx, s, req("a", tick))
	mustFinish(t, ctx, s, failed(done, "a failed run serves its tick too"))

	reqs := []runclaim.ClaimRequest{req("a", tick), req("b", tick)}
	res := mustClaimMany(t, ctx, s, reqs)
	nc := skipOf(t, res[0].Err, prefix+"/a", runclaim.ErrTickDone)
	if !nc.DoneTick.Equal(tick) {
		t.Errorf("DoneTick = %v, want %v", nc.DoneTick, tick)
	}
	b := wonRun(t, reqs[1], res[1])
	if !b.Tick.Equal(tick) {
		t.Errorf("run %d serves tick %v, want %v", b.ID, b.Tick, tick)
	}
	mustFinish(t, ctx, s, succeeded(b))

	next := tick.Add(time.Minute)
	reqs = []runclaim.ClaimRequest{req("b", tick), req("a", next)}
	res = mustClaimMany(t, ctx, s, reqs)
	skipOf(t, res[0].Err, prefix+"/b", runclaim.ErrTickDone)
	mustFinish(t, ctx, s, succeeded(wonRun(t, reqs[1], res[1])))
}

// testManyExclusive races many-source claims with overlapping sets, each in
// its own shuffled order, from every replica: in each round every source
// is won exactly once, and no call fails (none deadlocks or waits out a
// timeout).
func testManyExclusive(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	stores := openReplicas(open, replicas)
	const sources, perReplica, rounds = 24, 2, 10
	all := make([]string, sources)
	for i := range all {
		all[i] = fmt.Sprintf("%s/%02d", prefix, i)
	}
	for round := range rounds {
		type claimant struct {
			res  []runclaim.ClaimResult
			reqs []runclaim.ClaimRequest
			err  error
		}
		cs := make([]claimant, len(stores)*perReplica)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := range cs {
			c := &cs[i]
			// Each claimant asks for about two thirds of the sources,
			// shuffled: the sets overlap, in different orders.
			picked := rand.Perm(sources)[:2*sources/3]
			for _, p := range picked {
				c.reqs = append(c.reqs, claimReq(all[p], fmt.Sprintf("r%d/c%d", i%len(stores), i), longLease))
			}
			s := stores[i%len(stores)]
			wg.Go(func() {
				<-gate
				c.res, c.err = claimMany(ctx, s, c.reqs)
			})
		}
		close(gate)
		wg.Wait()
		winners := map[string][]runclaim.RunInfo{}
		asked := map[string]bool{}
		for _, c := range cs {
			if c.err != nil {
				t.Fatalf("round %d: ClaimMany: %v", round, c.err)
			}
			for i, r := range c.res {
				asked[c.reqs[i].Source] = true
				if r.Err == nil {
					winners[c.reqs[i].Source] = append(winners[c.reqs[i].Source], wonRun(t, c.reqs[i], r))
				} else if !errors.Is(r.Err, runclaim.ErrAlreadyRunning) {
					t.Errorf("round %d: %q skipped: %v, want ErrAlreadyRunning", round, c.reqs[i].Source, r.Err)
				}
			}
		}
		for src := range asked {
			switch w := winners[src]; {
			case len(w) > 1:
				var who []string
				for _, r := range w {
					who = append(who, fmt.Sprintf("run %d by %s", r.ID, r.Owner))
				}
				t.Errorf("round %d: G1 broken: %q won %d times at once: %s", round, src, len(w), strings.Join(who, ", "))
			case len(w) == 0:
				t.Errorf("round %d: %q, free and asked for, was won by no claimant", round, src)
			}
			for _, r := range winners[src] {
				mustFinish(t, ctx, stores[0], succeeded(r))
			}
		}
		if t.Failed() {
			return
		}
	}
}

// heartbeatMany asks s to extend reqs' leases together: through its
// HeartbeatMany if it is a runclaim.ManyStore, else one at a time.
func heartbeatMany(ctx context.Context, s runclaim.Store, reqs []runclaim.HeartbeatRequest) ([]runclaim.HeartbeatResult, error) {
	if mh, ok := s.(runclaim.ManyStore); ok {
		return mh.HeartbeatMany(ctx, reqs)
	}
	out := make([]runclaim.HeartbeatResult, len(reqs))
	for i, r := range reqs {
		out[i].LeaseUntil, out[i].Err = s.Heartbeat(ctx, r)
		if out[i].Err != nil && !errors.Is(out[i].Err, runclaim.ErrLeaseLost) {
			return nil, out[i].Err
		}
	}
	return out, nil
}

// testManyHeartbeats checks heartbeats of many runs at once: each live
// run's lease is extended, and a run that is finished, lapsed, or named
// with another source is lost, alone.
func testManyHeartbeats(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	// A lease under a second for the lapsed run: the case waits for it to
	// end by the store's clock (waitPast), and asserts only what holds
	// after that.
	const short = 150 * time.Millisecond
	lapsed := mustClaim(t, ctx, s, claimReq(prefix+"/lapsed", "many", short))
	live := mustClaim(t, ctx, s, claimReq(prefix+"/live", "many", longLease))
	done := mustClaim(t, ctx, s, claimReq(prefix+"/done", "many", longLease))
	mustFinish(t, ctx, s, succeeded(done))
	live2 := mustClaim(t, ctx, s, claimReq(prefix+"/live2", "many", longLease))
	clock := newStoreClock(t, ctx, s, prefix+"/clock")
	clock.waitPast(t, ctx, lapsed.LeaseUntil, 20*time.Second)

	hb := func(r runclaim.RunInfo) runclaim.HeartbeatRequest {
		return runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: longLease}
	}
	wrongSource := hb(live2)
	wrongSource.Source = prefix + "/live"
	reqs := []runclaim.HeartbeatRequest{hb(lapsed), hb(live), hb(done), wrongSource}
	before := clock.now(t, ctx)
	res, err := heartbeatMany(ctx, s, reqs)
	if err != nil {
		t.Fatalf("heartbeats of %d runs: %v", len(reqs), err)
	}
	if len(res) != len(reqs) {
		t.Fatalf("heartbeats of %d runs: %d results", len(reqs), len(res))
	}
	for _, i := range []int{0, 2, 3} {
		if !errors.Is(res[i].Err, runclaim.ErrLeaseLost) {
			t.Errorf("heartbeat of run %d (%s): %v, want ErrLeaseLost", reqs[i].ID, reqs[i].Source, res[i].Err)
		}
	}
	if res[1].Err != nil || !res[1].LeaseUntil.After(before.Add(longLease-time.Second)) {
		t.Errorf("heartbeat of the live run %d: until %v, %v; want a lease of %v from now", live.ID, res[1].LeaseUntil, res[1].Err, longLease)
	}
	// live2, named with another source, was not extended, and still runs.
	res, err = heartbeatMany(ctx, s, []runclaim.HeartbeatRequest{hb(live2), hb(live)})
	if err != nil || len(res) != 2 || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("heartbeats of the two live runs: %v, %v", res, err)
	}
	// A heartbeat never moves a lease's end back, as with Heartbeat.
	long := res[1].LeaseUntil
	shorter := hb(live)
	shorter.Lease = short
	res, err = heartbeatMany(ctx, s, []runclaim.HeartbeatRequest{shorter})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("heartbeat of the live run with a lease of %v: %v, %v", short, res, err)
	}
	if res[0].LeaseUntil.Before(long) {
		t.Errorf("heartbeat with lease %v after one with lease %v moved the lease's end back, from %v to %v", short, longLease, long, res[0].LeaseUntil)
	}
	mustFinish(t, ctx, s, succeeded(live))
	mustFinish(t, ctx, s, succeeded(live2))
}

// testManyHeartbeatsByRun: a batch of heartbeats names each run by its
// ID, source and start, not its ID alone. After an asynchronous failover
// a new primary can hand a run's ID out again, to another source's run
// (G14), so one Claimer's batch can hold a stale run and a healthy one
// with the same ID. The batch is not refused for it: the healthy run is
// extended, and the stale requests, which share its ID, are lost.
func testManyHeartbeatsByRun(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	live := mustClaim(t, ctx, s, claimReq(prefix+"/live", "many", longLease))
	hb := func(r runclaim.RunInfo) runclaim.HeartbeatRequest {
		return runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: longLease}
	}
	otherSource, otherStart := hb(live), hb(live)
	otherSource.Source = prefix + "/stale"
	otherStart.StartedAt = live.StartedAt.Add(-time.Second)
	for _, reqs := range [][]runclaim.HeartbeatRequest{
		{otherSource, otherStart, hb(live)},
		{hb(live), otherSource, otherStart},
	} {
		res, err := heartbeatMany(ctx, s, reqs)
		if err != nil || len(res) != len(reqs) {
			t.Fatalf("heartbeats of one run and two stale ones with its ID: %v, %v; want a result for each", res, err)
		}
		for i, r := range reqs {
			if r == hb(live) {
				if res[i].Err != nil {
					t.Errorf("heartbeat of the live run %d, in a batch with stale runs of its ID: %v", live.ID, res[i].Err)
				}
			} else if !errors.Is(res[i].Err, runclaim.ErrLeaseLost) {
				t.Errorf("heartbeat of a stale run with ID %d (%s, started %v): %v, want ErrLeaseLost", r.ID, r.Source, r.StartedAt, res[i].Err)
			}
		}
	}
	// The same run twice is refused, as before.
	if _, err := heartbeatMany(ctx, s, []runclaim.HeartbeatRequest{hb(live), hb(live)}); err == nil {
		if _, ok := s.(runclaim.ManyStore); ok {
			t.Error("heartbeats of one run listed twice: no error; want the batch refused")
		}
	}
	mustFinish(t, ctx, s, succeeded(live))
}

package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// baseTick is the first tick the tick cases claim. Ticks are the
// claimers', not the store's clock: any time will do, and one with a
// fraction of a microsecond shows a store that keeps nanoseconds.
var baseTick = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

func tickReq(source, owner string, tick time.Time) runclaim.ClaimRequest {
	return runclaim.ClaimRequest{Source: source, Owner: owner, Lease: longLease, Tick: tick}
}

// tickDone checks that err skips a claim of tick with ErrTickDone,
// naming done as the latest tick served.
func tickDone(t *testing.T, err error, source string, tick, done time.Time) {
	t.Helper()
	nc := skipOf(t, err, source, runclaim.ErrTickDone)
	if !nc.Tick.Equal(tick) {
		t.Errorf("ErrTickDone skip of %q names tick %v, want the one claimed, %v", source, nc.Tick, tick)
	}
	if !nc.DoneTick.Equal(done) {
		t.Errorf("ErrTickDone skip of %q for tick %v names %v as the latest tick served, want %v", source, tick, nc.DoneTick, done)
	}
	if nc.Holder != nil {
		t.Errorf("ErrTickDone skip of %q names holder %+v", source, *nc.Holder)
	}
}

// testTickDone checks that a tick served by a run that succeeded or failed
// is done, as is every older tick, and that a later tick is not.
func testTickDone(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	t0, t1, t2 := baseTick, baseTick.Add(time.Minute), baseTick.Add(2*time.Minute)

	a := mustClaim(t, ctx, s, tickReq(src, "owner-a", t0))
	if !a.Tick.Equal(t0) {
		t.Errorf("claim of tick %v returned Tick %v", t0, a.Tick)
	}
	mustFinish(t, ctx, s, succeeded(a))
	for _, owner := range []string{"owner-a", "owner-b"} { // whoever claims it
		_, err := s.Claim(ctx, tickReq(src, owner, t0))
		tickDone(t, err, src, t0, t0)
	}
	_, err := s.Claim(ctx, tickReq(src, "owner-b", t0.Add(-time.Hour)))
	tickDone(t, err, src, t0.Add(-time.Hour), t0)

	// A failed run serves its tick too: retrying is for the next tick.
	b := mustClaim(t, ctx, s, tickReq(src, "owner-b", t1))
	if b.ID <= a.ID || !b.Tick.Equal(t1) {
		t.Errorf("claim of tick %v after run %d returned run %d with tick %v", t1, a.ID, b.ID, b.Tick)
	}
	mustFinish(t, ctx, s, failed(b, "boom"))
	_, err = s.Claim(ctx, tickReq(src, "owner-a", t1))
	tickDone(t, err, src, t1, t1)
	_, err = s.Claim(ctx, tickReq(src, "owner-a", t0))
	tickDone(t, err, src, t0, t1)

	// Skipping twice wrote nothing: the next tick is free.
	c := mustClaim(t, ctx, s, tickReq(src, "owner-a", t2))
	mustFinish(t, ctx, s, succeeded(c))

	// Sources are independent.
	d := mustClaim(t, ctx, s, tickReq(prefix+"/b", "owner-a", t0))
	mustFinish(t, ctx, s, succeeded(d))
}

// testTickLiveRun checks that a live run of the source, whatever its tick,
// skips a tick claim with ErrAlreadyRunning naming it, not ErrTickDone.
func testTickLiveRun(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	a := mustClaim(t, ctx, s, tickReq(src, "owner-a", baseTick))
	for _, tick := range []time.Time{baseTick, baseTick.Add(-time.Minute), baseTick.Add(time.Minute)} {
		_, err := s.Claim(ctx, tickReq(src, "owner-b", tick))
		nc := skipOf(t, err, src, runclaim.ErrAlreadyRunning)
		wantHolder(t, nc, a)
		if !nc.Tick.Equal(tick) {
			t.Errorf("skip of a claim of tick %v names tick %v", tick, nc.Tick)
		}
	}
	mustFinish(t, ctx, s, succeeded(a))
}

// testTickExpiredReopens checks that a run that expired leaves its tick
// open: a later claim of the tick takes it over, as a claim takes over any
// lapsed run, whether the run was expired by that claim or by its own late
// Finish. The run that took over then serves the tick.
func testTickExpiredReopens(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	const lease = 150 * time.Millisecond
	clock := newStoreClock(t, ctx, s, prefix+"/clock")
	for i, lateFinish := range []bool{false, true} {
		src := fmt.Sprintf("%s/%d", prefix, i)
		tick := baseTick.Add(time.Duration(i) * time.Minute)
		a := mustClaim(t, ctx, s, runclaim.ClaimRequest{Source: src, Owner: "owner-a", Lease: lease, Tick: tick})
		clock.waitPast(t, ctx, a.LeaseUntil, 20*time.Second)
		if lateFinish {
			if err := s.Finish(ctx, succeeded(a)); !errors.Is(err, runclaim.ErrLeaseLost) {
				t.Errorf("Finish of run %d after its lease ended: %v, want ErrLeaseLost", a.ID, err)
			}
		}
		b := mustClaim(t, ctx, s, tickReq(src, "owner-b", tick))
		if b.ID <= a.ID || !b.Tick.Equal(tick) {
			t.Errorf("lateFinish=%v: takeover of tick %v returned run %d with tick %v after run %d", lateFinish, tick, b.ID, b.Tick, a.ID)
		}
		if !lateFinish {
			if err := s.Finish(ctx, succeeded(a)); !errors.Is(err, runclaim.ErrLeaseLost) {
				t.Errorf("Finish of expired run %d: %v, want ErrLeaseLost", a.ID, err)
			}
		}
		mustFinish(t, ctx, s, succeeded(b))
		_, err := s.Claim(ctx, tickReq(src, "owner-c", tick))
		tickDone(t, err, src, tick, tick)
	}
}

// testTickMinInterval checks that the minimum interval still applies to
// tick claims, recorded by a tick claim or a plain one, and that a tick
// that is done is reported as such before the interval.
func testTickMinInterval(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	req := tickReq(src, "owner-a", baseTick)
	req.MinInterval = time.Hour
	a := mustClaim(t, ctx, s, req)
	mustFinish(t, ctx, s, succeeded(a))
	_, err := s.Claim(ctx, tickReq(src, "owner-b", baseTick.Add(time.Minute)))
	if nc := skipOf(t, err, src, runclaim.ErrTooSoon); !nc.RetryAfter.Equal(a.StartedAt.Add(time.Hour)) {
		t.Errorf("RetryAfter = %v, want run %d's start plus its interval, %v", nc.RetryAfter, a.ID, a.StartedAt.Add(time.Hour))
	}
	_, err = s.Claim(ctx, tickReq(src, "owner-b", baseTick))
	tickDone(t, err, src, baseTick, baseTick)

	src = prefix + "/plain-first"
	p := mustClaim(t, ctx, s, runclaim.ClaimRequest{Source: src, Owner: "owner-a", Lease: longLease, MinInterval: time.Hour})
	mustFinish(t, ctx, s, succeeded(p))
	_, err = s.Claim(ctx, tickReq(src, "owner-b", baseTick))
	skipOf(t, err, src, runclaim.ErrTooSoon)
}

// testTickPrecision checks that ticks compare at whole microseconds, the
// precision of a Postgres timestamp: ticks in one microsecond are one
// tick, and the run reports the tick cut down to it.
func testTickPrecision(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	tick := baseTick.Add(123456789 * time.Nanosecond)
	want := baseTick.Add(123456 * time.Microsecond)
	a := mustClaim(t, ctx, s, tickReq(src, "owner-a", tick))
	if !a.Tick.Equal(want) {
		t.Errorf("claim of tick %v returned Tick %v, want it cut to whole microseconds, %v", tick, a.Tick, want)
	}
	mustFinish(t, ctx, s, succeeded(a))
	same := want.Add(999 * time.Nanosecond)
	_, err := s.Claim(ctx, tickReq(src, "owner-b", same))
	tickDone(t, err, src, want, want)
	b := mustClaim(t, ctx, s, tickReq(src, "owner-b", want.Add(time.Microsecond)))
	mustFinish(t, ctx, s, succeeded(b))

	// A tick in another time zone is the same instant.
	_, err = s.Claim(ctx, tickReq(src, "owner-c", want.Add(time.Microsecond).In(time.FixedZone("UTC+3", 3*3600))))
	tickDone(t, err, src, want.Add(time.Microsecond), want.Add(time.Microsecond))
}

// testTickPlainShare checks that plain claims and tick claims share the
// source: a running run of either kind skips a claim of the other, and a
// plain run serves no tick, nor do ticks bind a plain claim.
func testTickPlainShare(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	p := mustClaim(t, ctx, s, claimReq(src, "plain", longLease))
	if !p.Tick.IsZero() {
		t.Errorf("plain claim returned Tick %v, want zero", p.Tick)
	}
	_, err := s.Claim(ctx, tickReq(src, "ticker", baseTick))
	wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), p)
	mustFinish(t, ctx, s, succeeded(p))

	a := mustClaim(t, ctx, s, tickReq(src, "ticker", baseTick))
	_, err = s.Claim(ctx, claimReq(src, "plain", longLease))
	wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), a)
	mustFinish(t, ctx, s, succeeded(a))

	// The tick is done, but a plain claim names none.
	q := mustClaim(t, ctx, s, claimReq(src, "plain", longLease))
	mustFinish(t, ctx, s, failed(q, "boom"))
	// The plain runs after it have not reopened it, nor served another.
	_, err = s.Claim(ctx, tickReq(src, "ticker", baseTick))
	tickDone(t, err, src, baseTick, baseTick)
	b := mustClaim(t, ctx, s, tickReq(src, "ticker", baseTick.Add(time.Nanosecond*1000)))
	mustFinish(t, ctx, s, succeeded(b))
}

// testTickUnderContention plays replicas whose clocks disagree by more than
// their job takes: on every tick, two claimants on each replica claim it
// at once, each winner finishing its run as soon as its claim returns, and
// then a late wave claims it again, as a replica whose clock is behind
// does. Exactly one run may serve each tick.
func testTickUnderContention(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	stores := openReplicas(open, replicas)
	src := prefix + "/a"
	const ticks, perReplica = 30, 2
	var known = make(map[int64]bool)
	for i := range ticks {
		tick := baseTick.Add(time.Duration(i) * time.Minute)
		var finishErrs sync.Map
		won := 0
		for range 2 { // the replicas on time, then the late ones
			outs := race(ctx, stores, perReplica, func(owner string) runclaim.ClaimRequest {
				return tickReq(src, owner, tick)
			}, func(s runclaim.Store, info runclaim.RunInfo) {
				if err := s.Finish(ctx, succeeded(info)); err != nil {
					finishErrs.Store(info.ID, err)
				}
			})
			w := winners(t, src, outs, known, runclaim.ErrAlreadyRunning, runclaim.ErrTickDone)
			for _, o := range w {
				known[o.info.ID] = true
				if !o.info.Tick.Equal(tick) {
					t.Errorf("run %d claimed for tick %v reports tick %v", o.info.ID, tick, o.info.Tick)
				}
			}
			won += len(w)
		}
		finishErrs.Range(func(id, err any) bool {
			t.Errorf("Finish(run %d of %q): %v", id, src, err)
			return true
		})
		if won != 1 {
			t.Fatalf("tick %d (%v) was served by %d runs, want exactly one", i, tick, won)
		}
	}
}

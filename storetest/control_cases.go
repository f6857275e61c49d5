package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// controllerOf returns s as a runclaim.Controller. A Store that is not one
// has nothing for the control cases to check: they are skipped, and say
// so.
func controllerOf(t *testing.T, s runclaim.Store) runclaim.Controller {
	t.Helper()
	c, ok := s.(runclaim.Controller)
	if !ok {
		t.Skipf("storetest: %T does not implement runclaim.Controller (Pause, Resume, Trigger)", s)
	}
	return c
}

// pausedSkip checks that err is an ErrPaused skip of source with the
// pause's end and note.
func pausedSkip(t *testing.T, err error, source string, until time.Time, note string) {
	t.Helper()
	nc := skipOf(t, err, source, runclaim.ErrPaused)
	if errors.Is(err, runclaim.ErrAlreadyRunning) || errors.Is(err, runclaim.ErrTooSoon) {
		t.Errorf("a paused skip matches another reason: %v", err)
	}
	if !nc.RetryAfter.Equal(until) {
		t.Errorf("paused skip's RetryAfter = %v, want the pause's end %v", nc.RetryAfter, until)
	}
	if nc.Note != note {
		t.Errorf("paused skip's Note = %q, want %q", nc.Note, note)
	}
	if note != "" && !strings.Contains(err.Error(), note) {
		t.Errorf("paused skip's text %q lacks the note %q", err.Error(), note)
	}
}

func mustPause(t *testing.T, ctx context.Context, c runclaim.Controller, source string, until time.Time, note string) {
	t.Helper()
	if err := c.Pause(ctx, source, until, note); err != nil {
		t.Fatalf("Pause(%q, %v, %q): %v", source, until, note, err)
	}
}

func mustResume(t *testing.T, ctx context.Context, c runclaim.Controller, source string) {
	t.Helper()
	if err := c.Resume(ctx, source); err != nil {
		t.Fatalf("Resume(%q): %v", source, err)
	}
}

func mustTrigger(t *testing.T, ctx context.Context, c runclaim.Controller, source string) {
	t.Helper()
	if err := c.Trigger(ctx, source); err != nil {
		t.Fatalf("Trigger(%q): %v", source, err)
	}
}

// testPause: a pause until Resume skips every claim with ErrPaused and the
// note, and never touches a running run; a second pause replaces the
// first; Resume frees the source, and is nil on a source not paused.
func testPause(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	c := controllerOf(t, s)
	src := prefix + "/a"
	const note = "banned; ticket 42"

	mustPause(t, ctx, c, src, time.Time{}, note)
	for range 3 {
		_, err := s.Claim(ctx, claimReq(src, "owner", longLease))
		pausedSkip(t, err, src, time.Time{}, note)
	}
	// Other sources, a prefix and an extension of it included, are not
	// paused.
	for _, other := range []string{prefix + "/a/b", prefix + "/", prefix + "/A"} {
		mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, claimReq(other, "owner", longLease))))
	}
	// A second pause replaces the first.
	mustPause(t, ctx, c, src, time.Time{}, "")
	_, err := s.Claim(ctx, claimReq(src, "owner", longLease))
	pausedSkip(t, err, src, time.Time{}, "")

	mustResume(t, ctx, c, src)
	mustResume(t, ctx, c, src) // not paused: nil
	r := mustClaim(t, ctx, s, claimReq(src, "owner", longLease))

	// A pause of a running source leaves the run alone: it is extended and
	// finished as before, and claims are skipped as paused meanwhile.
	mustPause(t, ctx, c, src, time.Time{}, note)
	mustHeartbeat(t, ctx, s, r, longLease)
	_, err = s.Claim(ctx, claimReq(src, "other", longLease))
	pausedSkip(t, err, src, time.Time{}, note)
	mustFinish(t, ctx, s, failed(r, "finished while paused"))
	_, err = s.Claim(ctx, claimReq(src, "other", longLease))
	pausedSkip(t, err, src, time.Time{}, note)
	mustResume(t, ctx, c, src)
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, claimReq(src, "other", longLease))))
	mustResume(t, ctx, c, prefix+"/never-paused")
}

// testTimedPause: a pause until a time skips claims, with that time as
// RetryAfter, until the store's clock passes it, and no run starts before
// it; an until that has passed is refused and pauses nothing.
func testTimedPause(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	c := controllerOf(t, s)
	clock := newStoreClock(t, ctx, s, prefix+"/clock")
	src := prefix + "/a"
	const pause = 300 * time.Millisecond

	// Whole microseconds: the precision of a Postgres timestamp.
	until := clock.now(t, ctx).Add(pause).Truncate(time.Microsecond)
	mustPause(t, ctx, c, src, until, "maintenance")
	skipped := 0
	r := claimWhenFree(t, ctx, s, claimReq(src, "owner", longLease), 20*pause, func(err error) {
		skipped++
		pausedSkip(t, err, src, until, "maintenance")
	})
	if skipped == 0 {
		t.Logf("no claim was skipped as paused: the store took more than %v to pause", pause)
	}
	if r.StartedAt.Before(until) {
		t.Errorf("run %d started at %v, before the pause's end %v", r.ID, r.StartedAt, until)
	}
	mustFinish(t, ctx, s, succeeded(r))

	// An until that has passed: refused, not paused.
	for _, past := range []time.Time{clock.now(t, ctx).Add(-time.Second), time.Unix(1, 0)} {
		err := c.Pause(ctx, src, past, "too late")
		if err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("Pause until %v, in the past: %v, want an error", past, err)
		}
	}
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, claimReq(src, "owner", longLease))))

	// A timed pause replaced by one until Resume lasts until Resume.
	mustPause(t, ctx, c, src, clock.now(t, ctx).Add(pause).Truncate(time.Microsecond), "")
	mustPause(t, ctx, c, src, time.Time{}, "indefinite")
	clock.waitPast(t, ctx, clock.now(t, ctx).Add(pause), 20*pause)
	_, err := s.Claim(ctx, claimReq(src, "owner", longLease))
	pausedSkip(t, err, src, time.Time{}, "indefinite")
}

// testTriggerOnce: a trigger lets one claim in despite the minimum
// interval, and only one, however many times it was made; the run it
// starts records its interval as any run does.
func testTriggerOnce(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	c := controllerOf(t, s)
	src := prefix + "/a"
	req := runclaim.ClaimRequest{Source: src, Owner: "owner", Lease: longLease, MinInterval: time.Hour}

	a := mustClaim(t, ctx, s, req)
	mustFinish(t, ctx, s, succeeded(a))
	_, err := s.Claim(ctx, req)
	skipOf(t, err, src, runclaim.ErrTooSoon)

	mustTrigger(t, ctx, c, src)
	mustTrigger(t, ctx, c, src) // still one trigger
	b := mustClaim(t, ctx, s, req)
	mustFinish(t, ctx, s, succeeded(b))
	nc := skipOf(t, tryClaim(ctx, s, req), src, runclaim.ErrTooSoon)
	if want := b.StartedAt.Add(time.Hour); !nc.RetryAfter.Equal(want) {
		t.Errorf("after the triggered run, RetryAfter = %v, want its start plus the interval, %v", nc.RetryAfter, want)
	}
	// Nor does a claimer that asks for no interval get in: the triggered
	// run recorded its own.
	skipOf(t, tryClaim(ctx, s, claimReq(src, "bare", longLease)), src, runclaim.ErrTooSoon)

	// A trigger on a source that a claim would win anyway is used by that
	// claim all the same.
	fresh := prefix + "/fresh"
	mustTrigger(t, ctx, c, fresh)
	freq := runclaim.ClaimRequest{Source: fresh, Owner: "owner", Lease: longLease, MinInterval: time.Hour}
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, freq)))
	skipOf(t, tryClaim(ctx, s, freq), fresh, runclaim.ErrTooSoon)
}

// testTriggerNotOverRunning: a trigger does not break in on a running
// run, and the skipped claims leave it waiting: the first claim after the
// run finished wins despite the interval, and only that one.
func testTriggerNotOverRunning(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	c := controllerOf(t, s)
	src := prefix + "/a"
	req := runclaim.ClaimRequest{Source: src, Owner: "owner", Lease: longLease, MinInterval: time.Hour}

	a := mustClaim(t, ctx, s, req)
	mustTrigger(t, ctx, c, src)
	for range 3 {
		nc := skipOf(t, tryClaim(ctx, s, req), src, runclaim.ErrAlreadyRunning)
		wantHolder(t, nc, a)
	}
	mustFinish(t, ctx, s, succeeded(a))
	b := mustClaim(t, ctx, s, req)
	mustFinish(t, ctx, s, succeeded(b))
	skipOf(t, tryClaim(ctx, s, req), src, runclaim.ErrTooSoon)
}

// testTriggerNotOverPause: a trigger does not break in on a pause, and
// waits for it: after Resume, one claim wins despite the interval.
func testTriggerNotOverPause(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	c := controllerOf(t, s)
	src := prefix + "/a"
	req := runclaim.ClaimRequest{Source: src, Owner: "owner", Lease: longLease, MinInterval: time.Hour}

	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, req)))
	mustPause(t, ctx, c, src, time.Time{}, "hold")
	mustTrigger(t, ctx, c, src)
	for range 3 {
		pausedSkip(t, tryClaim(ctx, s, req), src, time.Time{}, "hold")
	}
	mustResume(t, ctx, c, src)
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, req)))
	skipOf(t, tryClaim(ctx, s, req), src, runclaim.ErrTooSoon)
}

// testControlBadInput: Pause, Resume and Trigger refuse an invalid source,
// a note that is too long, not UTF-8 or has a NUL byte, a pause's end
// after year 9999, and an ended context, with an error that is not a
// skip, and change nothing.
func testControlBadInput(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	c := controllerOf(t, s)

	for _, tc := range badSources(prefix) {
		for name, call := range map[string]func() error{
			"Pause":   func() error { return c.Pause(ctx, tc.source, time.Time{}, "note") },
			"Resume":  func() error { return c.Resume(ctx, tc.source) },
			"Trigger": func() error { return c.Trigger(ctx, tc.source) },
		} {
			if err := call(); !errors.Is(err, runclaim.ErrInvalidSource) || errors.Is(err, runclaim.ErrNotClaimed) {
				t.Errorf("%s of %s source %q: %v, want ErrInvalidSource", name, tc.name, tc.source, err)
			}
		}
		// Neither paused nor triggered: it is claimed, and then too soon.
		req := runclaim.ClaimRequest{Source: tc.valid, Owner: "owner", Lease: longLease, MinInterval: time.Hour}
		mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, req)))
		skipOf(t, tryClaim(ctx, s, req), tc.valid, runclaim.ErrTooSoon)
	}

	src := prefix + "/notes"
	for _, tc := range []struct{ name, note string }{
		{"too long", strings.Repeat("n", runclaim.MaxPauseNoteLen+1)},
		{"NUL", "ban\x00ned"},
		{"invalid UTF-8", "ban\xffned"},
	} {
		if err := c.Pause(ctx, src, time.Time{}, tc.note); err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("Pause with a note %s: %v, want an error", tc.name, err)
		}
	}
	if err := c.Pause(ctx, src, time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC), "far"); err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
		t.Errorf("Pause until year 10000: %v, want an error", err)
	}
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, claimReq(src, "owner", longLease))))
	// The longest note is kept whole, in any script.
	longest := strings.Repeat("é", runclaim.MaxPauseNoteLen/2)
	mustPause(t, ctx, c, src, time.Time{}, longest)
	pausedSkip(t, tryClaim(ctx, s, claimReq(src, "owner", longLease)), src, time.Time{}, longest)
	mustResume(t, ctx, c, src)

	// An ended context: an error matching it, nothing changed.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	ctxSrc := prefix + "/ctx"
	creq := runclaim.ClaimRequest{Source: ctxSrc, Owner: "owner", Lease: longLease, MinInterval: time.Hour}
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, creq)))
	mustPause(t, ctx, c, prefix+"/ctx-paused", time.Time{}, "")
	for name, call := range map[string]func() error{
		"Pause":   func() error { return c.Pause(ended, ctxSrc, time.Time{}, "") },
		"Resume":  func() error { return c.Resume(ended, prefix+"/ctx-paused") },
		"Trigger": func() error { return c.Trigger(ended, ctxSrc) },
	} {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with an ended context: %v, want an error matching context.Canceled", name, err)
		}
	}
	skipOf(t, tryClaim(ctx, s, creq), ctxSrc, runclaim.ErrTooSoon) // not paused, not triggered
	pausedSkip(t, tryClaim(ctx, s, claimReq(prefix+"/ctx-paused", "owner", longLease)), prefix+"/ctx-paused", time.Time{}, "")
}

// tryClaim claims req.Source and returns only the error, for a claim
// expected to be skipped; a claim that wins is finished.
func tryClaim(ctx context.Context, s runclaim.Store, req runclaim.ClaimRequest) error {
	info, err := s.Claim(ctx, req)
	if err == nil {
		_ = s.Finish(ctx, succeeded(info))
	}
	return err
}

// testTriggerTickDone: a trigger lets one claim in despite a done tick,
// and the interval too when a tick claim meets both; the claim that wins
// uses it up, and the tick is done again after it.
func testTriggerTickDone(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	c := controllerOf(t, s)
	src := prefix + "/a"
	t0 := baseTick

	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, tickReq(src, "owner", t0))))
	tickDone(t, tryClaim(ctx, s, tickReq(src, "owner", t0)), src, t0, t0)
	mustTrigger(t, ctx, c, src)
	r := mustClaim(t, ctx, s, tickReq(src, "other", t0))
	if !r.Tick.Equal(t0) {
		t.Errorf("triggered claim of tick %v returned Tick %v", t0, r.Tick)
	}
	mustFinish(t, ctx, s, failed(r, "rerun by hand"))
	tickDone(t, tryClaim(ctx, s, tickReq(src, "owner", t0)), src, t0, t0)

	// A done tick and the interval at once: one trigger lets one claim in.
	both := prefix + "/both"
	req := tickReq(both, "owner", t0)
	req.MinInterval = time.Hour
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, req)))
	mustTrigger(t, ctx, c, both)
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, req)))
	later := req
	later.Tick = t0.Add(time.Minute)
	skipOf(t, tryClaim(ctx, s, later), both, runclaim.ErrTooSoon)
	tickDone(t, tryClaim(ctx, s, req), both, t0, t0)
}

// testTriggerUnderContention: replicas race to claim a source within its
// minimum interval, each winner finishing at once, so that late claimants
// find the source free; each trigger lets exactly one of them in, however
// the claims interleave with the use of the trigger.
func testTriggerUnderContention(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	stores := openReplicas(open, replicas)
	c := controllerOf(t, stores[0])
	src := prefix + "/a"
	const rounds, perReplica = 20, 2
	req := func(owner string) runclaim.ClaimRequest {
		return runclaim.ClaimRequest{Source: src, Owner: owner, Lease: longLease, MinInterval: time.Hour}
	}
	mustFinish(t, ctx, stores[0], succeeded(mustClaim(t, ctx, stores[0], req("first"))))
	known := make(map[int64]bool)
	for i := range rounds {
		mustTrigger(t, ctx, c, src)
		outs := race(ctx, stores, perReplica, req, func(s runclaim.Store, info runclaim.RunInfo) {
			if err := s.Finish(ctx, succeeded(info)); err != nil {
				t.Errorf("Finish(run %d): %v", info.ID, err)
			}
		})
		w := winners(t, src, outs, known, runclaim.ErrAlreadyRunning, runclaim.ErrTooSoon)
		if len(w) != 1 {
			t.Fatalf("round %d: one trigger let %d claims in, want exactly one", i, len(w))
		}
		known[w[0].info.ID] = true
	}
}

// testManyControl: a many-source claim honours pauses and triggers as
// single claims do, each source on its own: a paused source is skipped
// with ErrPaused and its note, a triggered one wins despite its interval
// and uses the trigger up, and the others are claimed.
func testManyControl(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	c := controllerOf(t, s)
	req := func(name string) runclaim.ClaimRequest {
		return runclaim.ClaimRequest{Source: prefix + "/" + name, Owner: "many", Lease: longLease, MinInterval: time.Hour}
	}
	for _, name := range []string{"paused", "triggered"} {
		mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, req(name))))
	}
	mustPause(t, ctx, c, prefix+"/paused", time.Time{}, "hold")
	mustTrigger(t, ctx, c, prefix+"/paused") // waits for the pause
	mustTrigger(t, ctx, c, prefix+"/triggered")
	reqs := []runclaim.ClaimRequest{req("paused"), req("triggered"), req("free")}
	res := mustClaimMany(t, ctx, s, reqs)
	pausedSkip(t, res[0].Err, prefix+"/paused", time.Time{}, "hold")
	mustFinish(t, ctx, s, succeeded(wonRun(t, reqs[1], res[1])))
	mustFinish(t, ctx, s, succeeded(wonRun(t, reqs[2], res[2])))

	// Again: the trigger was used, the pause holds.
	res = mustClaimMany(t, ctx, s, reqs)
	pausedSkip(t, res[0].Err, prefix+"/paused", time.Time{}, "hold")
	skipOf(t, res[1].Err, prefix+"/triggered", runclaim.ErrTooSoon)
	skipOf(t, res[2].Err, prefix+"/free", runclaim.ErrTooSoon)
	mustResume(t, ctx, c, prefix+"/paused")
	res = mustClaimMany(t, ctx, s, reqs[:1])
	mustFinish(t, ctx, s, succeeded(wonRun(t, reqs[0], res[0]))) // its trigger waited
}

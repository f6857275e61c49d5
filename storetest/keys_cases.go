package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// The cases of keys: limits and cooldowns that many sources share (see
// runclaim.Limiter). A Store that is not a Limiter has nothing for them
// to check: they are skipped, and say so.

// limiterOf returns s as a runclaim.Limiter, or skips the subtest.
func limiterOf(t *testing.T, s runclaim.Store) runclaim.Limiter {
	t.Helper()
	l, ok := s.(runclaim.Limiter)
	if !ok {
		t.Skipf("storetest: %T does not implement runclaim.Limiter (SetLimit, DeleteLimit, Cooldown, EndCooldown)", s)
	}
	return l
}

func keyReq(source, owner string, keys ...string) runclaim.ClaimRequest {
	return runclaim.ClaimRequest{Source: source, Owner: owner, Lease: longLease, Keys: keys}
}

func mustSetLimit(t *testing.T, ctx context.Context, l runclaim.Limiter, key string, lim runclaim.Limit) {
	t.Helper()
	if err := l.SetLimit(ctx, key, lim); err != nil {
		t.Fatalf("SetLimit(%q, %+v): %v", key, lim, err)
	}
}

// limitedSkip checks that err is an ErrLimited skip of source for key, with
// retry as RetryAfter unless retry is zero, and returns its details.
func limitedSkip(t *testing.T, err error, source, key string, retry time.Time) *runclaim.NotClaimedError {
	t.Helper()
	nc := skipOf(t, err, source, runclaim.ErrLimited)
	if nc.Key != key {
		t.Errorf("limited skip of %q names key %q, want %q", source, nc.Key, key)
	}
	if !retry.IsZero() && !nc.RetryAfter.Equal(retry) {
		t.Errorf("limited skip of %q for key %q: RetryAfter = %v, want %v", source, key, nc.RetryAfter, retry)
	}
	if nc.RetryAfter.IsZero() {
		t.Errorf("limited skip of %q for key %q has no RetryAfter", source, key)
	}
	return nc
}

// testKeyMaxRunning: a key with MaxRunning n lets n runs of its sources
// run at once, whatever their sources; the next claim is skipped with
// ErrLimited, the key, and the earliest lease end of the key's running
// runs, and writes nothing (its interval and tick do not count). A run
// that ends, finished or lapsed, makes room; a claim that names no key, or
// another key, is not limited.
func testKeyMaxRunning(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	l := limiterOf(t, s)
	key := prefix + "/site"
	mustSetLimit(t, ctx, l, key, runclaim.Limit{MaxRunning: 2})

	a := mustClaim(t, ctx, s, keyReq(prefix+"/a", "owner", key))
	b := mustClaim(t, ctx, s, keyReq(prefix+"/b", "owner", key))
	first := a.LeaseUntil
	if b.LeaseUntil.Before(first) {
		first = b.LeaseUntil
	}
	c := keyReq(prefix+"/c", "owner", key)
	c.MinInterval = time.Hour
	c.Tick = baseTick
	limitedSkip(t, tryClaim(ctx, s, c), c.Source, key, first)
	// Not limited: no key, another key.
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, claimReq(prefix+"/plain", "owner", longLease))))
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, keyReq(prefix+"/other", "owner", prefix+"/other-site"))))

	// A run that ends makes room; the skip wrote nothing, so neither the
	// interval nor the tick keep c out.
	mustFinish(t, ctx, s, failed(a, "done"))
	rc := mustClaim(t, ctx, s, c)
	limitedSkip(t, tryClaim(ctx, s, keyReq(prefix+"/d", "owner", key)), prefix+"/d", key, time.Time{})

	// A lapsed run does not count, whether or not a claim expired it.
	mustFinish(t, ctx, s, succeeded(rc))
	short := keyReq(prefix+"/short", "owner", key)
	short.Lease = 50 * time.Millisecond
	sr := mustClaim(t, ctx, s, short)
	if d, err := s.Claim(ctx, keyReq(prefix+"/d", "owner", key)); err == nil {
		// On a loaded machine the short lease can lapse before this
		// claim: then the claim rightly won, by the store's clock.
		mustFinish(t, ctx, s, succeeded(d))
		if d.StartedAt.Before(sr.LeaseUntil) {
			t.Errorf("claim of %q won at %v, while runs %d and %d held the key's two places (run %d until %v)", d.Source, d.StartedAt, b.ID, sr.ID, sr.ID, sr.LeaseUntil)
		}
	} else {
		limitedSkip(t, err, prefix+"/d", key, time.Time{})
		waitStoreClock(t, ctx, s, sr.LeaseUntil)
		mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, keyReq(prefix+"/d", "owner", key))))
	}

	// A lower limit binds at once; DeleteLimit lifts it.
	mustSetLimit(t, ctx, l, key, runclaim.Limit{MaxRunning: 1})
	limitedSkip(t, tryClaim(ctx, s, keyReq(prefix+"/e", "owner", key)), prefix+"/e", key, b.LeaseUntil)
	if err := l.DeleteLimit(ctx, key); err != nil {
		t.Fatalf("DeleteLimit: %v", err)
	}
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, keyReq(prefix+"/e", "owner", key))))
	mustFinish(t, ctx, s, succeeded(b))
}

// testKeyShared: a run counts for every key its claim named, whatever
// the others and their order: a key's MaxRunning counts the runs that
// named it alone and those that named it with other keys, and a skip's
// RetryAfter is the earliest lease end among them all.
func testKeyShared(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	l := limiterOf(t, s)
	key, other, third := prefix+"/site", prefix+"/other", prefix+"/third"
	mustSetLimit(t, ctx, l, key, runclaim.Limit{MaxRunning: 2})

	short := keyReq(prefix+"/b", "owner", other, key)
	short.Lease = longLease / 2 // ends before a's
	a := mustClaim(t, ctx, s, keyReq(prefix+"/a", "owner", key))
	b := mustClaim(t, ctx, s, short)
	limitedSkip(t, tryClaim(ctx, s, keyReq(prefix+"/c", "owner", key)), prefix+"/c", key, b.LeaseUntil)
	limitedSkip(t, tryClaim(ctx, s, keyReq(prefix+"/c", "owner", third, key)), prefix+"/c", key, b.LeaseUntil)
	// The other keys have no limit: a claim naming them only wins.
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, keyReq(prefix+"/d", "owner", other, third))))

	// a ends: one place. A run naming the key among three takes it.
	mustFinish(t, ctx, s, succeeded(a))
	e := mustClaim(t, ctx, s, keyReq(prefix+"/e", "owner", third, key, other))
	first := b.LeaseUntil
	if e.LeaseUntil.Before(first) {
		first = e.LeaseUntil
	}
	limitedSkip(t, tryClaim(ctx, s, keyReq(prefix+"/c", "owner", key)), prefix+"/c", key, first)
	mustFinish(t, ctx, s, succeeded(b))
	mustFinish(t, ctx, s, succeeded(e))
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, keyReq(prefix+"/c", "owner", key))))
}

// waitStoreClock waits until the store's clock is past at: until a claim
// of a fresh source starts after it.
func waitStoreClock(t *testing.T, ctx context.Context, s runclaim.Store, at time.Time) {
	t.Helper()
	for i := 0; ; i++ {
		r := mustClaim(t, ctx, s, claimReq(fmt.Sprintf("storetest/%s/clock-%d", t.Name(), i), "clock", longLease))
		mustFinish(t, ctx, s, succeeded(r))
		if r.StartedAt.After(at) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the store's clock did not pass %v: %v", at, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// claimWhenKeyOpens claims req, which names key, again while the key
// limits it, and fails the test if it wins before opens. The first skip
// must say opens; on a loaded machine opens may have passed before the
// first claim, which then wins.
func claimWhenKeyOpens(t *testing.T, ctx context.Context, s runclaim.Store, req runclaim.ClaimRequest, key string, opens time.Time) runclaim.RunInfo {
	t.Helper()
	var info runclaim.RunInfo
	first := true
	poll(t, ctx, time.Minute, func() (bool, string) {
		var err error
		if info, err = s.Claim(ctx, req); err == nil {
			if info.StartedAt.Before(opens) {
				t.Errorf("claim of %q won at %v, before its key %q let it in at %v", req.Source, info.StartedAt, key, opens)
			}
			return true, ""
		}
		want := time.Time{}
		if first {
			want, first = opens, false
		}
		limitedSkip(t, err, req.Source, key, want)
		return false, fmt.Sprintf("the key %q never let %q in: %v", key, req.Source, err)
	})
	return info
}

// testKeyMaxStarts: a key with MaxStarts n per window lets n runs start
// in any window, whatever their outcome (failed and expired runs sent
// their requests too); the next claim is skipped until the oldest start
// in the window leaves it, and RetryAfter says when.
func testKeyMaxStarts(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	l := limiterOf(t, s)
	key := prefix + "/site"
	mustSetLimit(t, ctx, l, key, runclaim.Limit{MaxStarts: 3, Per: time.Hour})
	r1 := mustClaim(t, ctx, s, keyReq(prefix+"/a", "owner", key))
	mustFinish(t, ctx, s, failed(r1, "HTTP 500"))
	r2 := mustClaim(t, ctx, s, keyReq(prefix+"/b", "owner", key))
	mustFinish(t, ctx, s, failed(r2, "HTTP 500"))
	short := keyReq(prefix+"/a", "owner", key)
	short.Lease = 50 * time.Millisecond
	r3 := mustClaim(t, ctx, s, short)
	waitStoreClock(t, ctx, s, r3.LeaseUntil) // r3 lapses: it still started
	limitedSkip(t, tryClaim(ctx, s, keyReq(prefix+"/c", "owner", key)), prefix+"/c", key, r1.StartedAt.Add(time.Hour))

	// A window that passes: the claim wins only once the oldest start has
	// left it, by the store's clock.
	fast := prefix + "/fast"
	const per = 300 * time.Millisecond
	mustSetLimit(t, ctx, l, fast, runclaim.Limit{MaxStarts: 2, Per: per})
	f1 := mustClaim(t, ctx, s, keyReq(prefix+"/f1", "owner", fast))
	f2 := mustClaim(t, ctx, s, keyReq(prefix+"/f2", "owner", fast))
	mustFinish(t, ctx, s, succeeded(f1))
	mustFinish(t, ctx, s, succeeded(f2))
	// On a loaded machine the window may have passed before the first
	// claim: then it wins, as the later ones do, after f1's start left the
	// window.
	mustFinish(t, ctx, s, succeeded(claimWhenKeyOpens(t, ctx, s, keyReq(prefix+"/f3", "owner", fast), fast, f1.StartedAt.Add(per))))
}

// testKeyMinGap: a key with a MinGap lets one start in at a time, MinGap
// apart, whatever became of the run before (a finished run still
// started): a claim within MinGap of the key's newest start is skipped
// with RetryAfter that start plus MinGap, and wins once the store's clock
// has passed it, not before. A many-source claim of sources that share
// the key wins the first only.
func testKeyMinGap(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	l := limiterOf(t, s)
	slow := prefix + "/slow"
	mustSetLimit(t, ctx, l, slow, runclaim.Limit{MinGap: time.Hour})
	a := mustClaim(t, ctx, s, keyReq(prefix+"/a", "owner", slow))
	limitedSkip(t, tryClaim(ctx, s, keyReq(prefix+"/b", "owner", slow)), prefix+"/b", slow, a.StartedAt.Add(time.Hour))
	mustFinish(t, ctx, s, succeeded(a))
	limitedSkip(t, tryClaim(ctx, s, keyReq(prefix+"/b", "owner", slow)), prefix+"/b", slow, a.StartedAt.Add(time.Hour))
	// The gap is between starts: a key with a MaxRunning that has room
	// and a MinGap that has none is skipped for the gap.
	mustSetLimit(t, ctx, l, slow, runclaim.Limit{MaxRunning: 5, MinGap: time.Hour})
	limitedSkip(t, tryClaim(ctx, s, keyReq(prefix+"/c", "owner", slow)), prefix+"/c", slow, a.StartedAt.Add(time.Hour))

	// A gap that passes, by the store's clock.
	fast := prefix + "/fast"
	const gap = 300 * time.Millisecond
	mustSetLimit(t, ctx, l, fast, runclaim.Limit{MinGap: gap})
	// Three starts, each paced from the one before (the newest, not the
	// oldest).
	last := mustClaim(t, ctx, s, keyReq(prefix+"/f1", "owner", fast))
	for _, src := range []string{prefix + "/f2", prefix + "/f3"} {
		last = claimWhenKeyOpens(t, ctx, s, keyReq(src, "owner", fast), fast, last.StartedAt.Add(gap))
	}

	// Many sources at once: the first wins, each other is paced after it.
	if _, ok := s.(runclaim.ManyStore); !ok {
		return
	}
	batch := prefix + "/batch"
	mustSetLimit(t, ctx, l, batch, runclaim.Limit{MinGap: time.Hour})
	reqs := []runclaim.ClaimRequest{keyReq(prefix+"/m1", "many", batch), keyReq(prefix+"/m2", "many", batch), keyReq(prefix+"/m3", "many")}
	res := mustClaimMany(t, ctx, s, reqs)
	m1 := wonRun(t, reqs[0], res[0])
	limitedSkip(t, res[1].Err, reqs[1].Source, batch, m1.StartedAt.Add(time.Hour))
	wonRun(t, reqs[2], res[2])
}

// testKeyCooldown: a cooldown skips every claim that names its key, with
// its end and note; a shorter cooldown never shortens it, a longer one
// extends it; EndCooldown ends it; a cooldown that would have ended
// already is an error.
func testKeyCooldown(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	l := limiterOf(t, s)
	key := prefix + "/site"
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if err := l.Cooldown(ctx, key, until, "HTTP 429"); err != nil {
		t.Fatalf("Cooldown: %v", err)
	}
	src := prefix + "/a"
	nc := limitedSkip(t, tryClaim(ctx, s, keyReq(src, "owner", prefix+"/free", key)), src, key, until)
	if nc.Note != "HTTP 429" || !strings.Contains(nc.Error(), "HTTP 429") {
		t.Errorf("cooldown skip: Note %q, text %q; want the note %q in both", nc.Note, nc.Error(), "HTTP 429")
	}
	if err := l.Cooldown(ctx, key, until.Add(-30*time.Minute), "shorter"); err != nil {
		t.Fatalf("Cooldown (shorter): %v", err)
	}
	nc = limitedSkip(t, tryClaim(ctx, s, keyReq(src, "owner", key)), src, key, until)
	if nc.Note != "HTTP 429" {
		t.Errorf("a shorter cooldown changed the note to %q", nc.Note)
	}
	later := until.Add(time.Hour)
	if err := l.Cooldown(ctx, key, later, "longer"); err != nil {
		t.Fatalf("Cooldown (longer): %v", err)
	}
	limitedSkip(t, tryClaim(ctx, s, keyReq(src, "owner", key)), src, key, later)
	if err := l.Cooldown(ctx, key, time.Now().Add(-time.Minute), "past"); err == nil {
		t.Errorf("Cooldown with an end in the past returned nil")
	}
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, claimReq(src, "owner", longLease))))
	if err := l.EndCooldown(ctx, key); err != nil {
		t.Fatalf("EndCooldown: %v", err)
	}
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, keyReq(src, "owner", key))))
	if err := l.EndCooldown(ctx, key); err != nil {
		t.Errorf("EndCooldown of a key not cooling down: %v", err)
	}
}

// testKeyOrder: every other reason to skip is reported before a key's,
// and the keys in the order the claim names them.
func testKeyOrder(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	l := limiterOf(t, s)
	ka, kb := prefix+"/ka", prefix+"/kb"
	for _, k := range []string{ka, kb} {
		if err := l.Cooldown(ctx, k, time.Now().Add(time.Hour), k); err != nil {
			t.Fatalf("Cooldown(%q): %v", k, err)
		}
	}
	src := prefix + "/a"
	limitedSkip(t, tryClaim(ctx, s, keyReq(src, "owner", ka, kb)), src, ka, time.Time{})
	limitedSkip(t, tryClaim(ctx, s, keyReq(src, "owner", kb, ka)), src, kb, time.Time{})

	// Held, too soon, tick done: each before the key.
	held := mustClaim(t, ctx, s, claimReq(src, "holder", longLease))
	wantHolder(t, skipOf(t, tryClaim(ctx, s, keyReq(src, "owner", ka)), src, runclaim.ErrAlreadyRunning), held)
	mustFinish(t, ctx, s, succeeded(held))
	soon := runclaim.ClaimRequest{Source: prefix + "/soon", Owner: "owner", Lease: longLease, MinInterval: time.Hour}
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, soon)))
	soon.Keys = []string{ka}
	skipOf(t, tryClaim(ctx, s, soon), soon.Source, runclaim.ErrTooSoon)
	tick := tickReq(prefix+"/tick", "owner", baseTick)
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, tick)))
	tick.Keys = []string{ka}
	skipOf(t, tryClaim(ctx, s, tick), tick.Source, runclaim.ErrTickDone)
	if c, ok := s.(runclaim.Controller); ok {
		mustPause(t, ctx, c, src, time.Time{}, "paused")
		pausedSkip(t, tryClaim(ctx, s, keyReq(src, "owner", ka)), src, time.Time{}, "paused")
	}
}

// testManyKeys: a many-source claim honours each key across the batch,
// in the order asked: with room for two, the first two sources that name
// the key win and the later ones are skipped, whatever keys they name
// beside it; a key's starts count the batch's own.
func testManyKeys(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	l := limiterOf(t, s)
	run2, start2 := prefix+"/running2", prefix+"/starts2"
	mustSetLimit(t, ctx, l, run2, runclaim.Limit{MaxRunning: 2})
	mustSetLimit(t, ctx, l, start2, runclaim.Limit{MaxStarts: 2, Per: time.Hour})
	reqs := []runclaim.ClaimRequest{
		keyReq(prefix+"/z", "many", run2),
		keyReq(prefix+"/y", "many", start2),
		keyReq(prefix+"/x", "many", start2, run2),
		keyReq(prefix+"/w", "many", run2),
		keyReq(prefix+"/v", "many", start2),
		keyReq(prefix+"/u", "many"),
	}
	res := mustClaimMany(t, ctx, s, reqs)
	z := wonRun(t, reqs[0], res[0])
	wonRun(t, reqs[1], res[1])
	wonRun(t, reqs[2], res[2])
	limitedSkip(t, res[3].Err, reqs[3].Source, run2, z.LeaseUntil)
	limitedSkip(t, res[4].Err, reqs[4].Source, start2, time.Time{})
	wonRun(t, reqs[5], res[5])
}

// testManyKeysRoom: a many-source claim whose keys have room for all of
// its sources wins them all, and its runs and starts count for the claims
// after it as those of single claims do; a batch that just fits a key's
// limit wins all of its sources, and the next is skipped.
func testManyKeysRoom(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	l := limiterOf(t, s)
	run3, start3, run2 := prefix+"/running3", prefix+"/starts3", prefix+"/running2"
	mustSetLimit(t, ctx, l, run3, runclaim.Limit{MaxRunning: 3})
	mustSetLimit(t, ctx, l, start3, runclaim.Limit{MaxStarts: 3, Per: time.Hour})
	mustSetLimit(t, ctx, l, run2, runclaim.Limit{MaxRunning: 2})
	reqs := []runclaim.ClaimRequest{
		keyReq(prefix+"/a", "many", run3),
		keyReq(prefix+"/b", "many", start3, run3),
		keyReq(prefix+"/c", "many", start3),
		keyReq(prefix+"/d", "many", prefix+"/nolimit"),
		keyReq(prefix+"/e", "many", run2),
		keyReq(prefix+"/f", "many", run2),
	}
	res := mustClaimMany(t, ctx, s, reqs)
	for i := range reqs {
		wonRun(t, reqs[i], res[i])
	}
	// run3 has two runs and start3 two starts: one more claim of each wins.
	g := mustClaim(t, ctx, s, keyReq(prefix+"/g", "single", run3))
	limitedSkip(t, tryClaim(ctx, s, keyReq(prefix+"/h", "single", run3)), prefix+"/h", run3, time.Time{})
	mustFinish(t, ctx, s, succeeded(g))
	mustClaim(t, ctx, s, keyReq(prefix+"/i", "single", start3))
	limitedSkip(t, tryClaim(ctx, s, keyReq(prefix+"/j", "single", start3)), prefix+"/j", start3, time.Time{})
	// run2 is full: a batch naming it wins nothing for it.
	more := []runclaim.ClaimRequest{keyReq(prefix+"/k", "many", run2), keyReq(prefix+"/m", "many")}
	res = mustClaimMany(t, ctx, s, more)
	limitedSkip(t, res[0].Err, more[0].Source, run2, time.Time{})
	wonRun(t, more[1], res[1])
}

// testKeyBadInput: a claim naming an invalid key, a key twice or too many
// keys is an error, not a skip, and claims nothing; invalid limits and
// cooldowns are errors and change nothing.
func testKeyBadInput(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	l := limiterOf(t, s)
	src := prefix + "/a"
	many := make([]string, runclaim.MaxKeys+1)
	for i := range many {
		many[i] = fmt.Sprintf("%s/k%d", prefix, i)
	}
	for name, keys := range map[string][]string{
		"empty": {""}, "NUL": {"a\x00b"}, "invalid UTF-8": {"\xff"}, "huge": {strings.Repeat("k", runclaim.MaxKeyLen+1)},
		"twice": {prefix + "/k", prefix + "/k"}, "too many": many,
	} {
		_, err := s.Claim(ctx, keyReq(src, "owner", keys...))
		if err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("claim naming keys %s: %v, want an error that is not a skip", name, err)
		}
	}
	key := prefix + "/k"
	for _, lim := range []runclaim.Limit{{MaxRunning: -1}, {MaxStarts: 1}, {Per: time.Second}, {MaxStarts: 1, Per: -time.Second}, {MaxStarts: 1, Per: runclaim.MaxLimitPer + time.Hour},
		{MinGap: -time.Second}, {MinGap: runclaim.MaxLimitPer + time.Hour}, {MinGap: time.Nanosecond}} {
		if err := l.SetLimit(ctx, key, lim); err == nil {
			t.Errorf("SetLimit(%+v) returned nil", lim)
		}
	}
	if err := l.SetLimit(ctx, "", runclaim.Limit{MaxRunning: 1}); err == nil {
		t.Errorf("SetLimit of an empty key returned nil")
	}
	if err := l.Cooldown(ctx, key, time.Time{}, ""); err == nil {
		t.Errorf("Cooldown with a zero end returned nil")
	}
	if err := l.Cooldown(ctx, key, time.Now().Add(time.Hour), "bad\x00note"); err == nil {
		t.Errorf("Cooldown with a NUL byte in its note returned nil")
	}
	if err := l.Cooldown(ctx, key, time.Now().Add(time.Hour), strings.Repeat("n", runclaim.MaxCooldownNoteLen+1)); err == nil {
		t.Errorf("Cooldown with a huge note returned nil")
	}
	// Nothing changed: the key constrains nothing, and the source is free.
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, keyReq(src, "owner", key))))
	mustFinish(t, ctx, s, succeeded(mustClaim(t, ctx, s, keyReq(prefix+"/b", "owner", key))))
}

// testKeyRoomForBoth: claims of different sources of a key with room for
// both both win, however they race: a claim that finds the key busy with
// another claim waits for it rather than skip.
func testKeyRoomForBoth(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	stores := openReplicas(open, 2)
	l := limiterOf(t, stores[0])
	key := prefix + "/site"
	mustSetLimit(t, ctx, l, key, runclaim.Limit{MaxRunning: 2})
	for round := range 20 {
		var wg sync.WaitGroup
		gate := make(chan struct{})
		infos := make([]runclaim.RunInfo, 2)
		errs := make([]error, 2)
		for i, s := range stores {
			wg.Go(func() {
				<-gate
				infos[i], errs[i] = s.Claim(ctx, keyReq(fmt.Sprintf("%s/%d", prefix, i), "owner", key))
			})
		}
		close(gate)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: claim %d of a key with room for both: %v", round, i, err)
			}
		}
		for i, s := range stores {
			mustFinish(t, ctx, s, succeeded(infos[i]))
		}
	}
}

// testKeyReplicas: four replicas claim forty sources of one key with
// MaxRunning 3, each replica every source in its own order, all at once;
// exactly three runs start, round after round, and a counter kept on the
// Go side never sees more than three running.
func testKeyReplicas(t *testing.T, open func() runclaim.Store) {
	ctx, prefix := setup(t)
	stores := openReplicas(open, replicas)
	l := limiterOf(t, stores[0])
	key := prefix + "/site"
	const sources, limit, rounds = 40, 3, 8
	mustSetLimit(t, ctx, l, key, runclaim.Limit{MaxRunning: limit})
	var running, most atomic.Int32
	for round := range rounds {
		var (
			mu  sync.Mutex
			won []runclaim.RunInfo
			by  []runclaim.Store
			wg  sync.WaitGroup
		)
		gate := make(chan struct{})
		for r, s := range stores {
			order := rand.Perm(sources)
			wg.Go(func() {
				<-gate
				for _, i := range order {
					info, err := s.Claim(ctx, keyReq(fmt.Sprintf("%s/src-%02d", prefix, i), fmt.Sprintf("replica-%d", r), key))
					if err != nil {
						if !errors.Is(err, runclaim.ErrLimited) && !errors.Is(err, runclaim.ErrAlreadyRunning) {
							t.Errorf("round %d: replica %d: claim: %v", round, r, err)
						}
						continue
					}
					n := running.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					mu.Lock()
					won, by = append(won, info), append(by, s)
					mu.Unlock()
				}
			})
		}
		close(gate)
		wg.Wait()
		if len(won) != limit {
			t.Errorf("round %d: %d runs of the key started, want exactly %d", round, len(won), limit)
		}
		if m := most.Load(); m > limit {
			t.Fatalf("round %d: %d runs of the key ran at once, more than its MaxRunning %d", round, m, limit)
		}
		for i, info := range won {
			running.Add(-1)
			mustFinish(t, ctx, by[i], succeeded(info))
		}
	}
}

// testKeyUnclaim: a keyed run taken back with Unclaim counts for none of
// its keys, as if its claim had never been made: not for MaxRunning, and
// not for MaxStarts in the window, so that the next claim of a key
// allowed one start an hour wins.
func testKeyUnclaim(t *testing.T, s runclaim.Store) {
	l := limiterOf(t, s)
	uc, ok := s.(unclaimer)
	if !ok {
		t.Skipf("storetest: %T has no Unclaim method", s)
	}
	ctx, prefix := setup(t)
	one, two := prefix+"/key-one", prefix+"/key-two"
	mustSetLimit(t, ctx, l, one, runclaim.Limit{MaxStarts: 1, Per: time.Hour})
	mustSetLimit(t, ctx, l, two, runclaim.Limit{MaxRunning: 1})
	taken := mustClaim(t, ctx, s, keyReq(prefix+"/a", "first", one, two))
	if err := uc.Unclaim(ctx, taken); err != nil {
		t.Fatalf("Unclaim(run %d): %v", taken.ID, err)
	}
	next, err := s.Claim(ctx, keyReq(prefix+"/b", "second", one, two))
	if err != nil {
		t.Fatalf("a claim of keys whose only start and run were taken back: %v; want a win (the run taken back counts for no key)", err)
	}
	// The start of the run that won does count.
	_, err = s.Claim(ctx, keyReq(prefix+"/c", "third", one))
	if nc := skipOf(t, err, prefix+"/c", runclaim.ErrLimited); nc != nil && nc.Key != one {
		t.Errorf("the skip names key %q, want %q", nc.Key, one)
	}
	mustFinish(t, ctx, s, succeeded(next))
}

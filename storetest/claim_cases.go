package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// testClaimResult checks what a won and a lost claim report.
func testClaimResult(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	// Not a whole number of seconds, or milliseconds, so that a store that
	// keeps a rounded lease end shows it; whole microseconds, the precision
	// of a Postgres timestamp.
	lease := 45*time.Second + 123457*time.Microsecond
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
	wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), a)
	// The same owner is refused too: a claim is per source, not per owner.
	_, err = s.Claim(ctx, claimReq(src, "owner-a", lease))
	wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), a)

	// After a heartbeat with such a lease, the holder's lease end is the
	// one the heartbeat returned.
	a.LeaseUntil = mustHeartbeat(t, ctx, s, a, lease)
	_, err = s.Claim(ctx, claimReq(src, "owner-b", lease))
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

// testExpiry checks that a run whose lease ended is taken over by the next
// claim, and that its holder then learns it lost the run.
func testExpiry(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	// A lease under a second: the case waits for it to end, by the
	// store's own clock (waitPast), and asserts only what holds after that
	// moment, so a slow machine makes the wait longer, never the answer
	// different.
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
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: lease}); !errors.Is(err, runclaim.ErrLeaseLost) {
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
//
// The lease is 5 s: each claim below is sent right after a heartbeat
// returned and must find the run held, which fails only if the machine
// stalls the case for most of a lease between the two calls. With a lease
// of a second, a loaded CI machine did (PostgreSQL 13). The case runs
// about one lease.
func testHeartbeat(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	src := prefix + "/a"
	const lease = 5 * time.Second
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
		now := a
		now.LeaseUntil = until
		wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), now)
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
	// A heartbeat never moves the lease's end back: one with a shorter
	// lease leaves the longer one in place. (In Postgres, a heartbeat that
	// read the clock and then waited for the row lock behind a later one
	// would otherwise write an earlier end than the one it found.)
	short := mustHeartbeat(t, ctx, s, a, lease)
	if short.Before(long) {
		t.Errorf("heartbeat with lease %v after one with lease %v moved the lease's end back, from %v to %v", lease, longLease, long, short)
	}
	_, err = s.Claim(ctx, claimReq(src, "owner-b", lease))
	held := a
	held.LeaseUntil = short
	wantHolder(t, skipOf(t, err, src, runclaim.ErrAlreadyRunning), held)
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
	// claimer's interval and the one recorded with that run wins.
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

// testMinIntervalEveryRun checks that the interval counts from the start of
// every run, whatever its end: a failed run, and a run whose lease ended
// without a finish.
func testMinIntervalEveryRun(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	req := func(src string, lease time.Duration) runclaim.ClaimRequest {
		return runclaim.ClaimRequest{Source: src, Owner: "owner", Lease: lease, MinInterval: time.Hour}
	}
	tooSoon := func(src string, last runclaim.RunInfo) {
		t.Helper()
		_, err := s.Claim(ctx, req(src, longLease))
		nc := skipOf(t, err, src, runclaim.ErrTooSoon)
		if want := last.StartedAt.Add(time.Hour); !nc.RetryAfter.Equal(want) {
			t.Errorf("RetryAfter = %v, want run %d's start plus the interval, %v", nc.RetryAfter, last.ID, want)
		}
	}

	failedSrc := prefix + "/failed"
	a := mustClaim(t, ctx, s, req(failedSrc, longLease))
	mustFinish(t, ctx, s, failed(a, "a failed run is a run"))
	tooSoon(failedSrc, a)

	// A lease under a second: the case waits for it to end, by the
	// store's own clock (waitPast), and asserts only what holds after that
	// moment, so a slow machine makes the wait longer, never the answer
	// different.
	const lease = 150 * time.Millisecond
	lapsedSrc := prefix + "/lapsed"
	b := mustClaim(t, ctx, s, req(lapsedSrc, lease))
	newStoreClock(t, ctx, s, prefix+"/clock").waitPast(t, ctx, b.LeaseUntil, 20*time.Second)
	tooSoon(lapsedSrc, b)
}

// testLookalikeSources checks that sources which differ only in ways a
// careless store might erase are distinct: each can be claimed while all
// the others are held, is named exactly in its run and its skips, and has
// an interval of its own.
func testLookalikeSources(t *testing.T, s runclaim.Store) {
	ctx, prefix := setup(t)
	names := []string{
		"nightly", "Nightly", "NIGHTLY", "nIGHTLY", // case
		"nightly ", " nightly", "nightly  ", "nightly\u00a0", // spaces
		"night", "nightly-2", "nightl", // prefixes
		"caf\u00e9", "cafe\u0301", "CAF\u00c9", // NFC, NFD, upper case
		"\u212a", "K", "k", // Kelvin sign, K, k
		"stra\u00dfe", "strasse", "STRASSE", // sharp s and its case folding
		"\u0130", "i", "I", "\u0131", // dotted and dotless i
		"\uff4e\uff49\uff47\uff48\uff54\uff4c\uff59", // full-width "nightly"
	}

	// All held at once.
	runs := make([]runclaim.RunInfo, len(names))
	for i, name := range names {
		src := prefix + "/held/" + name
		info, err := s.Claim(ctx, claimReq(src, "owner "+name, longLease))
		if err != nil {
			t.Errorf("claim of %+q while the sources that look like it are held: %v", src, err)
			continue
		}
		if info.Source != src {
			t.Errorf("claim of %+q returned source %+q", src, info.Source)
		}
		runs[i] = info
	}
	for i, r := range runs {
		if r.ID == 0 {
			continue
		}
		_, err := s.Claim(ctx, claimReq(r.Source, "other", longLease))
		wantHolder(t, skipOf(t, err, r.Source, runclaim.ErrAlreadyRunning), runs[i])
		mustFinish(t, ctx, s, succeeded(r))
	}

	// Each with an interval of an hour: the runs of the others, started
	// just before, do not make it too soon, and its own run does.
	req := func(name string) runclaim.ClaimRequest {
		return runclaim.ClaimRequest{Source: prefix + "/interval/" + name, Owner: "owner", Lease: longLease, MinInterval: time.Hour}
	}
	for i, name := range names {
		runs[i] = runclaim.RunInfo{}
		info, err := s.Claim(ctx, req(name))
		if err != nil {
			t.Errorf("claim of %+q with an interval, after runs of sources that look like it: %v", req(name).Source, err)
			continue
		}
		runs[i] = info
		mustFinish(t, ctx, s, succeeded(info))
	}
	for i, name := range names {
		if runs[i].ID == 0 {
			continue
		}
		_, err := s.Claim(ctx, req(name))
		if nc := skipOf(t, err, req(name).Source, runclaim.ErrTooSoon); !nc.RetryAfter.Equal(runs[i].StartedAt.Add(time.Hour)) {
			t.Errorf("claim of %+q: RetryAfter = %v, want its own run's start plus the interval, %v", req(name).Source, nc.RetryAfter, runs[i].StartedAt.Add(time.Hour))
		}
	}
}

package runclaim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// This file tests Claimer, Run and Do against a real Postgres store: leases
// (G2, G3, G4), the minimum interval (G5), skip details, bad input (G8) and
// Finish.

// TestLeaseExpiry: a run left without heartbeats is taken over once its
// lease has ended by the database clock, not before (G2); the new run has a
// higher ID (G4); the old holder's Heartbeat and Finish report ErrLeaseLost
// (G3); and the old row ends expired.
func TestLeaseExpiry(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	// A lease under a second: the test waits it out in real time, and
	// asserts orderings by the database clock (no takeover before the
	// lease's end, one after it), which a slow machine cannot change.
	const lease = 300 * time.Millisecond
	a := newClaimer(t, store, runclaim.WithOwner("a"), runclaim.WithLease(lease))
	b := newClaimer(t, store, runclaim.WithOwner("b"))

	old, err := a.Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	var next *runclaim.Run
	skips := 0
	// The bound catches a takeover that never comes, not a slow one.
	waitUntil(t, 30*time.Second, 20*time.Millisecond, "a claim to take over", func() bool {
		run, err := b.Claim(ctx, "src")
		if err == nil {
			next = run
			return true
		}
		var nc *runclaim.NotClaimedError
		if !errors.As(err, &nc) || !errors.Is(err, runclaim.ErrAlreadyRunning) || nc.Holder == nil || nc.Holder.ID != old.ID {
			t.Fatalf("Claim before the lease ended: %v, want ErrAlreadyRunning held by run %d", err, old.ID)
		}
		skips++
		return false
	})
	t.Logf("%d claims skipped before the takeover", skips)
	if next.StartedAt.Before(old.LeaseUntil) {
		t.Errorf("taken over at %v, before the lease ended at %v", next.StartedAt, old.LeaseUntil)
	}
	if next.ID <= old.ID {
		t.Errorf("new run ID %d is not greater than the old %d", next.ID, old.ID)
	}

	if err := old.Heartbeat(ctx); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("old run's Heartbeat: %v, want ErrLeaseLost", err)
	}
	if err := old.Finish(ctx, nil); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("old run's Finish: %v, want ErrLeaseLost", err)
	}
	if err := old.Finish(ctx, errors.New("job failed")); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("old run's failed Finish: %v, want ErrLeaseLost", err)
	}
	oldRow := loadRun(t, db.Pool, store.Table(), old.ID)
	if oldRow.Status != "expired" || oldRow.FinishedAt == nil || oldRow.FinishedAt.Before(old.LeaseUntil) || oldRow.Error != nil {
		t.Errorf("old row %+v: want expired, finished_at set and not before the lease end %v", oldRow, old.LeaseUntil)
	}
	newRow := loadRun(t, db.Pool, store.Table(), next.ID)
	if diff := cmp.Diff(newRow.info(), runInfo(next)); diff != "" || newRow.Status != "running" {
		t.Errorf("new row is %s; differs from the Run (-row +run):\n%s", newRow.Status, diff)
	}
	if err := next.Finish(ctx, nil); err != nil {
		t.Errorf("new run's Finish: %v", err)
	}
}

// TestHeartbeatKeepsLease: heartbeats extend lease_until (by the database
// clock) and keep other claimers out well past the first lease's end.
//
// The lease is 1 s, so that the test waits two of them. A loaded machine
// can stall the test for longer than a lease between a heartbeat and the
// next (or the rival's claim): the lease then lapses, which is no fault.
// That is told apart by the database's clock (the rival's claim started,
// or the failed heartbeat came, after the lease end), and the test runs
// again with a lease twice as long, up to 8 s. A rival that wins within
// the lease fails the test at once.
func TestHeartbeatKeepsLease(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	for lease := time.Second; ; lease *= 2 {
		if heartbeatsKeepLease(t, db, store, lease) {
			return
		}
		if lease >= 8*time.Second {
			t.Fatalf("the lease lapsed at every length up to %v: the machine stalled the test for longer than a lease each time", lease)
		}
		t.Logf("a lease of %v lapsed between a heartbeat and the next claim (a loaded machine): again with %v", lease, 2*lease)
	}
}

// heartbeatsKeepLease is one run of TestHeartbeatKeepsLease with the given
// lease, on a source of its own. It returns false if the lease lapsed by
// the database's clock before the test's next step.
func heartbeatsKeepLease(t *testing.T, db *pgtest.DB, store *runclaim.PostgresStore, lease time.Duration) bool {
	ctx := t.Context()
	src := "src-" + lease.String()
	a := newClaimer(t, store, runclaim.WithOwner("a"), runclaim.WithLease(lease))
	b := newClaimer(t, store, runclaim.WithOwner("b"))
	run, err := a.Claim(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if !run.Deadline().Equal(run.LeaseUntil) {
		t.Errorf("Deadline() = %v before any heartbeat, want LeaseUntil %v", run.Deadline(), run.LeaseUntil)
	}
	prev := run.LeaseUntil
	beats := 0
	lapsed := false
	// Heartbeat every lease/5 until the database clock is a lease past the
	// first lease's end; every other claim meanwhile is skipped.
	waitUntil(t, 20*lease, lease/5, "a lease past the first lease", func() bool {
		if err := run.Heartbeat(ctx); err != nil {
			if now := dbNow(t, db.Pool); errors.Is(err, runclaim.ErrLeaseLost) && !now.Before(prev) {
				lapsed = true
				return true
			}
			t.Fatalf("Heartbeat: %v (lease until %v)", err, prev)
		}
		beats++
		row := loadRun(t, db.Pool, store.Table(), run.ID)
		if !row.LeaseUntil.After(prev) || !row.LeaseUntil.Equal(run.Deadline()) || !aboutLease(row.LeaseUntil.Sub(row.HeartbeatAt), lease) {
			t.Fatalf("after heartbeat %d: lease_until %v (previous %v), heartbeat_at %v, Deadline %v", beats, row.LeaseUntil, prev, row.HeartbeatAt, run.Deadline())
		}
		prev = row.LeaseUntil
		rival, err := b.Claim(ctx, src)
		switch {
		case err == nil:
			if started := loadRun(t, db.Pool, store.Table(), rival.ID).StartedAt; started.Before(prev) {
				t.Fatalf("G1 broken: a rival's claim started at %v, while the holder's lease ran until %v", started, prev)
			}
			_ = rival.Finish(ctx, nil)
			lapsed = true
			return true
		case !errors.Is(err, runclaim.ErrAlreadyRunning):
			t.Fatalf("Claim while the holder heartbeats: %v, want ErrAlreadyRunning", err)
		}
		return dbNow(t, db.Pool).After(run.LeaseUntil.Add(lease))
	})
	if lapsed {
		return false
	}
	if !run.LeaseUntil.Equal(loadRun(t, db.Pool, store.Table(), run.ID).StartedAt.Add(lease)) {
		t.Errorf("Run.LeaseUntil changed: it must stay the lease granted by the claim")
	}
	t.Logf("%d heartbeats with a lease of %v", beats, lease)
	if err := run.Finish(ctx, nil); err != nil {
		t.Errorf("Finish after heartbeats: %v", err)
	}
	return true
}

// aboutLease reports whether a heartbeat's lease_until - heartbeat_at is
// the lease. The heartbeat reads clock_timestamp() once for each column, so
// the two may be a few microseconds apart.
func aboutLease(got, lease time.Duration) bool {
	return got > lease-time.Millisecond && got < lease+time.Millisecond
}

// TestMinInterval: with a minimum interval, a claim too soon after the last
// start is skipped with ErrTooSoon, and its RetryAfter is exactly the last
// start plus the interval; a claim after that succeeds (G5).
func TestMinInterval(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	const interval = time.Second
	c := newClaimer(t, store, runclaim.WithMinInterval(interval))
	first, err := c.Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	// While it runs, the reason is that it runs.
	if _, err := c.Claim(ctx, "src"); !errors.Is(err, runclaim.ErrAlreadyRunning) || errors.Is(err, runclaim.ErrTooSoon) {
		t.Errorf("Claim while running: %v, want ErrAlreadyRunning", err)
	}
	if err := first.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	row := loadRun(t, db.Pool, store.Table(), first.ID)
	want := &runclaim.NotClaimedError{Source: "src", Reason: runclaim.ErrTooSoon, RetryAfter: row.StartedAt.Add(interval)}

	_, err = c.Claim(ctx, "src")
	var nc *runclaim.NotClaimedError
	if !errors.Is(err, runclaim.ErrTooSoon) || !errors.Is(err, runclaim.ErrNotClaimed) || errors.Is(err, runclaim.ErrAlreadyRunning) || !errors.As(err, &nc) {
		t.Fatalf("Claim right after a run: %v, want ErrTooSoon as *NotClaimedError", err)
	}
	if diff := cmp.Diff(want, nc, sameReason); diff != "" {
		t.Errorf("ErrTooSoon details (-want +got):\n%s", diff)
	}
	if !strings.Contains(err.Error(), "too soon") {
		t.Errorf("error text %q does not say why", err)
	}
	// Other sources are not held back.
	if _, err := c.Claim(ctx, "other"); err != nil {
		t.Errorf("Claim of another source: %v", err)
	}

	var second *runclaim.Run
	waitUntil(t, 10*interval, 20*time.Millisecond, "the minimum interval to pass", func() bool {
		run, err := c.Claim(ctx, "src")
		if err == nil {
			second = run
			return true
		}
		if !errors.As(err, &nc) || nc.Reason != runclaim.ErrTooSoon || !nc.RetryAfter.Equal(want.RetryAfter) {
			t.Fatalf("Claim before RetryAfter: %v, want ErrTooSoon with RetryAfter %v", err, want.RetryAfter)
		}
		return false
	})
	if second.StartedAt.Before(want.RetryAfter) {
		t.Errorf("second run started at %v, before RetryAfter %v", second.StartedAt, want.RetryAfter)
	}
	if got := second.StartedAt.Sub(first.StartedAt); got < interval {
		t.Errorf("two runs started %v apart, less than the interval %v", got, interval)
	}
}

// TestAlreadyRunningDetails: a skip because of a running run carries that
// run, as recorded in the database.
func TestAlreadyRunningDetails(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	a := newClaimer(t, store, runclaim.WithOwner("pod-7"))
	b := newClaimer(t, store, runclaim.WithOwner("pod-8"))
	run, err := a.Claim(ctx, "avito")
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		row := loadRun(t, db.Pool, store.Table(), run.ID)
		holder := row.info()
		want := &runclaim.NotClaimedError{Source: "avito", Reason: runclaim.ErrAlreadyRunning, Holder: &holder, RetryAfter: row.LeaseUntil}
		_, err := b.Claim(ctx, "avito")
		var nc *runclaim.NotClaimedError
		if !errors.Is(err, runclaim.ErrAlreadyRunning) || !errors.Is(err, runclaim.ErrNotClaimed) || errors.Is(err, runclaim.ErrTooSoon) || !errors.As(err, &nc) {
			t.Fatalf("%s: Claim = %v, want ErrAlreadyRunning as *NotClaimedError", what, err)
		}
		if diff := cmp.Diff(want, nc, sameReason); diff != "" {
			t.Errorf("%s: skip details (-want +got):\n%s", what, diff)
		}
		if !strings.Contains(err.Error(), "pod-7") {
			t.Errorf("%s: error text %q does not name the holder", what, err)
		}
	}
	if diff := cmp.Diff(loadRun(t, db.Pool, store.Table(), run.ID).info(), runInfo(run)); diff != "" {
		t.Errorf("Run differs from its row (-row +run):\n%s", diff)
	}
	check("after the claim")
	if err := run.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a heartbeat")
}

// TestBadInput: bad input is refused with a clear error before any SQL is
// sent: no write reaches the server, the table keeps its rows and no
// advisory lock is held (G8). None of these errors is a skip.
func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	pool, wire := countingPool(t, db, 4)
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, store, runclaim.WithOwner("a"))
	held, err := c.Claim(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.Claim(ctx, "done")
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	before := readState(t, db.Pool, store.Table())

	var nilCtx context.Context
	claim := func(ctx context.Context, source string) func() error {
		return func() error { _, err := c.Claim(ctx, source); return err }
	}
	newWith := func(s runclaim.Store, opts ...runclaim.Option) func() error {
		return func() error {
			cl, err := runclaim.New(s, opts...)
			if cl != nil {
				t.Errorf("New returned a Claimer with error %v", err)
			}
			return err
		}
	}
	for _, tc := range []struct {
		name    string
		call    func() error
		invalid bool   // wraps ErrInvalidSource
		want    string // in the error text
	}{
		{"empty source", claim(ctx, ""), true, "empty"},
		{"10 KB source", claim(ctx, strings.Repeat("s", 10<<10)), true, "more than the limit"},
		{"source one byte too long", claim(ctx, strings.Repeat("s", runclaim.MaxSourceLen+1)), true, "more than the limit"},
		{"NUL byte", claim(ctx, "av\x00ito"), true, "NUL"},
		{"NUL bytes only", claim(ctx, "\x00\x00"), true, "NUL"},
		{"invalid UTF-8", claim(ctx, "avito\xff\xfe"), true, "UTF-8"},
		{"control character", claim(ctx, "avi\nto"), true, "control character"},
		{"nil context", claim(nilCtx, "avito"), false, "nil context"},
		{"nil context, valid source", claim(nilCtx, "held"), false, "nil context"},
		{"Heartbeat with nil context", func() error { return held.Heartbeat(nilCtx) }, false, "nil context"},
		{"Do with nil function", func() error { return c.Do(ctx, "avito", nil) }, false, "nil function"},
		{"Do with bad source", func() error {
			return c.Do(ctx, "", func(context.Context, *runclaim.Run) error { t.Error("fn called"); return nil })
		}, true, "empty"},
		{"zero lease", newWith(store, runclaim.WithLease(0)), false, "WithLease"},
		{"negative lease", newWith(store, runclaim.WithLease(-time.Second)), false, "WithLease"},
		{"lease below MinLease", newWith(store, runclaim.WithLease(runclaim.MinLease-1)), false, "WithLease"},
		{"lease above MaxLease", newWith(store, runclaim.WithLease(runclaim.MaxLease+1)), false, "WithLease"},
		{"negative interval", newWith(store, runclaim.WithMinInterval(-time.Nanosecond)), false, "WithMinInterval"},
		{"zero heartbeat", newWith(store, runclaim.WithHeartbeat(0)), false, "WithHeartbeat"},
		{"heartbeat of half the lease", newWith(store, runclaim.WithLease(time.Second), runclaim.WithHeartbeat(500*time.Millisecond)), false, "WithHeartbeat"},
		{"empty owner", newWith(store, runclaim.WithOwner("")), false, "WithOwner"},
		{"owner with NUL", newWith(store, runclaim.WithOwner("a\x00b")), false, "WithOwner"},
		{"nil option", newWith(store, nil), false, "nil Option"},
		{"nil store", newWith(nil), false, "nil Store"},
		{"typed nil store", newWith((*runclaim.PostgresStore)(nil)), false, "nil Store"},
		{"nil pool", func() error { _, err := runclaim.NewPostgresStore(nil); return err }, false, "nil pool"},
		{"typed nil pool", func() error { _, err := runclaim.NewPostgresStore((*pgxpool.Pool)(nil)); return err }, false, "nil pool"},
		{"nil store option", func() error { _, err := runclaim.NewPostgresStore(pool, nil); return err }, false, "nil PostgresOption"},
		{"store: zero lease", func() error {
			_, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "avito", Owner: "a"})
			return err
		}, false, "lease"},
		{"store: negative interval", func() error {
			_, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "avito", Owner: "a", Lease: time.Second, MinInterval: -1})
			return err
		}, false, "interval"},
		{"store: empty owner", func() error {
			_, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "avito", Lease: time.Second})
			return err
		}, false, "owner"},
		{"store: bad source", func() error {
			_, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "a\xff", Owner: "a", Lease: time.Second})
			return err
		}, true, "UTF-8"},
		{"store: nil context", func() error {
			_, err := store.Claim(nilCtx, runclaim.ClaimRequest{Source: "avito", Owner: "a", Lease: time.Second})
			return err
		}, false, "nil context"},
		{"store: heartbeat of run 0", func() error {
			_, err := store.Heartbeat(ctx, runclaim.HeartbeatRequest{Source: held.Source, StartedAt: held.StartedAt, Lease: time.Second})
			return err
		}, false, "run ID"},
		{"store: heartbeat with zero lease", func() error {
			_, err := store.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: held.ID, Source: held.Source, StartedAt: held.StartedAt})
			return err
		}, false, "lease"},
		{"store: finish as running", func() error {
			return store.Finish(ctx, runclaim.FinishRequest{ID: held.ID, Source: held.Source, StartedAt: held.StartedAt, Status: runclaim.StatusRunning})
		}, false, "not \"running\""},
		{"store: succeeded with error text", func() error {
			return store.Finish(ctx, runclaim.FinishRequest{ID: held.ID, Source: held.Source, StartedAt: held.StartedAt, Status: runclaim.StatusSucceeded, Error: "x"})
		}, false, "no error text"},
		{"store: finish with nil context", func() error {
			return store.Finish(nilCtx, runclaim.FinishRequest{ID: held.ID, Source: held.Source, StartedAt: held.StartedAt, Status: runclaim.StatusSucceeded})
		}, false, "nil context"},
	} {
		w0, _ := wire.Counts()
		err := tc.call()
		w1, _ := wire.Counts()
		switch {
		case err == nil:
			t.Errorf("%s: no error", tc.name)
			continue
		case errors.Is(err, runclaim.ErrNotClaimed):
			t.Errorf("%s: %v is a skip", tc.name, err)
		case errors.Is(err, runclaim.ErrInvalidSource) != tc.invalid:
			t.Errorf("%s: errors.Is(%v, ErrInvalidSource) = %v, want %v", tc.name, err, !tc.invalid, tc.invalid)
		case !strings.HasPrefix(err.Error(), "runclaim: ") || !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: error %q does not start with \"runclaim: \" and say %q", tc.name, err, tc.want)
		case len(err.Error()) > 300:
			t.Errorf("%s: error is %d bytes long: %.100q…", tc.name, len(err.Error()), err)
		}
		if w1 != w0 {
			t.Errorf("%s: %d writes reached the server; bad input must be refused before any SQL", tc.name, w1-w0)
		}
	}
	if diff := cmp.Diff(before, readState(t, db.Pool, store.Table())); diff != "" {
		t.Errorf("table changed by bad input (-before +after):\n%s", diff)
	}
	if n := advisoryLocks(t, db.Pool); n != 0 {
		t.Errorf("%d advisory locks held after bad input", n)
	}
	// The run that was held is still good.
	if err := held.Finish(ctx, nil); err != nil {
		t.Errorf("Finish of the held run: %v", err)
	}
}

// TestRunFinishIdempotent: a Run's Finish repeated with the same outcome
// returns nil without asking the database again; another outcome returns
// ErrFinished; Heartbeat after Finish returns ErrFinished.
func TestRunFinishIdempotent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	pool, wire := countingPool(t, db, 2)
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, store)
	sent := func(f func() error) (int64, error) {
		w0, _ := wire.Counts()
		err := f()
		w1, _ := wire.Counts()
		return w1 - w0, err
	}

	for _, tc := range []struct {
		name    string
		outcome error
		other   error
		status  string
	}{
		{"succeeded", nil, errors.New("boom"), "succeeded"},
		{"failed", errors.New("boom"), nil, "failed"},
	} {
		run, err := c.Claim(ctx, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := sent(func() error { return run.Finish(ctx, tc.outcome) }); err != nil || n == 0 {
			t.Fatalf("%s: first Finish: %v after %d writes", tc.name, err, n)
		}
		row := loadRun(t, db.Pool, store.Table(), run.ID)
		if row.Status != tc.status {
			t.Errorf("%s: status %s", tc.name, row.Status)
		}
		if n, err := sent(func() error { return run.Finish(ctx, tc.outcome) }); err != nil || n != 0 {
			t.Errorf("%s: repeated Finish: %v after %d writes, want nil after none", tc.name, err, n)
		}
		if n, err := sent(func() error { return run.Finish(ctx, tc.other) }); !errors.Is(err, runclaim.ErrFinished) || n != 0 {
			t.Errorf("%s: Finish with another outcome: %v after %d writes, want ErrFinished after none", tc.name, err, n)
		}
		if n, err := sent(func() error { return run.Heartbeat(ctx) }); !errors.Is(err, runclaim.ErrFinished) || n != 0 {
			t.Errorf("%s: Heartbeat after Finish: %v after %d writes, want ErrFinished after none", tc.name, err, n)
		}
		if diff := cmp.Diff(row, loadRun(t, db.Pool, store.Table(), run.ID)); diff != "" {
			t.Errorf("%s: row changed (-first +now):\n%s", tc.name, diff)
		}
	}
}

// TestDoCancelsOnReleasedRun: when a heartbeat finds the run gone (an
// operator released it), Do cancels fn's context with ErrLeaseLost as the
// cause, and Do's error says so (G3).
func TestDoCancelsOnReleasedRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	c := newClaimer(t, store, runclaim.WithLease(time.Second), runclaim.WithHeartbeat(50*time.Millisecond))
	var id int64
	err := c.Do(ctx, "src", func(ctx context.Context, run *runclaim.Run) error {
		id = run.ID
		if _, err := db.Pool.Exec(ctx, "UPDATE "+store.Table()+" SET status = 'released', finished_at = clock_timestamp() WHERE id = $1", run.ID); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			return errors.New("fn's context was not cancelled within 10s of the release")
		}
		if cause := context.Cause(ctx); !errors.Is(cause, runclaim.ErrLeaseLost) {
			t.Errorf("cause of the cancellation: %v, want ErrLeaseLost", cause)
		}
		return ctx.Err()
	})
	if !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Do: %v, want ErrLeaseLost", err)
	}
	if row := loadRun(t, db.Pool, store.Table(), id); row.Status != "released" {
		t.Errorf("status %s, want released (Do must not overwrite it)", row.Status)
	}
}

// TestDoCancelsAtLocalLeaseEnd: when heartbeats cannot get through (here a
// transaction holds the run's row locked, so they hang), Do cancels fn's
// context with ErrLeaseLost once the lease has ended by the holder's own
// clock, and not much before (G3). TestDoCancelsAtLocalLeaseEndMemory
// checks the exact moment in a synctest bubble; this test checks it against
// a database, by orderings: not before the lease less a quarter of it (a
// timer never fires early, whatever the load), and, whatever the machine's
// speed, with the run recorded as failed or expired, never succeeded.
func TestDoCancelsAtLocalLeaseEnd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	// Two seconds: the expiry margin, (lease − 2·heartbeat)/4 = 250 ms, is
	// then long enough for Do's Finish to reach the database before the
	// lease ends there on most runs, so that the "failed" branch below is
	// the one usually taken.
	const lease = 2 * time.Second
	c := newClaimer(t, store, runclaim.WithLease(lease), runclaim.WithHeartbeat(lease/4))
	var id int64
	var cancelledAt time.Time
	start := time.Now()
	err := c.Do(ctx, "src", func(runCtx context.Context, run *runclaim.Run) error {
		id = run.ID
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctx, "SELECT FROM "+store.Table()+" WHERE id = $1 FOR UPDATE", run.ID); err != nil {
			return err
		}
		select {
		case <-runCtx.Done():
			cancelledAt = time.Now()
		case <-time.After(10 * time.Second):
			return errors.New("fn's context was not cancelled within 10s")
		}
		if cause := context.Cause(runCtx); !errors.Is(cause, runclaim.ErrLeaseLost) {
			t.Errorf("cause of the cancellation: %v, want ErrLeaseLost", cause)
		}
		return runCtx.Err()
	})
	if !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Do: %v, want ErrLeaseLost", err)
	}
	// Do may give up a little before the lease's end by its own clock, but
	// by less than a quarter of the lease (the heartbeat interval is below
	// half the lease).
	if got := cancelledAt.Sub(start); got < lease-lease/4 {
		t.Errorf("cancelled %v after the claim was sent: too early for a lease of %v", got, lease)
	}
	// Do records the outcome as failed, if its Finish reaches the database
	// before the lease ends there (the margin is 250 ms here), or, on a
	// machine too loaded for that, the database records the run as expired:
	// a lease that has ended is lost (G2). Never succeeded, never running.
	switch row := loadRun(t, db.Pool, store.Table(), id); row.Status {
	case "failed":
	case "expired":
		t.Logf("Do's Finish reached the database after the lease had ended there: recorded as expired")
	default:
		t.Errorf("status %s, want failed (or expired, if Do's Finish came after the lease's end)", row.Status)
	}
}

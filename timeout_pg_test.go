package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// This file tests server defaults a DBA may set (G7, G8): a 1 ms
// statement_timeout or lock_timeout, an idle_in_transaction_session_timeout
// and default_transaction_read_only. Each gives a clear error, wrapped
// (errors.As finds the server's *pgconn.PgError), and never a phantom
// claim: a claim that errors leaves no running row, holds no lock, and the
// source can be claimed once the setting is gone.

// checkPool opens a pool on db whose sessions override the database
// defaults that the tests set, so that the checks themselves are not cut
// off or made read-only.
func checkPool(t *testing.T, db *pgtest.DB) *pgxpool.Pool {
	t.Helper()
	return db.NewPool(t, func(c *pgxpool.Config) {
		for k, v := range map[string]string{
			"statement_timeout":                   "0",
			"lock_timeout":                        "0",
			"idle_in_transaction_session_timeout": "0",
			"default_transaction_read_only":       "off",
		} {
			c.ConnConfig.RuntimeParams[k] = v
		}
	})
}

func resetDatabase(t *testing.T, check *pgxpool.Pool, db *pgtest.DB, setting string) {
	t.Helper()
	sql := fmt.Sprintf("ALTER DATABASE %s RESET %s", pgx.Identifier{db.Name}.Sanitize(), setting)
	if _, err := check.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// runningOf returns the IDs of the running runs of source.
func runningOf(t *testing.T, check *pgxpool.Pool, table, source string) []int64 {
	t.Helper()
	rows, err := check.Query(t.Context(), "SELECT id FROM "+table+" WHERE source = $1 AND status = 'running' ORDER BY id", source)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// lockedExpiredRun gives source a running run whose lease has ended, and
// holds that row locked (SELECT ... FOR UPDATE) in a transaction of its
// own, so that a claim's expiry UPDATE must wait for it. It returns the run
// and the locking transaction, rolled back when the test ends.
func lockedExpiredRun(t *testing.T, check *pgxpool.Pool, store *runclaim.PostgresStore, source string) (*runclaim.Run, pgx.Tx) {
	t.Helper()
	ctx := t.Context()
	// MinLease (10 ms): a run that lapses at once, to reach the path of an
	// expired run; the test waits for its end by the database clock.
	old, err := newClaimer(t, store, runclaim.WithOwner("old"), runclaim.WithLease(runclaim.MinLease)).Claim(ctx, source)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, 5*time.Millisecond, "the old lease to end", func() bool { return dbNow(t, check).After(old.LeaseUntil) })
	tx, err := check.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+store.Table()+" WHERE id = $1 FOR UPDATE", old.ID); err != nil {
		t.Fatal(err)
	}
	return old, tx
}

// lockTable makes claims wait inside the database: a transaction of its
// own holds table in ACCESS EXCLUSIVE mode (as a migration or an operator
// might) until unlock is called, or the test ends.
func lockTable(t *testing.T, check *pgxpool.Pool, table string) (unlock func()) {
	t.Helper()
	tx, err := check.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() { once.Do(func() { _ = tx.Rollback(context.Background()) }) }
	t.Cleanup(unlock)
	return unlock
}

// waitedOrReturned polls until either a session of the database waits for
// a lock (it returns true) or returned reports that the claim returned
// (false).
func waitedOrReturned(t *testing.T, check *pgxpool.Pool, returned func() bool) (waited bool) {
	t.Helper()
	waitUntil(t, 10*time.Second, 2*time.Millisecond, "the claim to wait for the row lock or return", func() bool {
		if returned() {
			return true
		}
		var n int
		err := check.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		waited = err == nil && n > 0
		return waited
	})
	return waited
}

// TestDBAStatementTimeout: ALTER DATABASE ... SET statement_timeout =
// '1ms'. A claim that cannot finish in time (it waits for a table lock)
// returns 57014 query_canceled, wrapped, writes nothing and holds no lock.
// Then 4 claimers hammer 4 sources under the 1 ms timeout: whatever each
// claim, heartbeat and finish returns, every run in the table is one a
// claimer was told it won (no phantom), every failure is a clear 57014, and
// no advisory lock is left. After RESET, the source is claimed.
func TestDBAStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	check := checkPool(t, db)
	store := migratedStore(t, check)
	alterDatabase(t, db, "statement_timeout", "1ms")
	timed, err := runclaim.NewPostgresStore(db.NewPool(t, nil))
	if err != nil {
		t.Fatal(err)
	}

	before := readState(t, check, store.Table())
	unlock := lockTable(t, check, store.Table())
	_, err = newClaimer(t, timed, runclaim.WithOwner("new")).Claim(ctx, "blocked")
	checkRealError(t, err, "runclaim: claim")
	if code := pgCode(err); code != "57014" {
		t.Errorf("Claim cut off by statement_timeout: %v (SQLSTATE %q), want 57014", err, code)
	}
	unlock()
	if diff := cmp.Diff(before, readState(t, check, store.Table())); diff != "" {
		t.Errorf("the claim that timed out changed the table (-before +after):\n%s", diff)
	}
	if n := advisoryLocks(t, check); n != 0 {
		t.Errorf("%d advisory locks held after the claim that timed out", n)
	}

	// Hammer: every outcome is fine, as long as the table agrees with it.
	var (
		mu      sync.Mutex // protects won
		won     = map[int64]bool{}
		results sync.Map // outcome -> *atomic.Int64
		wg      sync.WaitGroup
	)
	count := func(outcome string) {
		v, _ := results.LoadOrStore(outcome, &atomic.Int64{})
		v.(*atomic.Int64).Add(1)
	}
	classify := func(what string, err error) {
		switch {
		case err == nil:
			count(what + " ok")
		case errors.Is(err, runclaim.ErrNotClaimed):
			count(what + " skipped")
		case errors.Is(err, runclaim.ErrLeaseLost):
			count(what + " lease lost")
		case pgCode(err) == "57014":
			count(what + " 57014")
		default:
			count(what + " other")
			t.Errorf("%s under a 1ms statement_timeout: %v, want success, a skip or 57014", what, err)
		}
	}
	for i := range 4 {
		c := newClaimer(t, timed, runclaim.WithOwner(fmt.Sprintf("w%d", i)), runclaim.WithLease(time.Minute))
		wg.Go(func() {
			for j := range 50 {
				run, err := c.Claim(ctx, fmt.Sprintf("s%d", (i+j)%4))
				classify("claim", err)
				if err != nil {
					continue
				}
				mu.Lock()
				won[run.ID] = true
				mu.Unlock()
				classify("heartbeat", run.Heartbeat(ctx))
				// A Finish that times out leaves the run running: the
				// source stays held, as it must when the outcome is not
				// recorded.
				classify("finish", run.Finish(ctx, nil))
			}
		})
	}
	wg.Wait()
	summary := map[string]int64{}
	results.Range(func(k, v any) bool { summary[k.(string)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("under a 1ms statement_timeout: %v", summary)

	rows, err := check.Query(ctx, "SELECT id FROM "+store.Table()+" WHERE owner LIKE 'w_'")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !won[id] {
			t.Errorf("phantom claim: run %d is in the table but its claim returned an error", id)
		}
	}
	if len(ids) != len(won) {
		t.Errorf("%d runs in the table, %d claims won", len(ids), len(won))
	}
	if n := advisoryLocks(t, check); n != 0 {
		t.Errorf("%d advisory locks held", n)
	}

	resetDatabase(t, check, db, "statement_timeout")
	after, err := runclaim.NewPostgresStore(db.NewPool(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	run, err := newClaimer(t, after, runclaim.WithOwner("after")).Claim(ctx, "blocked")
	if err != nil {
		t.Fatalf("Claim after RESET statement_timeout: %v", err)
	}
	if ids := runningOf(t, check, store.Table(), "blocked"); !cmp.Equal(ids, []int64{run.ID}) {
		t.Errorf("running runs of the source after RESET: %v, want only %d", ids, run.ID)
	}
}

// TestDBALockTimeout: ALTER DATABASE ... SET lock_timeout.
//
//   - table_locked: with 1 ms, a claim that must wait for a table lock
//     fails with 55P03 lock_not_available, wrapped, and writes nothing;
//     once the lock is gone the source is claimed.
//   - expired_row_locked: another session holds the expired running row
//     locked (a late heartbeat or finish of its holder, an operator). With
//     1 ms the claim either fails with 55P03 or skips the locked row at
//     once (ErrAlreadyRunning with the old run as holder): never a second
//     running run. After the other session rolls back, the source is taken
//     over.
//   - holder_heartbeats, holder_finishes: with a long timeout, the claim
//     either waits for the row or skips it; then the other session commits.
//     If it committed a heartbeat, the claim (or the next one) must not
//     expire a run whose lease was just extended; if it committed the
//     finish, the claim (or the next one) wins.
func TestDBALockTimeout(t *testing.T) {
	t.Parallel()
	t.Run("table_locked", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		db := pgtest.New(t)
		check := checkPool(t, db)
		store := migratedStore(t, check)
		alterDatabase(t, db, "lock_timeout", "1ms")
		timed, err := runclaim.NewPostgresStore(db.NewPool(t, nil))
		if err != nil {
			t.Fatal(err)
		}
		before := readState(t, check, store.Table())
		unlock := lockTable(t, check, store.Table())
		c := newClaimer(t, timed, runclaim.WithOwner("new"))
		_, err = c.Claim(ctx, "src")
		checkRealError(t, err, "runclaim: claim")
		if code := pgCode(err); code != "55P03" {
			t.Errorf("Claim under a 1ms lock_timeout: %v (SQLSTATE %q), want 55P03", err, code)
		}
		unlock()
		if diff := cmp.Diff(before, readState(t, check, store.Table())); diff != "" {
			t.Errorf("the claim that timed out changed the table (-before +after):\n%s", diff)
		}
		if n := advisoryLocks(t, check); n != 0 {
			t.Errorf("%d advisory locks held after the failed claim", n)
		}
		if _, err := c.Claim(ctx, "src"); err != nil {
			t.Errorf("Claim once the table is free: %v", err)
		}
	})
	t.Run("expired_row_locked", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		db := pgtest.New(t)
		check := checkPool(t, db)
		store := migratedStore(t, check)
		old, tx := lockedExpiredRun(t, check, store, "src")
		alterDatabase(t, db, "lock_timeout", "1ms")
		timed, err := runclaim.NewPostgresStore(db.NewPool(t, nil))
		if err != nil {
			t.Fatal(err)
		}
		before := readState(t, check, store.Table())
		c := newClaimer(t, timed, runclaim.WithOwner("new"))
		_, err = c.Claim(ctx, "src")
		var nc *runclaim.NotClaimedError
		switch {
		case pgCode(err) == "55P03":
			checkRealError(t, err, "runclaim: claim")
			t.Logf("the claim waited for the locked row and timed out: %v", err)
		case errors.As(err, &nc) && errors.Is(err, runclaim.ErrAlreadyRunning) && nc.Holder != nil && nc.Holder.ID == old.ID:
			t.Logf("the claim skipped the locked row: %v", err)
		default:
			t.Errorf("Claim while the expired run is locked, under a 1ms lock_timeout: %v, want 55P03 or ErrAlreadyRunning held by run %d", err, old.ID)
		}
		if diff := cmp.Diff(before, readState(t, check, store.Table())); diff != "" {
			t.Errorf("table changed (-before +after):\n%s", diff)
		}
		if n := advisoryLocks(t, check); n != 0 {
			t.Errorf("%d advisory locks held after the claim", n)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		run, err := c.Claim(ctx, "src") // lock_timeout is still 1ms; nothing blocks now
		if err != nil {
			t.Fatalf("Claim once the row is free: %v", err)
		}
		if ids := runningOf(t, check, store.Table(), "src"); !cmp.Equal(ids, []int64{run.ID}) {
			t.Errorf("running runs after the takeover: %v, want only %d", ids, run.ID)
		}
		if r := loadRun(t, check, store.Table(), old.ID); r.Status != "expired" {
			t.Errorf("old run after the takeover: %s, want expired", r.Status)
		}
	})
	for _, tc := range []struct {
		name    string
		commit  string // run by the locking session, $1 the old run's ID
		wantWin bool
	}{
		{"holder_heartbeats", "UPDATE %s SET lease_until = clock_timestamp() + interval '1 minute', heartbeat_at = clock_timestamp() WHERE id = $1", false},
		{"holder_finishes", "UPDATE %s SET status = 'succeeded', finished_at = clock_timestamp() WHERE id = $1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.New(t)
			check := checkPool(t, db)
			store := migratedStore(t, check)
			old, tx := lockedExpiredRun(t, check, store, "src")
			alterDatabase(t, db, "lock_timeout", "10s")
			timed, err := runclaim.NewPostgresStore(db.NewPool(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			c := newClaimer(t, timed, runclaim.WithOwner("new"))
			type result struct {
				run *runclaim.Run
				err error
			}
			done := make(chan result, 1)
			go func() {
				run, err := c.Claim(ctx, "src")
				done <- result{run, err}
			}()
			var res result
			returned := false
			waited := waitedOrReturned(t, check, func() bool {
				select {
				case res = <-done:
					returned = true
				default:
				}
				return returned
			})
			if !waited {
				// The claim skipped the locked row: it must not have
				// touched it.
				var nc *runclaim.NotClaimedError
				if !errors.As(res.err, &nc) || !errors.Is(res.err, runclaim.ErrAlreadyRunning) || nc.Holder == nil || nc.Holder.ID != old.ID {
					t.Fatalf("Claim while the expired run is locked: %v, want to wait, or ErrAlreadyRunning held by run %d", res.err, old.ID)
				}
				if ids := runningOf(t, check, store.Table(), "src"); !cmp.Equal(ids, []int64{old.ID}) {
					t.Fatalf("running runs after the skipped claim: %v, want only the old run %d", ids, old.ID)
				}
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(tc.commit, store.Table()), old.ID); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if waited {
				select {
				case res = <-done:
				case <-time.After(15 * time.Second):
					t.Fatal("the claim did not return within 15s of the commit")
				}
			} else {
				res.run, res.err = c.Claim(ctx, "src")
			}
			t.Logf("the claim waited for the row: %v; after the commit: %v", waited, res.err)
			running := runningOf(t, check, store.Table(), "src")
			if tc.wantWin {
				if res.err != nil {
					t.Fatalf("Claim after the holder finished: %v", res.err)
				}
				if !cmp.Equal(running, []int64{res.run.ID}) {
					t.Errorf("running runs: %v, want only the new run %d", running, res.run.ID)
				}
				return
			}
			var nc *runclaim.NotClaimedError
			if !errors.As(res.err, &nc) || !errors.Is(res.err, runclaim.ErrAlreadyRunning) || nc.Holder == nil || nc.Holder.ID != old.ID {
				t.Errorf("Claim after the holder heartbeated: %v, want ErrAlreadyRunning with run %d as holder", res.err, old.ID)
			}
			if r := loadRun(t, check, store.Table(), old.ID); r.Status != "running" {
				t.Errorf("the heartbeated run is %s, want running", r.Status)
			}
			if !cmp.Equal(running, []int64{old.ID}) {
				t.Errorf("running runs: %v, want only the old run %d", running, old.ID)
			}
		})
	}
}

// TestDBAIdleInTransactionTimeout: with idle_in_transaction_session_timeout
// at 1 ms, claims (in the implicit form and, under a repeatable read
// default, the explicit BEGIN ... COMMIT form), heartbeats, finishes, Do and
// the operator commands all work: none leaves a transaction open between
// round trips. Migrate holds a transaction over several round trips; it
// either works or fails with a clear error and creates nothing.
func TestDBAIdleInTransactionTimeout(t *testing.T) {
	t.Parallel()
	for _, isolation := range []string{"read committed", "repeatable read"} {
		t.Run(isolation, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.New(t)
			check := checkPool(t, db)
			migratedStore(t, check)
			alterDatabase(t, db, "default_transaction_isolation", isolation)
			alterDatabase(t, db, "idle_in_transaction_session_timeout", "1ms")
			pool := db.NewPool(t, nil)
			store, err := runclaim.NewPostgresStore(pool)
			if err != nil {
				t.Fatal(err)
			}
			// A lease of a minute: b's claim must find a's run held, which
			// a busy machine broke with a lease of a second (CI,
			// PostgreSQL 14); nothing here waits for a lease to end.
			a := newClaimer(t, store, runclaim.WithOwner("a"), runclaim.WithLease(time.Minute))
			b := newClaimer(t, store, runclaim.WithOwner("b"))
			for i := range 20 {
				src := fmt.Sprintf("s%d", i%3)
				run, err := a.Claim(ctx, src)
				if err != nil {
					t.Fatalf("Claim #%d: %v", i, err)
				}
				if _, err := b.Claim(ctx, src); !errors.Is(err, runclaim.ErrAlreadyRunning) {
					t.Fatalf("losing Claim #%d: %v", i, err)
				}
				if err := run.Heartbeat(ctx); err != nil {
					t.Fatalf("Heartbeat #%d: %v", i, err)
				}
				if err := run.Finish(ctx, nil); err != nil {
					t.Fatalf("Finish #%d: %v", i, err)
				}
			}
			if err := a.Do(ctx, "do", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
				t.Errorf("Do: %v", err)
			}
			if _, err := store.Prune(ctx, 0); err != nil {
				t.Errorf("Prune: %v", err)
			}
			if _, err := store.History(ctx, "s0", 5); err != nil {
				t.Errorf("History: %v", err)
			}
			other, err := runclaim.NewPostgresStore(pool, runclaim.WithTable("other", "runs"))
			if err != nil {
				t.Fatal(err)
			}
			if err := other.Migrate(ctx); err != nil {
				t.Errorf("Migrate under a 1ms idle_in_transaction_session_timeout: %v", err)
			}
			// A session the server terminated may linger in pg_stat_activity
			// for a moment while it exits.
			waitUntil(t, 5*time.Second, 5*time.Millisecond, "no session idle in a transaction", func() bool {
				var n int64
				err := check.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'").Scan(&n)
				return err == nil && n == 0
			})
		})
	}
}

// TestDBAReadOnly: with default_transaction_read_only on (as on a
// standby, or a database a DBA froze), every write fails with 25006
// read_only_sql_transaction, wrapped; every kind of claim (single or
// many, with keys or without) says so in the same words: Claim in both forms, Do (whose
// function is not called), Heartbeat, Finish, Release, Prune and Migrate.
// Nothing is written and no lock is held; the reads work.
// migrateOlder makes the table look like one of schema version 1, so that
// Migrate has a step to apply, and runs Migrate on store. (On a current
// schema Migrate only reads, and succeeds in a read-only session.)
func migrateOlder(t *testing.T, admin *pgxpool.Pool, store *runclaim.PostgresStore) error {
	t.Helper()
	if err := store.Migrate(t.Context()); err != nil {
		t.Errorf("Migrate on a current schema, read-only: %v", err)
	}
	if _, err := admin.Exec(t.Context(), "COMMENT ON TABLE "+store.Table()+" IS NULL"); err != nil {
		t.Fatal(err)
	}
	return store.Migrate(t.Context())
}

func TestDBAReadOnly(t *testing.T) {
	t.Parallel()
	for _, isolation := range []string{"read committed", "serializable"} {
		t.Run(isolation, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.New(t)
			check := checkPool(t, db)
			rw := migratedStore(t, check)
			held, err := newClaimer(t, rw, runclaim.WithLease(time.Minute)).Claim(ctx, "held")
			if err != nil {
				t.Fatal(err)
			}
			if err := held.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
			held, err = newClaimer(t, rw, runclaim.WithLease(time.Minute)).Claim(ctx, "held")
			if err != nil {
				t.Fatal(err)
			}
			before := readState(t, check, rw.Table())

			alterDatabase(t, db, "default_transaction_isolation", isolation)
			alterDatabase(t, db, "default_transaction_read_only", "on")
			ro, err := runclaim.NewPostgresStore(db.NewPool(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			c := newClaimer(t, ro)
			_, claimErr := c.Claim(ctx, "src")
			_, keyedErr := c.Claim(ctx, "src", runclaim.WithKeys("site"))
			_, manyErr := c.ClaimMany(ctx, []string{"m1", "m2"})
			_, manyKeysErr := c.ClaimMany(ctx, []string{"m1", "m2"}, runclaim.WithKeys("site"))
			// Every claim says why, in the same words.
			for what, err := range map[string]error{"Claim": claimErr, "Claim with keys": keyedErr, "ClaimMany": manyErr, "ClaimMany with keys": manyKeysErr} {
				if err == nil || !strings.Contains(err.Error(), "cannot claim on a server that cannot write") {
					t.Errorf("%s on a read-only database: %v; want the error that says the server cannot write", what, err)
				}
			}
			_, heartbeatErr := ro.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: held.ID, Source: held.Source, StartedAt: held.StartedAt, Lease: time.Minute})
			_, releaseErr := ro.Release(ctx, held.ID, "")
			_, pruneErr := ro.Prune(ctx, 0)
			for what, err := range map[string]error{
				"Claim":               claimErr,
				"Claim with keys":     keyedErr,
				"ClaimMany":           manyErr,
				"ClaimMany with keys": manyKeysErr,
				"Do":                  c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { t.Error("Do called its function"); return nil }),
				"Heartbeat":           heartbeatErr,
				"Finish":              ro.Finish(ctx, runclaim.FinishRequest{ID: held.ID, Source: held.Source, StartedAt: held.StartedAt, Status: runclaim.StatusSucceeded}),
				"Release":             releaseErr,
				"Prune":               pruneErr,
				"Migrate":             migrateOlder(t, check, ro),
			} {
				switch {
				case err == nil:
					t.Errorf("%s on a read-only database: no error", what)
				case errors.Is(err, runclaim.ErrNotClaimed) || errors.Is(err, runclaim.ErrLeaseLost):
					t.Errorf("%s on a read-only database: %v is reported as a skip or a lost lease", what, err)
				case pgCode(err) != "25006":
					t.Errorf("%s on a read-only database: %v, want SQLSTATE 25006", what, err)
				}
			}
			if _, err := ro.History(ctx, "held", 5); err != nil {
				t.Errorf("History on a read-only database: %v", err)
			}
			if _, _, err := ro.Running(ctx, ""); err != nil {
				t.Errorf("Running on a read-only database: %v", err)
			}
			if diff := cmp.Diff(before, readState(t, check, rw.Table())); diff != "" {
				t.Errorf("table changed (-before +after):\n%s", diff)
			}
			if n := advisoryLocks(t, check); n != 0 {
				t.Errorf("%d advisory locks held", n)
			}
		})
	}
}

package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// This file tests PostgresStore.Fence and what the other statements do
// while a fenced transaction is open: claims, heartbeats, finishes,
// releases and prunes.

// fenceLease is the lease of the runs these tests fence: long enough that
// no lease ends by itself before the test ends it (see endLease), however
// slow the machine.
const fenceLease = time.Minute

// shortLease is the lease of runs that a test lets end by the database
// clock before it calls Fence.
const shortLease = 20 * time.Millisecond

// begin starts a transaction on pool, rolled back when the test ends if it
// is still open.
func begin(t *testing.T, pool *pgxpool.Pool, opts pgx.TxOptions) pgx.Tx {
	t.Helper()
	tx, err := pool.BeginTx(t.Context(), opts)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// waitLeaseOver waits until the database clock is past run id's current
// lease_until.
func waitLeaseOver(t *testing.T, pool *pgxpool.Pool, table string, id int64) {
	t.Helper()
	waitUntil(t, 30*time.Second, 5*time.Millisecond, fmt.Sprintf("run %d's lease to end", id), func() bool {
		var over bool
		err := pool.QueryRow(t.Context(), `SELECT lease_until < pg_catalog.clock_timestamp() FROM `+table+` WHERE id = $1`, id).Scan(&over)
		if err != nil {
			t.Fatalf("read run %d's lease: %v", id, err)
		}
		return over
	})
}

// endLease ends run's lease now, by the database clock, as waiting for it
// would (the update is a heartbeat with a zero lease), without the wait.
func endLease(t *testing.T, pool *pgxpool.Pool, table string, run *runclaim.Run) {
	t.Helper()
	tag, err := pool.Exec(t.Context(), `UPDATE `+table+` SET lease_until = pg_catalog.clock_timestamp() WHERE id = $1`, run.ID)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("end run %d's lease: %v, %v", run.ID, tag, err)
	}
	waitLeaseOver(t, pool, table, run.ID)
}

// lockWaiters counts the sessions of pool's database that wait for a lock.
func lockWaiters(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_catalog.pg_stat_activity
WHERE datname = pg_catalog.current_database() AND wait_event_type = 'Lock'`).Scan(&n)
	if err != nil {
		t.Fatalf("count lock waiters: %v", err)
	}
	return n
}

// noWait runs f in a goroutine and fails the test if, before f returns, a
// session of pool's database is seen waiting for a lock.
func noWait(t *testing.T, pool *pgxpool.Pool, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	deadline := time.NewTimer(30 * time.Second) // a guard against a hang, not a measure
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-deadline.C:
			t.Fatalf("%s did not return within 30s", what)
		case <-tick.C:
			if lockWaiters(t, pool) > 0 {
				// It ends when the test's context does.
				t.Fatalf("%s waits for a lock", what)
			}
		}
	}
}

// waitsThen runs f in a goroutine, waits until a session of pool's database
// waits for a lock and f has not returned, then calls unblock and returns
// f's result.
func waitsThen(t *testing.T, pool *pgxpool.Pool, what string, f func() error, unblock func()) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	waitUntil(t, 30*time.Second, 2*time.Millisecond, what+" to wait for a lock", func() bool {
		select {
		case err := <-done:
			unblock()
			t.Fatalf("%s returned without waiting: %v", what, err)
		default:
		}
		return lockWaiters(t, pool) > 0
	})
	unblock()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return within 30s of being unblocked", what)
		return nil
	}
}

// notLocked reports whether run id's row can be locked FOR UPDATE at once.
func notLocked(t *testing.T, pool *pgxpool.Pool, table string, id int64) bool {
	t.Helper()
	tx := begin(t, pool, pgx.TxOptions{})
	defer tx.Rollback(context.Background())
	_, err := tx.Exec(t.Context(), `SELECT FROM `+table+` WHERE id = $1 FOR UPDATE NOWAIT`, id)
	if err != nil && pgCode(err) != "55P03" {
		t.Fatalf("lock run %d: %v", id, err)
	}
	return err == nil
}

// fenceEnv is a database with a runs table, a table the fenced
// transactions write to, a holder and a rival.
type fenceEnv struct {
	db     *pgtest.DB
	store  *runclaim.PostgresStore
	table  string
	holder *runclaim.Claimer // lease fenceLease
	short  *runclaim.Claimer // lease shortLease
	rival  *runclaim.Claimer
}

func newFenceEnv(t *testing.T, opts ...runclaim.Option) *fenceEnv {
	t.Helper()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	if _, err := db.Pool.Exec(t.Context(), `CREATE TABLE results (run_id bigint NOT NULL, written_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	with := func(owner string, lease time.Duration) []runclaim.Option {
		return append([]runclaim.Option{runclaim.WithLease(lease), runclaim.WithOwner(owner)}, opts...)
	}
	return &fenceEnv{
		db: db, store: store, table: store.Table(),
		holder: newClaimer(t, store, with("holder", fenceLease)...),
		short:  newClaimer(t, store, with("short", shortLease)...),
		rival:  newClaimer(t, store, with("rival", fenceLease)...),
	}
}

func (e *fenceEnv) claim(t *testing.T, source string) *runclaim.Run {
	t.Helper()
	run, err := e.holder.Claim(t.Context(), source)
	if err != nil {
		t.Fatalf("Claim %q: %v", source, err)
	}
	return run
}

// write inserts a result of run in tx.
func write(t *testing.T, tx pgx.Tx, run *runclaim.Run) {
	t.Helper()
	if _, err := tx.Exec(t.Context(), `INSERT INTO results (run_id) VALUES ($1)`, run.ID); err != nil {
		t.Fatalf("write a result of run %d: %v", run.ID, err)
	}
}

// wantSkipped checks that the rival's claim of source is skipped because
// run holds it.
func (e *fenceEnv) wantSkipped(t *testing.T, source string, run *runclaim.Run, when string) {
	t.Helper()
	_, err := e.rival.Claim(t.Context(), source)
	var nc *runclaim.NotClaimedError
	if !errors.As(err, &nc) || !errors.Is(err, runclaim.ErrAlreadyRunning) || nc.Holder == nil || nc.Holder.ID != run.ID {
		t.Fatalf("rival's claim %s: %v; want ErrAlreadyRunning held by run %d", when, err, run.ID)
	}
}

// TestFenceOutlivesLease: a fenced transaction keeps the source past the
// end of its run's lease, through heartbeats (one after the lease ended
// too), until it commits; every
// claim meanwhile is skipped as already running. After the commit the
// rival takes over, and the fenced write is dated before the rival's run
// started.
func TestFenceOutlivesLease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newFenceEnv(t)
	run := e.claim(t, "src")
	tx := begin(t, e.db.Pool, pgx.TxOptions{})
	if err := e.store.Fence(ctx, tx, run); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	write(t, tx, run)
	if err := run.Heartbeat(ctx); err != nil { // carries the fence's lock over to the new row version
		t.Fatalf("Heartbeat while fenced: %v", err)
	}
	endLease(t, e.db.Pool, e.table, run)
	// A heartbeat after the lease ended may renew it or report it lost
	// (G2); either way it must not free the source under the fence.
	switch err := run.Heartbeat(ctx); {
	case err == nil:
		endLease(t, e.db.Pool, e.table, run)
	case !errors.Is(err, runclaim.ErrLeaseLost):
		t.Fatalf("Heartbeat after the lease ended: %v", err)
	}
	for i := range 3 {
		e.wantSkipped(t, "src", run, fmt.Sprintf("#%d after the lease ended, while the fenced transaction is open", i+1))
	}
	if got := loadRun(t, e.db.Pool, e.table, run.ID).Status; got != "running" {
		t.Fatalf("the fenced run is %s, want still running", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit the fenced transaction: %v", err)
	}
	next, err := e.rival.Claim(ctx, "src")
	if err != nil {
		t.Fatalf("rival's claim after the commit: %v", err)
	}
	if got := loadRun(t, e.db.Pool, e.table, run.ID).Status; got != "expired" {
		t.Errorf("the fenced run is %s after the takeover, want expired", got)
	}
	var late int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM results WHERE run_id = $1 AND written_at >= $2`, run.ID, next.StartedAt).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if late != 0 {
		t.Errorf("%d fenced writes are dated after the next run started", late)
	}
}

// TestFenceLeaseLost: Fence returns ErrLeaseLost, locks nothing, and
// reports the lost lease once through the LeaseLost hook, when the run was
// taken over, when its lease ended by the database clock and nobody took
// it over (G2), when an operator released it, when it was finished (by
// this Run, or in the store behind its back), and when it was pruned.
func TestFenceLeaseLost(t *testing.T) {
	t.Parallel()
	var lost atomic.Int64
	e := newFenceEnv(t, runclaim.WithHooks(runclaim.Hooks{LeaseLost: func(runclaim.Event) { lost.Add(1) }}))
	for _, tc := range []struct {
		name  string
		short bool // claim with shortLease, and let it end
		lose  func(t *testing.T, run *runclaim.Run)
		want  string // in the error
	}{
		{"taken_over", true, func(t *testing.T, run *runclaim.Run) {
			waitLeaseOver(t, e.db.Pool, e.table, run.ID)
			if _, err := e.rival.Claim(t.Context(), run.Source); err != nil {
				t.Fatalf("takeover: %v", err)
			}
		}, "the run is expired"},
		{"lease_ended_no_takeover", true, func(t *testing.T, run *runclaim.Run) {
			waitLeaseOver(t, e.db.Pool, e.table, run.ID)
		}, "its lease ended"},
		{"released", false, func(t *testing.T, run *runclaim.Run) {
			if _, err := e.store.Release(t.Context(), run.ID, ""); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}, "the run is released"},
		{"finished_by_run", false, func(t *testing.T, run *runclaim.Run) {
			if err := run.Finish(t.Context(), nil); err != nil {
				t.Fatalf("Finish: %v", err)
			}
		}, "already finished as succeeded"},
		{"finished_in_store", false, func(t *testing.T, run *runclaim.Run) {
			if err := e.store.Finish(t.Context(), runclaim.FinishRequest{ID: run.ID, Source: run.Source, StartedAt: run.StartedAt, Status: runclaim.StatusFailed, Error: "x"}); err != nil {
				t.Fatalf("store.Finish: %v", err)
			}
		}, "the run is failed"},
		{"pruned", false, func(t *testing.T, run *runclaim.Run) {
			if err := e.store.Finish(t.Context(), runclaim.FinishRequest{ID: run.ID, Source: run.Source, StartedAt: run.StartedAt, Status: runclaim.StatusSucceeded}); err != nil {
				t.Fatalf("store.Finish: %v", err)
			}
			next, err := e.rival.Claim(t.Context(), run.Source)
			if err != nil {
				t.Fatalf("next claim: %v", err)
			}
			if err := next.Finish(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Prune(t.Context(), 0); err != nil {
				t.Fatalf("Prune: %v", err)
			}
			var left int
			if err := e.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM `+e.table+` WHERE id = $1`, run.ID).Scan(&left); err != nil || left != 0 {
				t.Fatalf("run %d not pruned: %d rows, %v", run.ID, left, err)
			}
		}, "pruned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			c := e.holder
			if tc.short {
				c = e.short
			}
			run, err := c.Claim(ctx, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			tc.lose(t, run)
			before := lost.Load()
			tx := begin(t, e.db.Pool, pgx.TxOptions{})
			err = e.store.Fence(ctx, tx, run)
			if !errors.Is(err, runclaim.ErrLeaseLost) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Fence: %v; want ErrLeaseLost saying %q", err, tc.want)
			}
			want := int64(1)
			if tc.name == "finished_by_run" { // finished by its holder, not lost
				want = 0
			}
			if got := lost.Load() - before; got != want {
				t.Errorf("LeaseLost hook called %d times, want %d", got, want)
			}
			if tc.name != "pruned" && !notLocked(t, e.db.Pool, e.table, run.ID) {
				t.Errorf("Fence left run %d's row locked", run.ID)
			}
			if tc.name == "lease_ended_no_takeover" {
				if got := loadRun(t, e.db.Pool, e.table, run.ID).Status; got != "running" {
					t.Errorf("run is %s; want it still running: Fence must not depend on a takeover", got)
				}
			}
		})
	}
}

// TestFenceLetsHeartbeatAndFinishThrough: while a fenced transaction is
// open, the run's Heartbeat and Finish go through without waiting (no
// session is ever seen waiting for a lock), whichever pgx query mode the
// fenced transaction uses.
func TestFenceLetsHeartbeatAndFinishThrough(t *testing.T) {
	t.Parallel()
	e := newFenceEnv(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(strings.ReplaceAll(mode.String(), " ", "_"), func(t *testing.T) {
			ctx := t.Context()
			pool := e.db.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			run := e.claim(t, "hb-"+mode.String())
			tx := begin(t, pool, pgx.TxOptions{})
			if err := e.store.Fence(ctx, tx, run); err != nil {
				t.Fatalf("Fence: %v", err)
			}
			write(t, tx, run)
			for i := range 3 {
				if err := noWait(t, e.db.Pool, "Heartbeat", func() error { return run.Heartbeat(ctx) }); err != nil {
					t.Fatalf("Heartbeat #%d while fenced: %v", i+1, err)
				}
			}
			if err := e.store.Fence(ctx, tx, run); err != nil {
				t.Fatalf("a second Fence in the same transaction: %v", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit: %v", err)
			}
			// Finish while another fenced transaction is open.
			tx = begin(t, pool, pgx.TxOptions{})
			if err := e.store.Fence(ctx, tx, run); err != nil {
				t.Fatalf("Fence: %v", err)
			}
			if err := noWait(t, e.db.Pool, "Finish", func() error { return run.Finish(ctx, nil) }); err != nil {
				t.Fatalf("Finish while fenced: %v", err)
			}
		})
	}
}

// TestFenceFinishBeforeCommit pins the order Fence documents: commit,
// then Finish. A Finish while the fenced transaction is still open ends
// the fence: the source is free and a rival's run starts before the
// transaction commits. Under Do, committing inside the function keeps the
// order, and the fenced write is dated before the next run.
func TestFenceFinishBeforeCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newFenceEnv(t)

	run := e.claim(t, "wrong-order")
	tx := begin(t, e.db.Pool, pgx.TxOptions{})
	if err := e.store.Fence(ctx, tx, run); err != nil {
		t.Fatal(err)
	}
	write(t, tx, run)
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	next, err := e.rival.Claim(ctx, "wrong-order")
	if err != nil {
		t.Fatalf("a Finish before the commit should free the source (the documented hazard); rival's claim: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var late int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM results WHERE run_id = $1`, run.ID).Scan(&late); err != nil || late != 1 {
		t.Fatalf("count the write: %d, %v", late, err)
	}
	if err := next.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}

	// The right order, under Do.
	var id int64
	err = e.holder.Do(ctx, "right-order", func(ctx context.Context, run *runclaim.Run) error {
		id = run.ID
		tx, err := e.db.Pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		if err := e.store.Fence(ctx, tx, run); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO results (run_id) VALUES ($1)`, run.ID); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	after, err := e.rival.Claim(ctx, "right-order")
	if err != nil {
		t.Fatalf("rival's claim after Do: %v", err)
	}
	var bad int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM results WHERE run_id = $1 AND written_at >= $2`, id, after.StartedAt).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d writes of run %d dated after the next run started (%v)", bad, id, err)
	}
}

// TestFenceMeetsUpdateInFlight: a Fence that meets an update of the run's
// row in flight waits for it and sees its outcome: after a finish or a
// release it returns ErrLeaseLost (and a claim then takes the source over,
// rightly); after a heartbeat it succeeds. The updates are the store's own
// statements' shapes, held open in a transaction of the test's.
func TestFenceMeetsUpdateInFlight(t *testing.T) {
	t.Parallel()
	e := newFenceEnv(t)
	for _, tc := range []struct {
		name, sql string
		lost      bool
	}{
		{"finish", `UPDATE %s SET status = 'succeeded', finished_at = pg_catalog.clock_timestamp() WHERE id = $1 AND status = 'running'`, true},
		{"release", `UPDATE %[1]s SET status = 'released', finished_at = pg_catalog.clock_timestamp()
WHERE id IN (SELECT id FROM %[1]s WHERE status = 'running' AND id = $1 FOR UPDATE)`, true},
		{"heartbeat", `UPDATE %s SET lease_until = pg_catalog.clock_timestamp() + interval '1 minute', heartbeat_at = pg_catalog.clock_timestamp()
WHERE id = $1 AND status = 'running'`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			run := e.claim(t, "inflight-"+tc.name)
			upd := begin(t, e.db.Pool, pgx.TxOptions{})
			if tag, err := upd.Exec(ctx, fmt.Sprintf(tc.sql, e.table), run.ID); err != nil || tag.RowsAffected() != 1 {
				t.Fatalf("the %s: %v, %v", tc.name, tag, err)
			}
			tx := begin(t, e.db.Pool, pgx.TxOptions{})
			err := waitsThen(t, e.db.Pool, "Fence", func() error { return e.store.Fence(ctx, tx, run) }, func() {
				if err := upd.Commit(ctx); err != nil {
					t.Errorf("commit the %s: %v", tc.name, err)
				}
			})
			if tc.lost != errors.Is(err, runclaim.ErrLeaseLost) || !tc.lost && err != nil {
				t.Fatalf("Fence after a %s in flight: %v; want lost %v", tc.name, err, tc.lost)
			}
		})
	}
}

// TestFenceSnapshot: under REPEATABLE READ and SERIALIZABLE, a Fence whose
// transaction's snapshot predates a change of the run's row (a finish, a
// release, a takeover, or even a heartbeat) fails with a serialization
// error (40001), which is not ErrLeaseLost; a snapshot that predates the
// claim finds no run; and a Fence called first in the transaction holds
// the source past the lease, lets heartbeats through, and commits.
func TestFenceSnapshot(t *testing.T) {
	t.Parallel()
	e := newFenceEnv(t)
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(strings.ReplaceAll(string(iso), " ", "_"), func(t *testing.T) {
			opts := pgx.TxOptions{IsoLevel: iso}
			for _, tc := range []struct {
				name   string
				short  bool // claim with shortLease, and let it end before the snapshot
				change func(t *testing.T, run *runclaim.Run)
			}{
				{"finish", false, func(t *testing.T, run *runclaim.Run) {
					// Through the store, so that Fence cannot know it from the Run.
					if err := e.store.Finish(t.Context(), runclaim.FinishRequest{ID: run.ID, Source: run.Source, StartedAt: run.StartedAt, Status: runclaim.StatusSucceeded}); err != nil {
						t.Fatal(err)
					}
				}},
				{"release", false, func(t *testing.T, run *runclaim.Run) {
					if _, err := e.store.Release(t.Context(), run.ID, ""); err != nil {
						t.Fatal(err)
					}
				}},
				{"takeover", true, func(t *testing.T, run *runclaim.Run) {
					if _, err := e.rival.Claim(t.Context(), run.Source); err != nil {
						t.Fatal(err)
					}
				}},
				{"heartbeat", false, func(t *testing.T, run *runclaim.Run) {
					if err := run.Heartbeat(t.Context()); err != nil {
						t.Fatal(err)
					}
				}},
			} {
				t.Run("after_"+tc.name, func(t *testing.T) {
					ctx := t.Context()
					c := e.holder
					if tc.short {
						c = e.short
					}
					run, err := c.Claim(ctx, fmt.Sprintf("%s-%s", iso, tc.name))
					if err != nil {
						t.Fatal(err)
					}
					if tc.short {
						waitLeaseOver(t, e.db.Pool, e.table, run.ID)
					}
					tx := begin(t, e.db.Pool, opts)
					if _, err := tx.Exec(ctx, `SELECT count(*) FROM results`); err != nil { // takes the snapshot
						t.Fatal(err)
					}
					tc.change(t, run)
					err = e.store.Fence(ctx, tx, run)
					if pgCode(err) != "40001" || errors.Is(err, runclaim.ErrLeaseLost) {
						t.Fatalf("Fence with a snapshot older than the %s: %v; want a 40001 serialization failure, not ErrLeaseLost", tc.name, err)
					}
				})
			}

			t.Run("before_claim", func(t *testing.T) {
				ctx := t.Context()
				tx := begin(t, e.db.Pool, opts)
				if _, err := tx.Exec(ctx, `SELECT count(*) FROM results`); err != nil {
					t.Fatal(err)
				}
				run := e.claim(t, fmt.Sprintf("%s-late", iso))
				err := e.store.Fence(ctx, tx, run)
				if err == nil || errors.Is(err, runclaim.ErrLeaseLost) || !strings.Contains(err.Error(), "predates the claim") {
					t.Fatalf("Fence with a snapshot older than the claim: %v; want an error saying so, not ErrLeaseLost", err)
				}
			})

			t.Run("fence_first", func(t *testing.T) {
				ctx := t.Context()
				run := e.claim(t, fmt.Sprintf("%s-first", iso))
				tx := begin(t, e.db.Pool, opts)
				if err := e.store.Fence(ctx, tx, run); err != nil {
					t.Fatalf("Fence first in the transaction: %v", err)
				}
				write(t, tx, run)
				if err := noWait(t, e.db.Pool, "Heartbeat", func() error { return run.Heartbeat(ctx) }); err != nil {
					t.Fatal(err)
				}
				endLease(t, e.db.Pool, e.table, run)
				e.wantSkipped(t, run.Source, run, "after the lease ended, while fenced")
				if err := tx.Commit(ctx); err != nil {
					t.Fatalf("commit: %v", err)
				}
				if _, err := e.rival.Claim(ctx, run.Source); err != nil {
					t.Fatalf("rival's claim after the commit: %v", err)
				}
			})
		})
	}
}

// TestReleaseRespectsFence: Release of a fenced run waits for the row
// (a second), then refuses with ErrFenced and changes nothing, by ID and
// by source; once the fenced transaction ends, Release goes through.
func TestReleaseRespectsFence(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newFenceEnv(t)
	run := e.claim(t, "src")
	tx := begin(t, e.db.Pool, pgx.TxOptions{})
	if err := e.store.Fence(ctx, tx, run); err != nil {
		t.Fatal(err)
	}
	before := loadRun(t, e.db.Pool, e.table, run.ID)
	for _, by := range []struct {
		id     int64
		source string
	}{{run.ID, ""}, {0, "src"}} {
		_, err := e.store.Release(ctx, by.id, by.source)
		if !errors.Is(err, runclaim.ErrFenced) || pgCode(err) != "55P03" {
			t.Errorf("Release(%d, %q) of a fenced run: %v; want ErrFenced, wrapping the lock timeout", by.id, by.source, err)
		}
	}
	if after := loadRun(t, e.db.Pool, e.table, run.ID); after.Status != before.Status || after.FinishedAt != nil {
		t.Errorf("a refused Release changed the run: %+v", after)
	}
	if err := run.Heartbeat(ctx); err != nil {
		t.Errorf("Heartbeat after a refused Release: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := e.store.Release(ctx, 0, "src")
	if err != nil || rec.ID != run.ID || rec.Status != runclaim.StatusReleased {
		t.Fatalf("Release after the fenced transaction ended: %+v, %v", rec, err)
	}
}

// TestPruneSkipsFencedRow: a run finished while a fenced transaction was
// still open keeps the fence's lock on its row until that transaction
// ends. Prune skips that row without waiting, deletes the rest, and
// deletes it too once the transaction has ended.
func TestPruneSkipsFencedRow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newFenceEnv(t)
	var old []int64
	for range 3 {
		run := e.claim(t, "src")
		if err := run.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		old = append(old, run.ID)
	}
	fenced := e.claim(t, "src")
	tx := begin(t, e.db.Pool, pgx.TxOptions{})
	if err := e.store.Fence(ctx, tx, fenced); err != nil {
		t.Fatal(err)
	}
	if err := fenced.Finish(ctx, nil); err != nil { // the wrong order, on purpose
		t.Fatal(err)
	}
	newest := e.claim(t, "src")
	if err := newest.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var n int64
	err := noWait(t, e.db.Pool, "Prune", func() error {
		var err error
		n, err = e.store.Prune(ctx, 0)
		return err
	})
	if err != nil || n != int64(len(old)) {
		t.Fatalf("Prune with a fenced row = %d, %v; want %d", n, err, len(old))
	}
	if got := loadRun(t, e.db.Pool, e.table, fenced.ID).Status; got != "succeeded" {
		t.Fatalf("fenced run is %s", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := e.store.Prune(ctx, 0); err != nil || n != 1 {
		t.Fatalf("Prune after the fenced transaction ended = %d, %v; want 1", n, err)
	}
}

// TestFenceIdleInTransactionTimeout: a fenced transaction left idle (its
// holder paused or gone) holds the source only until the server ends the
// session: with idle_in_transaction_session_timeout set, the rival takes
// the source over once the lease has ended and the session is gone, and
// the fenced transaction can no longer commit.
func TestFenceIdleInTransactionTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newFenceEnv(t)
	pool := e.db.NewPool(t, func(c *pgxpool.Config) {
		// Long enough for the checks below while the session is idle.
		c.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "2000"
	})
	run := e.claim(t, "src")
	tx := begin(t, pool, pgx.TxOptions{})
	if err := e.store.Fence(ctx, tx, run); err != nil {
		t.Fatal(err)
	}
	write(t, tx, run)
	endLease(t, e.db.Pool, e.table, run)
	e.wantSkipped(t, "src", run, "while fenced, after the lease ended")
	// The holder pauses: the session sits idle in its transaction.
	waitUntil(t, 30*time.Second, 10*time.Millisecond, "the rival to take the source over", func() bool {
		_, err := e.rival.Claim(ctx, "src")
		if err != nil && !errors.Is(err, runclaim.ErrAlreadyRunning) {
			t.Fatalf("rival's claim: %v", err)
		}
		return err == nil
	})
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the fenced transaction committed after the server ended its session")
	}
	var n int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM results`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d results written (%v), want none", n, err)
	}
}

// TestFenceBadInput: a nil context, transaction or run, a run not from
// Claim, a run of a MemoryStore or of another table, a closed transaction,
// an ended context, and a transaction on another database each get a clear
// error that is not ErrLeaseLost, and lock nothing.
func TestFenceBadInput(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newFenceEnv(t)
	run := e.claim(t, "src")
	tx := begin(t, e.db.Pool, pgx.TxOptions{})

	memRun, err := newClaimer(t, runclaim.NewMemoryStore()).Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	otherStore := migratedStore(t, e.db.Pool, runclaim.WithTable("public", "other_runs"))
	otherRun, err := newClaimer(t, otherStore).Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	closed := begin(t, e.db.Pool, pgx.TxOptions{})
	if err := closed.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	var nilTx *pgxpool.Tx

	// Another database without a runs table, and one whose runs table holds
	// another run with the same ID.
	bare := pgtest.New(t)
	twin := pgtest.New(t)
	twinRun, err := newClaimer(t, migratedStore(t, twin.Pool), runclaim.WithOwner("twin")).Claim(ctx, "src")
	if err != nil || twinRun.ID != run.ID {
		t.Fatalf("twin's run: %+v, %v; want ID %d", twinRun, err, run.ID)
	}
	empty := pgtest.New(t)
	migratedStore(t, empty.Pool)

	for _, tc := range []struct {
		name string
		ctx  context.Context
		tx   pgx.Tx
		run  *runclaim.Run
		want string
	}{
		{"nil context", nil, tx, run, "nil context"},
		{"nil transaction", ctx, nil, run, "nil transaction"},
		{"typed nil transaction", ctx, nilTx, run, "nil transaction"},
		{"nil run", ctx, tx, nil, "nil run"},
		{"run not from Claim", ctx, tx, &runclaim.Run{ID: run.ID, Source: run.Source}, "not returned by Claim"},
		{"memory store run", ctx, tx, memRun, "not a PostgresStore"},
		{"other table's run", ctx, tx, otherRun, `"public"."other_runs"`},
		{"closed transaction", ctx, closed, run, "tx is closed"},
		{"ended context", ended, tx, run, "context canceled"},
		{"database without the table", ctx, begin(t, bare.Pool, pgx.TxOptions{}), run, "is it on the store's database"},
		{"database with another run of that ID", ctx, begin(t, twin.Pool, pgx.TxOptions{}), run, "another database"},
		{"database without that run", ctx, begin(t, empty.Pool, pgx.TxOptions{}), run, "another database"},
	} {
		err := e.store.Fence(tc.ctx, tc.tx, tc.run)
		if err == nil || errors.Is(err, runclaim.ErrLeaseLost) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "runclaim: ") {
			t.Errorf("%s: Fence: %v; want a runclaim error saying %q, not ErrLeaseLost", tc.name, err, tc.want)
		}
	}
	if !notLocked(t, e.db.Pool, e.table, run.ID) {
		t.Error("a refused Fence locked the run's row")
	}
	if !notLocked(t, twin.Pool, e.table, twinRun.ID) {
		t.Error("a Fence on the twin database locked its run's row")
	}
	if err := e.store.Fence(ctx, tx, run); err != nil {
		t.Errorf("Fence with good input after the bad: %v", err)
	}
}

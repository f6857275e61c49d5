package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// holdKey is the advisory lock key on which a gate makes statements wait.
const holdKey = 7_000_000_001

// gate makes the statements of every session but the test's own wait,
// inside their transaction, right after they change the runs table, until
// the test opens it: a statement trigger (AFTER event, FOR EACH
// STATEMENT, so it fires even for a statement that changed no row) that
// takes a shared advisory lock the test holds. Sessions that set
// runclaim_test.pass pass. It forces one interleaving of two
// transactions, where timing would give it once in many thousand runs.
type gate struct {
	t     *testing.T
	pool  *pgxpool.Pool
	hold  *pgxpool.Conn
	table string
}

// newGate creates the trigger for event ("UPDATE", "INSERT") on store's
// table and closes the gate.
func newGate(t *testing.T, pool *pgxpool.Pool, store *runclaim.PostgresStore, event string) *gate {
	t.Helper()
	ctx := t.Context()
	fn := fmt.Sprintf("gate_%s", event)
	for _, q := range []string{
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF pg_catalog.current_setting('runclaim_test.pass', true) IS DISTINCT FROM 'on' THEN
		PERFORM pg_catalog.pg_advisory_xact_lock_shared(%d);
	END IF;
	RETURN NULL;
END $$`, fn, int64(holdKey)),
		fmt.Sprintf(`CREATE TRIGGER %s AFTER %s ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s()`, fn, event, store.Table(), fn),
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	hold, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{t: t, pool: pool, hold: hold, table: store.Table()}
	if _, err := hold.Exec(ctx, `SELECT pg_catalog.pg_advisory_lock($1)`, int64(holdKey)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.open(); hold.Release() })
	return g
}

// waiting waits until n sessions wait at the gate.
func (g *gate) waiting(n int) {
	g.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiters int
		err := g.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_catalog.pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND objid = $1::bigint & 4294967295 AND classid = $1::bigint >> 32`, int64(holdKey)).Scan(&waiters)
		if err != nil {
			g.t.Fatal(err)
		}
		if waiters >= n {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%d sessions wait at the gate after 30 s, want %d", waiters, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// open lets the waiting statements go on.
func (g *gate) open() {
	_, _ = g.hold.Exec(context.Background(), `SELECT pg_catalog.pg_advisory_unlock_all()`)
}

// lapse ends run's lease now, by the database clock, as if it had run out.
func lapse(t *testing.T, pool *pgxpool.Pool, store *runclaim.PostgresStore, id int64) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `BEGIN; SET LOCAL runclaim_test.pass = 'on';
		UPDATE `+store.Table()+` SET lease_until = pg_catalog.clock_timestamp() - interval '1 millisecond' WHERE id = `+fmt.Sprint(id)+`; COMMIT`)
	if err != nil {
		t.Fatal(err)
	}
}

// Issue: a tick claim that races the Finish of a lapsed run that serves
// the same tick, or a later one, must answer ErrTickDone: never a unique
// violation (23505), and never a win for an older tick than one served.
// The interleaving: the run's lease has ended; its holder's Finish read
// the clock before that and records it succeeded, holding the row; the
// claim, past its checks of the tick (which leave out the lapsed run),
// tries to expire the run, skips its locked row, and the Finish commits
// before the claim reads the source again.
func TestTickClaimRacesFinish(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name              string
		served, requested time.Time
		many              bool
	}{
		{"same tick", t0, t0, false},
		{"older tick", t0.Add(time.Minute), t0, false},
		{"same tick, ClaimMany", t0, t0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := migratedDB(t)
			store := storeOn(t, db.Pool)
			ctx := t.Context()
			holder := newClaimer(t, store, runclaim.WithOwner("holder"), runclaim.WithLease(time.Minute))
			run, err := holder.Claim(ctx, "src", runclaim.ForTick(tc.served))
			if err != nil {
				t.Fatal(err)
			}
			g := newGate(t, db.Pool, store, "UPDATE")
			lapse(t, db.Pool, store, run.ID)
			// The holder's Finish, as it was recorded: succeeded, holding
			// the row until the test commits it.
			finish, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = finish.Rollback(ctx) }()
			if _, err := finish.Exec(ctx, `SET LOCAL runclaim_test.pass = 'on'`); err != nil {
				t.Fatal(err)
			}
			if _, err := finish.Exec(ctx, `UPDATE `+store.Table()+` SET status = 'succeeded', finished_at = pg_catalog.clock_timestamp() WHERE id = $1`, run.ID); err != nil {
				t.Fatal(err)
			}
			rival := newClaimer(t, store, runclaim.WithOwner("rival"))
			type answer struct {
				runs []*runclaim.Run
				err  error
			}
			done := make(chan answer, 1)
			go func() {
				if tc.many {
					runs, err := rival.ClaimMany(ctx, []string{"src", "other"}, runclaim.ForTick(tc.requested))
					done <- answer{runs, err}
					return
				}
				r, err := rival.Claim(ctx, "src", runclaim.ForTick(tc.requested))
				done <- answer{[]*runclaim.Run{r}, err}
			}()
			g.waiting(1) // the claim's expiry skipped the locked row
			if err := finish.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			g.open()
			a := <-done
			if tc.many {
				if a.err != nil {
					t.Fatalf("ClaimMany with ForTick of src and other: %v; want other won and src skipped with ErrTickDone", a.err)
				}
				if len(a.runs) != 1 || a.runs[0].Source != "other" {
					t.Errorf("ClaimMany with ForTick won %v; want other only", a.runs)
				}
				return
			}
			if !errors.Is(a.err, runclaim.ErrTickDone) {
				t.Errorf("ForTick %s after tick %s was served: run %v, %v; want ErrTickDone", tc.requested.Format(time.TimeOnly), tc.served.Format(time.TimeOnly), a.runs[0], a.err)
			}
			if n := runningRuns(t, db.Pool, store, "src"); n != 0 {
				t.Errorf("%d running runs of src; want none", n)
			}
		})
	}
}

// runningRuns counts source's running runs.
func runningRuns(t *testing.T, pool *pgxpool.Pool, store *runclaim.PostgresStore, source string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+store.Table()+` WHERE source = $1 AND status = 'running'`, source).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Issue: a claim that won, but whose caller gave up before the answer
// came, is deleted again (G8), and so must give back the trigger it used:
// the next claim still finds it, in Claim and ClaimMany alike.
func TestGivenUpClaimKeepsTrigger(t *testing.T) {
	t.Parallel()
	for _, many := range []bool{false, true} {
		t.Run(fmt.Sprintf("many=%v", many), func(t *testing.T) {
			t.Parallel()
			db := migratedDB(t)
			store := storeOn(t, db.Pool)
			ctx := t.Context()
			c := newClaimer(t, store, runclaim.WithMinInterval(time.Hour))
			first, err := c.Claim(ctx, "src")
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if err := store.Trigger(ctx, "src"); err != nil {
				t.Fatal(err)
			}
			g := newGate(t, db.Pool, store, "INSERT")
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				var err error
				if many {
					_, err = c.ClaimMany(cctx, []string{"src"})
				} else {
					_, err = c.Claim(cctx, "src")
				}
				done <- err
			}()
			g.waiting(1) // the claim used the trigger and inserted its run
			cancel()
			g.open()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the claim given up: %v; want context.Canceled", err)
			}
			if n := runningRuns(t, db.Pool, store, "src"); n != 0 {
				t.Fatalf("%d running runs after the claim was given up; want none", n)
			}
			ctrl, _, err := store.Controls(ctx, "src")
			if err != nil {
				t.Fatal(err)
			}
			if len(ctrl) != 1 || ctrl[0].TriggeredAt.IsZero() {
				t.Errorf("controls of src after the claim given up: %+v; want its trigger pending", ctrl)
			}
			run, err := c.Claim(ctx, "src")
			if err != nil {
				t.Fatalf("the next claim, within the interval: %v; want a win by the trigger", err)
			}
			_ = run.Finish(ctx, nil)
		})
	}
}

// Issue: once Pause has returned, no claim may start a run of the source,
// a claim in flight when Pause was called included: Pause waits for it.
func TestPauseWaitsForClaimInFlight(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()
	c := newClaimer(t, store)
	g := newGate(t, db.Pool, store, "INSERT")
	claimed := make(chan error, 1)
	go func() {
		run, err := c.Claim(ctx, "src")
		if err == nil {
			defer func() { _ = run.Finish(ctx, nil) }()
		}
		claimed <- err
	}()
	g.waiting(1) // the claim read no pause, and inserted its run
	paused := make(chan error, 1)
	go func() { paused <- store.Pause(ctx, "src", time.Time{}, "stop") }()
	// Either Pause waits for the claim (the rule), or it returns first.
	var returnedFirst bool
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-paused:
			if err != nil {
				t.Fatal(err)
			}
			returnedFirst = true
		default:
		}
		if returnedFirst || advisoryWaiters(t, db.Pool) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Pause neither returned nor waited for a lock within 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.open()
	err := <-claimed
	if returnedFirst && err == nil {
		t.Fatal("a claim in flight won after Pause had returned")
	}
	if !returnedFirst {
		if err := <-paused; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Claim(ctx, "src"); !errors.Is(err, runclaim.ErrPaused) {
		t.Errorf("a claim after Pause returned: %v; want ErrPaused", err)
	}
}

// advisoryWaiters counts the sessions that wait for an advisory lock other
// than the gate's.
func advisoryWaiters(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_catalog.pg_locks
		WHERE locktype = 'advisory' AND NOT granted AND NOT (objid = $1::bigint & 4294967295 AND classid = $1::bigint >> 32)`, int64(holdKey)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Issue: a claim on a server that cannot write (a standby, a database set
// read-only) is an error, never a skip from what it read: here a source
// that is held, whose claim would otherwise answer from the running run
// it reads before anything is written.
func TestReadOnlyClaimOfHeldSource(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	rw := storeOn(t, db.Pool)
	ctx := t.Context()
	if _, err := newClaimer(t, rw).Claim(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	alterDatabase(t, db, "default_transaction_read_only", "on")
	ro, err := runclaim.NewPostgresStore(db.NewPool(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, ro)
	_, err = c.Claim(ctx, "held")
	if errors.Is(err, runclaim.ErrNotClaimed) || pgCode(err) != "25006" {
		t.Errorf("Claim of a held source on a read-only server: %v; want an error with SQLSTATE 25006, not a skip", err)
	}
	_, err = c.ClaimMany(ctx, []string{"held"})
	if errors.Is(err, runclaim.ErrNotClaimed) || pgCode(err) != "25006" {
		t.Errorf("ClaimMany of a held source on a read-only server: %v; want an error with SQLSTATE 25006", err)
	}
}

// Rule (schema version 7): an older body of the claim function with a
// tick put back (step 6's Up applied again, as a migration tool might)
// leaves the table at version 6, and Migrate repairs it.
func TestMigrateRepairsClaimRaces(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	fresh := repairDamaged(t, db, "step 6 applied again", func(s *runclaim.PostgresStore) string {
		return strings.ReplaceAll(s.Migrations()[5].Up, "COMMENT ON TABLE "+s.Table()+" IS 'runclaim schema version 6';\n", "")
	}, 6)
	checkMigrateTakesNoLock(t, db.Pool, fresh)
}

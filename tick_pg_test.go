package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// rowVersions returns the version of every row of the test database's
// runclaim tables: each table's name and each row's ctid, xmin and xmax.
// A statement that inserts, updates, deletes or locks a row (FOR UPDATE,
// FOR SHARE) changes it, and needs a transaction ID to do so; nothing
// another test does on a shared server does. (The server's next
// transaction ID is the whole server's: other packages' tests move it.)
func rowVersions(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := t.Context()
	rows, err := pool.Query(ctx, `SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname)
FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND c.relname LIKE 'runclaim\_runs%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		t.Fatalf("list the runclaim tables: %v, %v", tables, err)
	}
	var b strings.Builder
	for _, table := range tables {
		var v string
		if err := pool.QueryRow(ctx, `SELECT coalesce(pg_catalog.string_agg(ctid::text || ':' || xmin::text || ':' || xmax::text, ' ' ORDER BY ctid), '') FROM `+table).Scan(&v); err != nil {
			t.Fatalf("read the row versions of %s: %v", table, err)
		}
		fmt.Fprintf(&b, "%s [%s]\n", table, v)
	}
	return b.String()
}

// Rule (G8, G11): a tick claim skipped with ErrTickDone writes nothing, not
// even the expiry of the source's lapsed run, and locks no row: no row of
// the test's tables changes version, so the claim needed no transaction
// ID, and its commit writes no WAL.
func TestPostgresTickDoneWritesNothing(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	done, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "src", Owner: "a", Lease: time.Minute, Tick: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Finish(ctx, runclaim.FinishRequest{ID: done.ID, Source: "src", StartedAt: done.StartedAt, Status: runclaim.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	lapsed, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "src", Owner: "b", Lease: runclaim.MinLease, Tick: t0.Add(2 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, 5*time.Millisecond, "the lease to end", func() bool { return dbNow(t, db.Pool).After(lapsed.LeaseUntil) })

	before, versions := readState(t, db.Pool, store.Table()), rowVersions(t, db.Pool)
	const losses = 20
	for i := range losses {
		tick := t0.Add(time.Duration(i%2) * time.Minute) // the tick served, and one before it
		_, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "src", Owner: "c", Lease: time.Minute, Tick: tick})
		var nc *runclaim.NotClaimedError
		if !errors.Is(err, runclaim.ErrTickDone) || !errors.As(err, &nc) || !nc.DoneTick.Equal(done.Tick) {
			t.Fatalf("claim of tick %v: %v, want ErrTickDone naming %v", tick, err, done.Tick)
		}
	}
	if after := rowVersions(t, db.Pool); after != versions {
		t.Errorf("%d lost tick claims wrote or locked rows:\nbefore:\n%s\nafter:\n%s", losses, versions, after)
	}
	if after := readState(t, db.Pool, store.Table()); after != before {
		t.Errorf("lost tick claims changed the table from %+v to %+v", before, after)
	}
	if row := loadRun(t, db.Pool, store.Table(), lapsed.ID); row.Status != "running" || row.FinishedAt != nil {
		t.Errorf("a lost tick claim expired the lapsed run: %+v", row)
	}
	// The lapsed run's own tick is open: a claim of it takes it over.
	over, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "src", Owner: "d", Lease: time.Minute, Tick: lapsed.Tick})
	if err != nil {
		t.Fatalf("takeover of the lapsed run's tick: %v", err)
	}
	if row := loadRun(t, db.Pool, store.Table(), lapsed.ID); row.Status != "expired" {
		t.Errorf("the takeover left the lapsed run %s", row.Status)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+store.Table()+` WHERE tick = $1`, lapsed.Tick).Scan(&n); err != nil || n != 2 {
		t.Errorf("rows of the taken-over tick: %d, %v; want 2, the expired run and its successor %d", n, err, over.ID)
	}
}

// A tick claim on a table older than version 4 fails, before writing
// anything, with an error that says to run Migrate, not a skip, as a
// plain claim there does (the store claims on the two newest versions
// only); after Migrate, the same store claims ticks.
func TestTickClaimOnOlderTable(t *testing.T) {
	t.Parallel()
	for _, v := range []int{2, 3} {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			migrateTo(t, db.Pool, v)
			store, err := runclaim.NewPostgresStore(db.Pool)
			if err != nil {
				t.Fatal(err)
			}
			c := newClaimer(t, store)
			ctx := t.Context()
			tick := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			for range 2 { // whatever the store has learned of the table meanwhile
				before := readState(t, db.Pool, store.Table())
				_, err := c.Claim(ctx, "src", runclaim.ForTick(tick))
				if err == nil || errors.Is(err, runclaim.ErrNotClaimed) || !strings.Contains(err.Error(), "run Migrate") {
					t.Errorf("tick claim on a version %d table: %v, want an error that says to run Migrate", v, err)
				}
				if after := readState(t, db.Pool, store.Table()); after != before {
					t.Errorf("the failed tick claim changed the table from %+v to %+v", before, after)
				}
				if _, err := c.Claim(ctx, "src"); err == nil || !strings.Contains(err.Error(), "run Migrate") {
					t.Errorf("plain claim on a version %d table: %v, want an error that says to run Migrate", v, err)
				}
			}
			if err := store.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			run, err := c.Claim(ctx, "src", runclaim.ForTick(tick))
			if err != nil {
				t.Fatalf("tick claim after Migrate: %v", err)
			}
			if !run.Tick.Equal(tick) {
				t.Errorf("run's tick %v, want %v", run.Tick, tick)
			}
			if err := run.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Ticks beside plain claims: replicas whose claims name no tick (of a
// release that does not use ticks, or configured without them) claim the
// same sources as the tick claims of others. They share the source and its
// lock: at most one run of a source is ever running, a plain run records
// no tick and serves none, and every tick is still served once.
func TestRollingDeployTicks(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	newStore := migratedStore(t, db.Pool)
	old3 := newClaimer(t, formStore(t, db.Pool, claimForms[0]), runclaim.WithOwner("old-function"))
	old2 := newClaimer(t, formStore(t, db.Pool, claimForms[0]), runclaim.WithOwner("old-batch"))
	fresh := newClaimer(t, newStore, runclaim.WithOwner("new"))

	tick := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, old := range []*runclaim.Claimer{old3, old2} {
		plain, err := old.Claim(ctx, "shared")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fresh.Claim(ctx, "shared", runclaim.ForTick(tick)); !errors.Is(err, runclaim.ErrAlreadyRunning) {
			t.Errorf("tick claim while an old replica's run is running: %v, want ErrAlreadyRunning", err)
		}
		if err := plain.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		run, err := fresh.Claim(ctx, "shared", runclaim.ForTick(tick))
		if err != nil {
			t.Fatalf("tick claim after an old replica's run: %v", err)
		}
		if _, err := old.Claim(ctx, "shared"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
			t.Errorf("old replica's claim while a tick run is running: %v, want ErrAlreadyRunning", err)
		}
		if err := run.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		tick = tick.Add(time.Minute)
	}
	var nulls int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+newStore.Table()+` WHERE owner LIKE 'old-%' AND tick IS NULL`).Scan(&nulls); err != nil || nulls != 2 {
		t.Errorf("old replicas' runs with no tick: %d, %v; want 2", nulls, err)
	}

	// All three race on every tick, the old ones without naming it; each
	// winner finishes at once. At most one run is running at any time (the
	// unique index would refuse a second), and each tick is served by at
	// most one tick run.
	const ticks = 30
	for i := range ticks {
		tick := tick.Add(time.Duration(i) * time.Minute)
		var wg sync.WaitGroup
		for _, f := range []func() error{
			func() error { return old3.Do(ctx, "raced", func(context.Context, *runclaim.Run) error { return nil }) },
			func() error { return old2.Do(ctx, "raced", func(context.Context, *runclaim.Run) error { return nil }) },
			func() error {
				return fresh.Do(ctx, "raced", func(context.Context, *runclaim.Run) error { return nil }, runclaim.ForTick(tick))
			},
			func() error {
				return fresh.Do(ctx, "raced", func(context.Context, *runclaim.Run) error { return nil }, runclaim.ForTick(tick))
			},
		} {
			wg.Go(func() {
				if err := f(); err != nil && !errors.Is(err, runclaim.ErrNotClaimed) {
					t.Errorf("tick %d: %v", i, err)
				}
			})
		}
		wg.Wait()
	}
	var doubles int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT tick FROM `+newStore.Table()+`
WHERE source = 'raced' AND tick IS NOT NULL AND status IN ('running', 'succeeded', 'failed') GROUP BY tick HAVING count(*) > 1) AS d`).Scan(&doubles); err != nil || doubles != 0 {
		t.Errorf("ticks served twice: %d, %v", doubles, err)
	}
}

// Prune keeps the finished run of the latest tick a source has served,
// however many plain runs came after it, so that the tick stays done; it
// deletes it once a later tick has been served.
func TestPruneKeepsLatestTick(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	c := newClaimer(t, store)
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	nop := func(context.Context, *runclaim.Run) error { return nil }
	if err := c.Do(ctx, "src", nop, runclaim.ForTick(t0)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c.Do(ctx, "src", nop); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := store.Prune(ctx, 0); err != nil || n != 2 {
		t.Errorf("Prune: %d, %v; want 2, the older plain runs", n, err)
	}
	if err := c.Do(ctx, "src", nop, runclaim.ForTick(t0)); !errors.Is(err, runclaim.ErrTickDone) {
		t.Errorf("claim of the tick after Prune: %v, want ErrTickDone", err)
	}
	if err := c.Do(ctx, "src", nop, runclaim.ForTick(t0.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	if n, err := store.Prune(ctx, 0); err != nil || n != 2 {
		t.Errorf("Prune after a later tick: %d, %v; want 2, the first tick's run and the last plain one", n, err)
	}
	if err := c.Do(ctx, "src", nop, runclaim.ForTick(t0)); !errors.Is(err, runclaim.ErrTickDone) {
		t.Errorf("claim of the older tick after Prune: %v, want ErrTickDone", err)
	}
}

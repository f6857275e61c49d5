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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// This file tests the schema-version machinery where it could trap a
// store: a downgrade under load, a table whose comment says more than its
// objects, names that need careful quoting, and a first claim on a locked
// table.

// claimFuncExists reports whether store's claim function exists.
func claimFuncExists(t *testing.T, pool *pgxpool.Pool, store *runclaim.PostgresStore) bool {
	t.Helper()
	var ok bool
	err := pool.QueryRow(t.Context(), `SELECT pg_catalog.to_regprocedure($1) IS NOT NULL`,
		runclaim.ClaimFuncName(store)+runclaim.ClaimFuncArgs).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestDowngradeUnderLoad: the newest step's Down and its Up again (the
// rollback of a rolling upgrade, and its retry), applied over and over
// while 6 claimers claim and finish, one at a time and many at once, half
// of them naming a key with a limit of starts. The store speaks the
// version before too, so no claim may fail: a claim that planned a
// statement a moment before the drop commits meets what the step adds
// missing (a function, in either form: 42883 undefined_function or XX000
// "cache lookup failed for function"; a column), having written nothing,
// and must then be decided by the version before. Every claim wins or is
// skipped: none fails.
func TestDowngradeUnderLoad(t *testing.T) {
	t.Parallel()
	for _, version := range []int{runclaim.LatestSchemaVersion} {
		t.Run(fmt.Sprintf("step %d", version), func(t *testing.T) {
			t.Parallel()
			downgradeUnderLoad(t, version)
		})
	}
}

func downgradeUnderLoad(t *testing.T, version int) {
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	var down, up string
	for _, m := range store.Migrations() {
		if m.Version == version {
			down, up = m.Down, m.Up
		}
	}
	if err := store.SetLimit(ctx, "site", runclaim.Limit{MaxStarts: 1_000_000, Per: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// Each claimer has a store of its own, as replicas do.
	const claimers = 6
	stop := make(chan struct{})
	var (
		wg              sync.WaitGroup
		claims, skipped atomic.Int64
		mu              sync.Mutex
		failures        []error
	)
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}
	for i := range claimers {
		s, err := runclaim.NewPostgresStore(db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		opts := []runclaim.Option{runclaim.WithLease(time.Minute)}
		if version == runclaim.LatestSchemaVersion && i%2 == 0 {
			// Claims that name a key with a limit of starts, whose
			// starts the newest step numbers.
			opts = append(opts, runclaim.WithSourceKeys(func(string) []string { return []string{"site"} }))
		}
		c := newClaimer(t, s, opts...)
		source := []string{"a", "b", "c"}[i%3] // two claimers per source: some claims lose
		many := i >= claimers/2                // the others claim two sources at once
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var runs []*runclaim.Run
				var err error
				if many {
					runs, err = c.ClaimMany(ctx, []string{source + "-many", source + "-many2"})
				} else {
					var run *runclaim.Run
					if run, err = c.Claim(ctx, source); err == nil {
						runs = append(runs, run)
					}
				}
				claims.Add(1)
				switch {
				case err == nil:
					for _, run := range runs {
						if err := run.Finish(ctx, nil); err != nil {
							fail(err)
						}
					}
				case errors.Is(err, runclaim.ErrNotClaimed):
					skipped.Add(1)
				default:
					fail(err)
				}
			}
		})
	}
	// Bounded by count, not time: 40 drops and 40 creations while the
	// claims run.
	// Each applied as Migrate applies a step: its wait for a table's lock
	// bounded (500 ms), and tried again when it runs out, so that claims
	// queue behind it no longer than that.
	for range 40 {
		for _, q := range []string{down, up} {
			var err error
			for range 20 {
				_, err = db.Pool.Exec(ctx, "SELECT pg_catalog.set_config('lock_timeout', '500ms', true);"+q)
				if pgCode(err) != "55P03" {
					break
				}
			}
			if err != nil {
				close(stop)
				wg.Wait()
				t.Fatalf("step %d: %v", version, err)
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d claims, %d skipped, %d failed", claims.Load(), skipped.Load(), len(failures))
	for i, err := range failures {
		if i == 5 {
			t.Errorf("... and %d more", len(failures)-i)
			break
		}
		t.Errorf("a claim during the downgrade failed: %v", err)
	}
}

// TestMigrateRepairsMissingFunction: a table whose comment says version 3
// but whose claim function is missing (dropped by hand, restored with
// pg_dump -t, moved with ALTER TABLE SET SCHEMA). SchemaVersion reports it
// as version 2, Migrate creates the function again, and a Migrate with
// nothing missing takes no lock on the table.
func TestMigrateRepairsMissingFunction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	t.Run("dropped_by_hand", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		fresh := repairDamaged(t, db, "the function missing", func(s *runclaim.PostgresStore) string {
			return "DROP FUNCTION " + runclaim.ClaimFuncName(s) + runclaim.ClaimFuncArgs
		}, 2)
		if !claimFuncExists(t, db.Pool, fresh) {
			t.Fatalf("Migrate left the claim function missing")
		}
		checkMigrateTakesNoLock(t, db.Pool, fresh)
	})
	t.Run("moved_schema", func(t *testing.T) {
		t.Parallel()
		db := migratedDB(t)
		store := storeOn(t, db.Pool)
		if _, err := db.Pool.Exec(ctx, `CREATE SCHEMA moved; ALTER TABLE `+store.Table()+` SET SCHEMA moved`); err != nil {
			t.Fatal(err)
		}
		moved := migratedStore(t, db.Pool, runclaim.WithTable("moved", runclaim.DefaultTable))
		if !claimFuncExists(t, db.Pool, moved) {
			t.Fatalf("Migrate on the moved table left its claim function missing")
		}
		rec := &sqlRecorder{}
		pool := db.NewPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = rec })
		s, err := runclaim.NewPostgresStore(pool, runclaim.WithTable("moved", runclaim.DefaultTable))
		if err != nil {
			t.Fatal(err)
		}
		c := newClaimer(t, s)
		for range 3 {
			if err := c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if n := checkForm(t, rec, s, claimForms[len(claimForms)-1]); n != 3 {
			t.Errorf("%d claims recorded, want 3 calls of the function", n)
		}
	})
}

// repairDamaged migrates a table on db, damages it with the statement
// damage returns, and checks that a new store reads it as schema version
// want and that Migrate brings it back to the latest version. It returns
// that store.
func repairDamaged(t *testing.T, db *pgtest.DB, what string, damage func(*runclaim.PostgresStore) string, want int) *runclaim.PostgresStore {
	t.Helper()
	ctx := t.Context()
	store := migratedStore(t, db.Pool)
	if _, err := db.Pool.Exec(ctx, damage(store)); err != nil {
		t.Fatal(err)
	}
	fresh, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if have, _, err := fresh.SchemaVersion(ctx); err != nil || have != want {
		t.Errorf("SchemaVersion with %s = %d, %v; want %d", what, have, err, want)
	}
	if err := fresh.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if have, _, err := fresh.SchemaVersion(ctx); err != nil || have != runclaim.LatestSchemaVersion {
		t.Errorf("SchemaVersion after the repair = %d, %v; want %d", have, err, runclaim.LatestSchemaVersion)
	}
	return fresh
}

// checkMigrateTakesNoLock: with the table held ACCESS EXCLUSIVE by
// another transaction, Migrate on a complete schema returns at once
// without waiting for it (it reads the catalogs only).
func checkMigrateTakesNoLock(t *testing.T, pool *pgxpool.Pool, store *runclaim.PostgresStore) {
	t.Helper()
	unlock := lockTable(t, pool, store.Table())
	defer unlock()
	done := make(chan error, 1)
	go func() { done <- store.Migrate(t.Context()) }()
	// If Migrate waited for the table lock it would not return before
	// unlock; 30 s is slack for a loaded machine.
	if err := awaitRecv(t, done, 30*time.Second, "Migrate on a complete schema while the table is locked"); err != nil {
		t.Errorf("Migrate on a complete schema: %v", err)
	}
}

// TestMissingFunctionRefused: a table whose comment says the current
// version but whose claim functions are missing (dropped by hand,
// restored without them), that of the current version and the overload
// of the version before, is refused at every claim with the error that
// names Migrate, each having written nothing, as the store has no other
// form to fall back to; once Migrate repairs it, claims win again. With
// only the current one missing, the table is at the version before, and
// claims go on in its form.
func TestMissingFunctionRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	setup := storeOn(t, db.Pool)
	if _, err := db.Pool.Exec(ctx, "DROP FUNCTION "+runclaim.ClaimBodyName(setup)+runclaim.ClaimBodyArgs); err != nil {
		t.Fatal(err)
	}
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, store)
	if err := c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
		t.Fatalf("claim with the current claim function missing: %v, want a run in the form of the version before", err)
	}
	if _, err := db.Pool.Exec(ctx, "DROP FUNCTION "+runclaim.ClaimFuncName(setup)+runclaim.StateFuncArgs); err != nil {
		t.Fatal(err)
	}
	store, err = runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	c = newClaimer(t, store)
	before := readState(t, db.Pool, store.Table())
	for range 3 {
		_, err := c.Claim(ctx, "src")
		if err == nil || errors.Is(err, runclaim.ErrNotClaimed) || !strings.Contains(err.Error(), "run Migrate") {
			t.Fatalf("claim with the claim function missing: %v, want the error that names Migrate", err)
		}
	}
	if after := readState(t, db.Pool, store.Table()); after != before {
		t.Errorf("refused claims changed the table from %+v to %+v", before, after)
	}
	if err := setup.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
		t.Fatalf("claim after the repair: %v", err)
	}
}

// TestDollarNames: table and schema names with dollar signs, which a
// dollar-quoted literal must not end early on, work end to end: Migrate
// (twice), claim, finish.
func TestDollarNames(t *testing.T) {
	t.Parallel()
	for _, n := range []struct{ schema, table string }{
		{"public", "runs$q"},
		{"sch$q", "runs"},
		{"public", "a$$b"},
		{"$x$", "$x$"},
		{"q$", "$q"},
		{"$q0$", "runs$q0"},
	} {
		t.Run(n.schema+"."+n.table, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.New(t)
			store := migratedStore(t, db.Pool, runclaim.WithTable(n.schema, n.table))
			if err := store.Migrate(ctx); err != nil {
				t.Fatalf("second Migrate: %v", err)
			}
			if have, want, err := store.SchemaVersion(ctx); err != nil || have != want {
				t.Fatalf("SchemaVersion = %d, %d, %v", have, want, err)
			}
			if !claimFuncExists(t, db.Pool, store) {
				t.Fatalf("no claim function")
			}
			c := newClaimer(t, store)
			run, err := c.Claim(ctx, "src")
			if err != nil {
				t.Fatalf("Claim: %v", err)
			}
			if _, err := c.Claim(ctx, "src"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
				t.Errorf("second Claim: %v, want ErrAlreadyRunning", err)
			}
			if err := run.Finish(ctx, nil); err != nil {
				t.Fatalf("Finish: %v", err)
			}
			if got := readState(t, db.Pool, store.Table()); got.Rows != 1 || got.Running != 0 {
				t.Errorf("table after claim and finish: %+v", got)
			}
		})
	}
}

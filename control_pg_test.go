package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// controlTable returns the quoted, schema-qualified name of the table of
// pauses and triggers next to store's runs table.
func controlTable(schema string) string {
	return pgx.Identifier{schema, runclaim.DefaultTable + "_control"}.Sanitize()
}

// controlRows reads the control table as text, for checks that a call
// changed nothing.
func controlRows(t *testing.T, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var s string
	err := pool.QueryRow(t.Context(), `SELECT coalesce(string_agg(k::text, ';' ORDER BY k.source), '') FROM `+table+` AS k`).Scan(&s)
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return s
}

// Rule (G8, G12): a claim skipped for a pause writes nothing, not even the
// expiry of the source's lapsed run, and locks no row (no row of the
// test's tables changes version: see rowVersions); nor does one skipped
// over a running run while a trigger waits, which leaves the trigger.
func TestPausedClaimWritesNothing(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()
	ctl := controlTable(runclaim.DefaultSchema)
	lapsed, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "src", Owner: "a", Lease: runclaim.MinLease})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, 5*time.Millisecond, "the lease to end", func() bool { return dbNow(t, db.Pool).After(lapsed.LeaseUntil) })
	if err := store.Pause(ctx, "src", time.Time{}, "hold"); err != nil {
		t.Fatal(err)
	}
	if err := store.Trigger(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	live, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "live", Owner: "a", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Trigger(ctx, "live"); err != nil {
		t.Fatal(err)
	}

	before, controls, versions := readState(t, db.Pool, store.Table()), controlRows(t, db.Pool, ctl), rowVersions(t, db.Pool)
	const losses = 10
	for i := range losses {
		_, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "src", Owner: "b", Lease: time.Minute, Tick: time.Unix(int64(i)*60, 0)})
		var nc *runclaim.NotClaimedError
		if !errors.Is(err, runclaim.ErrPaused) || !errors.As(err, &nc) || nc.Note != "hold" || !nc.RetryAfter.IsZero() {
			t.Fatalf("claim of a paused source: %v, want ErrPaused with the note and no end", err)
		}
		_, err = store.Claim(ctx, runclaim.ClaimRequest{Source: "live", Owner: "b", Lease: time.Minute})
		if !errors.Is(err, runclaim.ErrAlreadyRunning) || !errors.As(err, &nc) || nc.Holder == nil || nc.Holder.ID != live.ID {
			t.Fatalf("claim over a running run with a trigger waiting: %v, want ErrAlreadyRunning naming run %d", err, live.ID)
		}
	}
	if after := rowVersions(t, db.Pool); after != versions {
		t.Errorf("%d skipped claims wrote or locked rows:\nbefore:\n%s\nafter:\n%s", 2*losses, versions, after)
	}
	if after := readState(t, db.Pool, store.Table()); after != before {
		t.Errorf("skipped claims changed the runs table from %+v to %+v", before, after)
	}
	if after := controlRows(t, db.Pool, ctl); after != controls {
		t.Errorf("skipped claims changed the control table from %s to %s", controls, after)
	}
	if row := loadRun(t, db.Pool, store.Table(), lapsed.ID); row.Status != "running" || row.FinishedAt != nil {
		t.Errorf("a paused claim expired the lapsed run: %+v", row)
	}
}

// Rule: on a table older than version 5, Pause, Resume and Trigger fail
// with an error that says to run Migrate, not a skip, changing nothing, as
// claims there do (the store claims on the versions before the current
// one only); Controls lists nothing. After Migrate the same store pauses.
func TestControlOnOlderTable(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	migrateTo(t, db.Pool, 4)
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	c := newClaimer(t, store)
	before := readState(t, db.Pool, store.Table())
	for name, call := range map[string]func() error{
		"Pause":   func() error { return store.Pause(ctx, "src", time.Time{}, "note") },
		"Resume":  func() error { return store.Resume(ctx, "src") },
		"Trigger": func() error { return store.Trigger(ctx, "src") },
	} {
		err := call()
		if err == nil || errors.Is(err, runclaim.ErrNotClaimed) || !strings.Contains(err.Error(), "schema version 5") || !strings.Contains(err.Error(), "run Migrate") {
			t.Errorf("%s on a version 4 table: %v, want an error that says to run Migrate to version 5", name, err)
		}
	}
	if after := readState(t, db.Pool, store.Table()); after != before {
		t.Errorf("the refused calls changed the table from %+v to %+v", before, after)
	}
	if list, now, err := store.Controls(ctx, ""); err != nil || len(list) != 0 || now.IsZero() {
		t.Errorf("Controls on a version 4 table: %v, %v, %v; want nothing, the clock and no error", list, now, err)
	}
	if _, err := c.Claim(ctx, "src"); err == nil || !strings.Contains(err.Error(), "run Migrate") {
		t.Errorf("claim on a version 4 table: %v, want an error that says to run Migrate", err)
	}

	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.Pause(ctx, "src", time.Time{}, "after Migrate"); err != nil {
		t.Fatalf("Pause after Migrate: %v", err)
	}
	if _, err := c.Claim(ctx, "src"); !errors.Is(err, runclaim.ErrPaused) {
		t.Errorf("claim of a source paused after Migrate: %v, want ErrPaused", err)
	}
	list, _, err := store.Controls(ctx, "")
	if err != nil || len(list) != 1 || list[0].Source != "src" || !list[0].Paused || list[0].Note != "after Migrate" || !list[0].PausedUntil.IsZero() {
		t.Errorf("Controls after a pause: %+v, %v", list, err)
	}
	// The database's time of the read comes back whether or not a source
	// is paused: for one that is not, and for every source when none is.
	if err := store.Resume(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{"src", ""} {
		if list, now, err := store.Controls(ctx, src); err != nil || len(list) != 0 || now.IsZero() {
			t.Errorf("Controls(%q) with nothing paused: %v, %v, %v; want nothing, the clock and no error", src, list, now, err)
		}
	}
}

// Rule: Migrate goes by the objects of version 5 as of every other: the
// control table, and claim functions whose bodies read it. Each one lost
// (a table dropped by hand, an older step's Up applied again by a
// migration tool, which puts back an older body) puts SchemaVersion at 4,
// and Migrate repairs it; pauses then hold again.
func TestMigrateRepairsControl(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		damage func(s *runclaim.PostgresStore) string
	}{
		{"table dropped", func(s *runclaim.PostgresStore) string { return "DROP TABLE " + controlTable(runclaim.DefaultSchema) }},
		{"step 4 applied again", func(s *runclaim.PostgresStore) string {
			return strings.ReplaceAll(s.Migrations()[3].Up, "COMMENT ON TABLE "+s.Table()+" IS 'runclaim schema version 4';\n", "")
		}},
		{"step 3 applied again", func(s *runclaim.PostgresStore) string {
			return strings.ReplaceAll(s.Migrations()[2].Up, "COMMENT ON TABLE "+s.Table()+" IS 'runclaim schema version 3';\n", "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			fresh := repairDamaged(t, db, tc.name, tc.damage, 4)
			var comment string
			if err := db.Pool.QueryRow(ctx, `SELECT obj_description($1::regclass, 'pg_class')`, fresh.Table()).Scan(&comment); err != nil || comment != fmt.Sprintf("runclaim schema version %d", runclaim.LatestSchemaVersion) {
				t.Errorf("comment after the repair: %q, %v", comment, err)
			}
			if err := fresh.Pause(ctx, "src", time.Time{}, "repaired"); err != nil {
				t.Fatal(err)
			}
			for _, f := range claimForms {
				s := formStore(t, db.Pool, f)
				if _, err := s.Claim(ctx, runclaim.ClaimRequest{Source: "src", Owner: "o", Lease: time.Minute}); !errors.Is(err, runclaim.ErrPaused) {
					t.Errorf("%s claim of a paused source after the repair: %v, want ErrPaused", f.name, err)
				}
			}
			checkMigrateTakesNoLock(t, db.Pool, fresh)
		})
	}
}

// Rule (rolling deploys): the replicas of the releases before version 5
// call the claim functions whose bodies version 5 replaced, and read their
// rows as those releases do. A pause skips their claims too, as "another
// claim in flight" (locked false, no running run), writing nothing; a
// trigger lets their claim in despite the interval, once.
func TestOlderReleasesHonourControl(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()
	fn := runclaim.ClaimFuncName(store)
	calls := map[string]string{
		"version 3 release": `SELECT locked, isolation, won, run_id, retry_after FROM ` + fn + `($1, $2, 'old', 60000000, 3600000000, 1000)`,
		"version 4 release": `SELECT locked, isolation, won, run_id, retry_after FROM ` + fn + `($1, $2, 'old', 60000000, 3600000000, 1000, NULL)`,
	}
	for name, call := range calls {
		src := "src-" + strings.ReplaceAll(name, " ", "-")
		key := runclaim.AdvisoryKeyOf(runclaim.DefaultNamespace, src)
		type row struct {
			locked, won bool
			isolation   *string
			runID       *int64
			retryAfter  *time.Time
		}
		callOld := func() row {
			t.Helper()
			var r row
			if err := db.Pool.QueryRow(ctx, call, key, src).Scan(&r.locked, &r.isolation, &r.won, &r.runID, &r.retryAfter); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return r
		}
		first := callOld()
		if !first.won || first.runID == nil {
			t.Fatalf("%s: first claim %+v, want won", name, first)
		}
		if _, err := db.Pool.Exec(ctx, `UPDATE `+store.Table()+` SET status = 'succeeded', finished_at = clock_timestamp() WHERE id = $1`, *first.runID); err != nil {
			t.Fatal(err)
		}
		until := dbNow(t, db.Pool).Add(time.Hour).Truncate(time.Microsecond)
		if err := store.Pause(ctx, src, until, "old replicas too"); err != nil {
			t.Fatal(err)
		}
		before := readState(t, db.Pool, store.Table())
		if r := callOld(); r.won || r.locked || r.runID != nil || r.isolation != nil {
			t.Errorf("%s: claim of a paused source %+v, want lost, not locked, no run and no isolation: another claim in flight", name, r)
		}
		if after := readState(t, db.Pool, store.Table()); after != before {
			t.Errorf("%s: a paused claim changed the table from %+v to %+v", name, before, after)
		}
		if err := store.Resume(ctx, src); err != nil {
			t.Fatal(err)
		}
		if r := callOld(); r.won {
			t.Errorf("%s: claim within the interval won without a trigger: %+v", name, r)
		}
		if err := store.Trigger(ctx, src); err != nil {
			t.Fatal(err)
		}
		second := callOld()
		if !second.won || second.runID == nil {
			t.Fatalf("%s: triggered claim %+v, want won despite the interval", name, second)
		}
		if _, err := db.Pool.Exec(ctx, `UPDATE `+store.Table()+` SET status = 'succeeded', finished_at = clock_timestamp() WHERE id = $1`, *second.runID); err != nil {
			t.Fatal(err)
		}
		if r := callOld(); r.won {
			t.Errorf("%s: a second claim won on one trigger: %+v", name, r)
		}
	}
}

// Rule (G7): Pause, Resume and Trigger, and the claims that honour them,
// answer as under READ COMMITTED whatever the server's default isolation:
// a trigger used by a claim while another store triggers and pauses is
// used once, and no call returns a raw serialization failure.
func TestControlIsolationDefaults(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(level, " ", "_"), func(t *testing.T) {
			t.Parallel()
			db := migratedDB(t)
			pool := poolWithIsolation(t, db, level, nil)
			ctx := t.Context()
			store, err := runclaim.NewPostgresStore(pool)
			if err != nil {
				t.Fatal(err)
			}
			c, err := runclaim.New(store, runclaim.WithMinInterval(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			do := func() error { return c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { return nil }) }
			if err := do(); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				if err := store.Pause(ctx, "src", time.Time{}, fmt.Sprint("round ", i)); err != nil {
					t.Fatalf("Pause under %s: %v", level, err)
				}
				if err := store.Trigger(ctx, "src"); err != nil {
					t.Fatalf("Trigger under %s: %v", level, err)
				}
				if err := do(); !errors.Is(err, runclaim.ErrPaused) {
					t.Errorf("claim of a paused source under %s: %v, want ErrPaused", level, err)
				}
				if err := store.Resume(ctx, "src"); err != nil {
					t.Fatalf("Resume under %s: %v", level, err)
				}
				if err := do(); err != nil {
					t.Errorf("triggered claim under %s: %v", level, err)
				}
				if err := do(); !errors.Is(err, runclaim.ErrTooSoon) {
					t.Errorf("second claim on one trigger under %s: %v, want ErrTooSoon", level, err)
				}
			}
		})
	}
}

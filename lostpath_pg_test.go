package runclaim_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// Rule (schema version 6): a claim that meets a live holder answers from
// a read made before the advisory lock, and takes no advisory lock; one
// that meets no holder still takes it. Checked from inside the claim's
// own transaction, in pg_locks, which lists the locks a backend holds.
func TestLostClaimTakesNoAdvisoryLock(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()
	holder, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "held", Owner: "a", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// claimIn calls the claim function in a transaction and returns what
	// it answered and the advisory locks the transaction holds after it.
	claimIn := func(source string) (won bool, runID *int64, locks int) {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		err = tx.QueryRow(ctx, `SELECT c.won, c.run_id FROM `+runclaim.ClaimFuncName(store)+`($1, $2, 'b', 60000000, 0, 1000) AS c`,
			runclaim.AdvisoryKeyOf(runclaim.DefaultNamespace, source), source).Scan(&won, &runID)
		if err != nil {
			t.Fatalf("claim %q: %v", source, err)
		}
		err = tx.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_locks WHERE pid = pg_catalog.pg_backend_pid() AND locktype = 'advisory'`).Scan(&locks)
		if err != nil {
			t.Fatal(err)
		}
		return won, runID, locks
	}
	if won, runID, locks := claimIn("held"); won || runID == nil || *runID != holder.ID || locks != 0 {
		t.Errorf("claim over a live holder: won %v, run %v, %d advisory locks; want a loss naming run %d and no advisory lock", won, runID, locks, holder.ID)
	}
	if won, _, locks := claimIn("free"); !won || locks != 1 {
		t.Errorf("claim of a free source: won %v, %d advisory locks; want a win under one advisory lock", won, locks)
	}
}

// hostileOperators are operators that a role may create in a schema of
// its own with the argument types of those the claim function uses, so
// that an unqualified name would resolve to them (an exact match wins
// over pg_catalog's, and a schema listed before pg_catalog wins a tie).
var hostileOperators = []struct{ op, left, right, result string }{
	{"=", "text", "text", "boolean"},
	{"<>", "text", "text", "boolean"},
	{"=", "bigint", "bigint", "boolean"},
	{"<>", "bigint", "bigint", "boolean"},
	{">", "timestamptz", "timestamptz", "boolean"},
	{">=", "timestamptz", "timestamptz", "boolean"},
	{"<=", "timestamptz", "timestamptz", "boolean"},
	{">=", "interval", "interval", "boolean"},
	{"*", "bigint", "interval", "interval"},
	{"+", "timestamptz", "interval", "timestamptz"},
}

// Rule (schema version 6): the claim functions have no SET search_path;
// every name in their bodies is schema-qualified instead, so a caller's
// search_path cannot redirect an operator, function or type. A role's
// schema on the search_path before pg_catalog, with operators of the
// same argument types that raise an error, changes no claim's answer:
// a win, a loss to a live holder, too soon, a done tick, a pause, a
// trigger and the takeover of a lapsed run.
func TestClaimFunctionHostileSearchPath(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()
	if _, err := db.Pool.Exec(ctx, `CREATE SCHEMA evil`); err != nil {
		t.Fatal(err)
	}
	for i, o := range hostileOperators {
		q := fmt.Sprintf(`CREATE FUNCTION evil.f%[1]d(%[2]s, %[3]s) RETURNS %[4]s LANGUAGE plpgsql AS $f$BEGIN RAISE EXCEPTION 'hijacked operator %[5]s'; END$f$;
CREATE OPERATOR evil.%[5]s (LEFTARG = %[2]s, RIGHTARG = %[3]s, FUNCTION = evil.f%[1]d)`, i, o.left, o.right, o.result, o.op)
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("create operator %s: %v", o.op, err)
		}
	}
	hostile := db.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["search_path"] = "evil, pg_catalog, public" })
	// The pool's sessions do resolve to the hostile operators.
	var eq bool
	if err := hostile.QueryRow(ctx, `SELECT 'a'::text = 'a'::text`).Scan(&eq); err == nil || !strings.Contains(err.Error(), "hijacked") {
		t.Fatalf("the hostile search_path is not in effect: %v, %v", eq, err)
	}
	claimer, err := runclaim.NewPostgresStore(hostile)
	if err != nil {
		t.Fatal(err)
	}
	claim := func(req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
		t.Helper()
		if req.Owner == "" {
			req.Owner = "o"
		}
		if req.Lease == 0 {
			req.Lease = time.Minute
		}
		run, err := claimer.Claim(ctx, req)
		if err != nil && strings.Contains(err.Error(), "hijacked") {
			t.Fatalf("claim %+v ran a hostile operator: %v", req, err)
		}
		return run, err
	}
	finish := func(run runclaim.RunInfo) {
		t.Helper()
		if err := store.Finish(ctx, runclaim.FinishRequest{ID: run.ID, Source: run.Source, StartedAt: run.StartedAt, Status: runclaim.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}

	won, err := claim(runclaim.ClaimRequest{Source: "a"})
	if err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if _, err := claim(runclaim.ClaimRequest{Source: "a"}); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Errorf("claim over a live holder: %v, want ErrAlreadyRunning", err)
	}
	finish(won)
	if _, err := claim(runclaim.ClaimRequest{Source: "a", MinInterval: time.Hour}); !errors.Is(err, runclaim.ErrTooSoon) {
		t.Errorf("claim within the minimum interval: %v, want ErrTooSoon", err)
	}
	if err := store.Trigger(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	triggered, err := claim(runclaim.ClaimRequest{Source: "a", MinInterval: time.Hour})
	if err != nil {
		t.Errorf("triggered claim within the minimum interval: %v", err)
	} else {
		finish(triggered)
	}

	tick := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	ticked, err := claim(runclaim.ClaimRequest{Source: "t", Tick: tick})
	if err != nil {
		t.Fatalf("tick claim: %v", err)
	}
	finish(ticked)
	if _, err := claim(runclaim.ClaimRequest{Source: "t", Tick: tick}); !errors.Is(err, runclaim.ErrTickDone) {
		t.Errorf("claim of a done tick: %v, want ErrTickDone", err)
	}

	if err := store.Pause(ctx, "p", time.Time{}, "hold"); err != nil {
		t.Fatal(err)
	}
	if _, err := claim(runclaim.ClaimRequest{Source: "p"}); !errors.Is(err, runclaim.ErrPaused) {
		t.Errorf("claim of a paused source: %v, want ErrPaused", err)
	}

	lapsed, err := claim(runclaim.ClaimRequest{Source: "l", Lease: runclaim.MinLease})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, 5*time.Millisecond, "the lease to end", func() bool { return dbNow(t, db.Pool).After(lapsed.LeaseUntil) })
	next, err := claim(runclaim.ClaimRequest{Source: "l"})
	if err != nil || next.ID == lapsed.ID {
		t.Errorf("claim over a lapsed run: %+v, %v; want a new run", next, err)
	}
	var status string
	if err := db.Pool.QueryRow(ctx, `SELECT status FROM `+store.Table()+` WHERE id = $1`, lapsed.ID).Scan(&status); err != nil || status != "expired" {
		t.Errorf("the lapsed run's status: %q, %v; want expired", status, err)
	}
}

// Rule: Migrate goes by the objects of version 6 as of every other: claim
// functions without a SET clause. Each one lost (step 5's Up applied again
// by a migration tool, which puts back its bodies; a setting added by
// hand) puts SchemaVersion at 5, and Migrate repairs it, leaving the
// comment as it is.
func TestMigrateRepairsLostPath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		damage func(s *runclaim.PostgresStore) string
	}{
		{"step 5 applied again", func(s *runclaim.PostgresStore) string {
			return strings.ReplaceAll(s.Migrations()[4].Up, "COMMENT ON TABLE "+s.Table()+" IS 'runclaim schema version 5';\n", "")
		}},
		{"tick function given a search_path", func(s *runclaim.PostgresStore) string {
			return "ALTER FUNCTION " + runclaim.ClaimFuncName(s) + runclaim.TickFuncArgs + " SET search_path = public"
		}},
		{"plain function given a search_path", func(s *runclaim.PostgresStore) string {
			return "ALTER FUNCTION " + runclaim.ClaimFuncName(s) + runclaim.ClaimFuncArgs + " SET search_path = public"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			fresh := repairDamaged(t, db, tc.name, tc.damage, 5)
			var comment string
			var settings int
			err := db.Pool.QueryRow(ctx, `SELECT obj_description($1::regclass, 'pg_class'),
	(SELECT count(*) FROM pg_catalog.pg_proc AS p WHERE p.oid IN ($2::regprocedure, $3::regprocedure) AND p.proconfig IS NOT NULL)`,
				fresh.Table(), runclaim.ClaimFuncName(fresh)+runclaim.ClaimFuncArgs, runclaim.ClaimFuncName(fresh)+runclaim.TickFuncArgs).Scan(&comment, &settings)
			if err != nil || comment != fmt.Sprintf("runclaim schema version %d", runclaim.LatestSchemaVersion) || settings != 0 {
				t.Errorf("after the repair: comment %q, %d functions with settings, %v; want the latest version and none", comment, settings, err)
			}
			checkMigrateTakesNoLock(t, db.Pool, fresh)
		})
	}
}

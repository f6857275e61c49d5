package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// This file tests the two forms of the claim side by side: the batch of
// schema version 2, the function of version 3 (postgres_claimfunc.go) and its
// overload with a tick of version 4 (postgres_tickfunc.go), and how a
// store finds out which one its table has.

// pinForm is how long a store pinned to a form by formStore goes without
// reading the schema version again: longer than any test.
const pinForm = 1000 * time.Hour

// claimForm is one form of the claim: the schema version a store is told
// its table has.
type claimForm struct {
	name    string
	version int
}

var claimForms = []claimForm{{"batch", 2}, {"function", 3}, {"tick function", 4}}

// formStore returns a store on pool that claims in form f, whatever the
// table's version (which must have the function for the function form).
func formStore(t testing.TB, pool *pgxpool.Pool, f claimForm, opts ...runclaim.PostgresOption) *runclaim.PostgresStore {
	t.Helper()
	s, err := runclaim.NewPostgresStore(pool, opts...)
	if err != nil {
		t.Fatalf("NewPostgresStore: %v", err)
	}
	runclaim.SetSchemaRecheck(s, pinForm)
	runclaim.SetClaimSchema(s, f.version)
	return s
}

// checkForm fails the test unless the recorded claims were all sent in
// form f, and returns how many there were.
func checkForm(t *testing.T, rec *sqlRecorder, store *runclaim.PostgresStore, f claimForm) int {
	t.Helper()
	call := runclaim.ClaimFuncName(store)
	batches, queries := rec.take()
	n := 0
	for _, q := range queries {
		if strings.Contains(q, call) {
			n++
			if f.version < 3 {
				t.Errorf("%s form: the claim function was called: %q", f.name, q)
			}
			if withTick := strings.Contains(q, "$7::pg_catalog.timestamptz"); withTick != (f.version >= 4) {
				t.Errorf("%s form: the claim function was called with a tick %v: %q", f.name, withTick, q)
			}
		}
	}
	for _, b := range batches {
		all := strings.Join(b, "\n")
		switch {
		case strings.Contains(all, call):
			n++
			if f.version < 3 {
				t.Errorf("%s form: the claim function was called: %q", f.name, b)
			}
		case strings.Contains(all, "pg_try_advisory_xact_lock"):
			n++
			if f.version >= 3 {
				t.Errorf("%s form: a claim was sent as the batch: %q", f.name, b)
			}
		}
	}
	return n
}

// claimOutcome is what a claim answered, with the times relative to the
// setup's runs so that the two forms, run on their own sources, compare.
type claimOutcome struct {
	Won        bool
	Reason     string // "already running", "too soon", or the error
	Holder     string // the holder's owner, "" if none was named
	HolderRun  string // which of the setup's runs is the holder: "old", "" if none
	RetryAfter string // "holder lease", "interval", "" (zero) or "other"
	Rows       map[string]int
}

// TestClaimFormsAgree: the function and the batch give the same answer,
// and leave the same rows, in every case a claim can meet: a free source,
// a live holder, a lapsed holder (taken over, or left alone while another
// transaction holds its row), a claim too soon by the claimer's interval or
// by the one recorded with the last run (with a lapsed holder too: too soon
// writes nothing), and the advisory lock held by another claim, with and
// without a holder.
func TestClaimFormsAgree(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	migratedStore(t, db.Pool)
	pool, rec := recordingPool(t, db)

	type setup struct {
		lapsed  bool          // old's lease has ended
		locked  bool          // another transaction holds old's row
		busy    bool          // another transaction holds the source's advisory lock
		finish  bool          // old has finished
		oldIntv time.Duration // old's claimer's minimum interval
	}
	cases := []struct {
		name     string
		setup    setup
		noOld    bool
		interval time.Duration // the claimer's
		want     claimOutcome
	}{
		{name: "free", noOld: true,
			want: claimOutcome{Won: true, Rows: map[string]int{"running": 1}}},
		{name: "finished", setup: setup{finish: true},
			want: claimOutcome{Won: true, Rows: map[string]int{"running": 1, "succeeded": 1}}},
		{name: "live holder", setup: setup{},
			want: claimOutcome{Reason: "already running", Holder: "old", HolderRun: "old", RetryAfter: "holder lease", Rows: map[string]int{"running": 1}}},
		{name: "lapsed holder", setup: setup{lapsed: true},
			want: claimOutcome{Won: true, Rows: map[string]int{"running": 1, "expired": 1}}},
		{name: "lapsed holder, row locked", setup: setup{lapsed: true, locked: true},
			want: claimOutcome{Reason: "already running", Holder: "old", HolderRun: "old", RetryAfter: "holder lease", Rows: map[string]int{"running": 1}}},
		{name: "too soon", setup: setup{finish: true}, interval: time.Hour,
			want: claimOutcome{Reason: "too soon", RetryAfter: "interval", Rows: map[string]int{"succeeded": 1}}},
		{name: "too soon by the recorded interval", setup: setup{finish: true, oldIntv: time.Hour},
			want: claimOutcome{Reason: "too soon", RetryAfter: "interval", Rows: map[string]int{"succeeded": 1}}},
		{name: "too soon, lapsed holder", setup: setup{lapsed: true}, interval: time.Hour,
			want: claimOutcome{Reason: "too soon", RetryAfter: "interval", Rows: map[string]int{"running": 1}}},
		{name: "lock busy", noOld: true, setup: setup{busy: true},
			want: claimOutcome{Reason: "already running", Rows: map[string]int{}}},
		{name: "lock busy, live holder", setup: setup{busy: true},
			want: claimOutcome{Reason: "already running", Holder: "old", HolderRun: "old", RetryAfter: "holder lease", Rows: map[string]int{"running": 1}}},
		{name: "lock busy, lapsed holder", setup: setup{busy: true, lapsed: true}, interval: time.Hour,
			want: claimOutcome{Reason: "already running", Holder: "old", HolderRun: "old", RetryAfter: "holder lease", Rows: map[string]int{"running": 1}}},
	}
	for _, f := range claimForms {
		store := formStore(t, pool, f)
		for _, tc := range cases {
			src := tc.name + "/" + f.name
			var old *runclaim.Run
			if !tc.noOld {
				lease := time.Minute
				if tc.setup.lapsed {
					lease = runclaim.MinLease
				}
				var err error
				old, err = newClaimer(t, store, runclaim.WithOwner("old"), runclaim.WithLease(lease), runclaim.WithMinInterval(tc.setup.oldIntv)).Claim(ctx, src)
				if err != nil {
					t.Fatalf("%s: set-up claim: %v", src, err)
				}
				if tc.setup.finish {
					if err := old.Finish(ctx, nil); err != nil {
						t.Fatal(err)
					}
				}
				if tc.setup.lapsed {
					waitUntil(t, 10*time.Second, 5*time.Millisecond, "the old lease to end", func() bool { return dbNow(t, db.Pool).After(old.LeaseUntil) })
				}
			}
			var hold []func()
			if tc.setup.locked {
				tx, err := db.Pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				hold = append(hold, func() { _ = tx.Rollback(context.Background()) })
				if _, err := tx.Exec(ctx, "SELECT 1 FROM "+store.Table()+" WHERE id = $1 FOR UPDATE", old.ID); err != nil {
					t.Fatal(err)
				}
			}
			if tc.setup.busy {
				tx, err := db.Pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				hold = append(hold, func() { _ = tx.Rollback(context.Background()) })
				if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", runclaim.AdvisoryKey(runclaim.DefaultNamespace, src)); err != nil {
					t.Fatal(err)
				}
			}
			rec.take()
			// A claim that waited for the locked row or the lock would time
			// out here instead of answering.
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			run, err := newClaimer(t, store, runclaim.WithOwner("new"), runclaim.WithLease(time.Minute), runclaim.WithMinInterval(tc.interval)).Claim(cctx, src)
			cancel()
			if n := checkForm(t, rec, store, f); n != 1 {
				t.Errorf("%s: %d claims recorded, want 1", src, n)
			}
			for _, h := range hold {
				h()
			}

			got := claimOutcome{Won: err == nil, Rows: map[string]int{}}
			var nc *runclaim.NotClaimedError
			switch {
			case err == nil:
				if run.Owner != "new" || run.Source != src || !run.LeaseUntil.Equal(run.StartedAt.Add(time.Minute)) {
					t.Errorf("%s: won run %+v", src, run)
				}
			case errors.As(err, &nc):
				switch nc.Reason {
				case runclaim.ErrAlreadyRunning:
					got.Reason = "already running"
				case runclaim.ErrTooSoon:
					got.Reason = "too soon"
				default:
					got.Reason = nc.Reason.Error()
				}
				if nc.Holder != nil {
					got.Holder = nc.Holder.Owner
					if old != nil && nc.Holder.ID == old.ID {
						got.HolderRun = "old"
						if diff := cmp.Diff(runInfo(old), *nc.Holder); diff != "" {
							t.Errorf("%s: holder (-run +holder):\n%s", src, diff)
						}
					}
				}
				switch {
				case nc.RetryAfter.IsZero():
				case old != nil && nc.RetryAfter.Equal(old.LeaseUntil):
					got.RetryAfter = "holder lease"
				case old != nil && nc.RetryAfter.Equal(old.StartedAt.Add(max(tc.interval, tc.setup.oldIntv))):
					got.RetryAfter = "interval"
				default:
					got.RetryAfter = "other"
				}
			default:
				got.Reason = err.Error()
			}
			rows, err := db.Pool.Query(ctx, "SELECT status, count(*) FROM "+store.Table()+" WHERE source = $1 GROUP BY status", src)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var status string
				var n int
				if err := rows.Scan(&status, &n); err != nil {
					t.Fatal(err)
				}
				got.Rows[status] = n
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s form, %s: (-want +got):\n%s", f.name, tc.name, diff)
			}
		}
	}
	if n := advisoryLocks(t, db.Pool); n != 0 {
		t.Errorf("%d advisory locks held after the claims", n)
	}
}

// migrateTo brings pool's default table to version v with the exported
// steps, as a migration tool would, or back down to it.
func migrateTo(t *testing.T, pool *pgxpool.Pool, v int) {
	t.Helper()
	s, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	have, _, err := s.SchemaVersion(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	steps := s.Migrations()
	for _, m := range steps {
		if m.Version > have && m.Version <= v {
			if _, err := pool.Exec(t.Context(), m.Up); err != nil {
				t.Fatalf("step %d up: %v", m.Version, err)
			}
		}
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if m := steps[i]; m.Version <= have && m.Version > v {
			if _, err := pool.Exec(t.Context(), m.Down); err != nil {
				t.Fatalf("step %d down: %v", m.Version, err)
			}
		}
	}
}

// TestClaimFindsSchemaVersion: a store learns which form its table takes
// without a round trip of its own. Its first claim calls the function; on
// a version 2 table that call fails, writing nothing, and the claim is
// sent as the batch, which the store then keeps sending; it moves to the
// function once another replica's migration has added it (at the next
// read of the schema state, after the recheck interval); when the function
// is dropped again (a step undone), the next claim still succeeds, sent
// again as the batch, having written nothing in its failed call.
func TestClaimFindsSchemaVersion(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	migrateTo(t, db.Pool, 2)
	pool, rec := recordingPool(t, db)
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	// The recheck interval is an hour while the test checks that a claim
	// does not read the version again (a busy machine cannot make it pass),
	// and short only while the test waits for the store to move.
	const recheck = 200 * time.Millisecond
	runclaim.SetSchemaRecheck(store, time.Hour)
	c := newClaimer(t, store)
	cycle := func(what string) {
		t.Helper()
		if err := c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
			t.Fatalf("%s: Do: %v", what, err)
		}
	}
	// probed reports whether the recorded claims read the schema version.
	probed := func(batches [][]string) bool {
		for _, b := range batches {
			if strings.Contains(strings.Join(b, "\n"), "obj_description") {
				return true
			}
		}
		return false
	}

	rec.take()
	if v := runclaim.ClaimSchema(store); v != 0 {
		t.Fatalf("a new store knows version %d", v)
	}
	cycle("first claim on a version 2 table")
	batches, queries := rec.take()
	// The overload of version 9, then that of version 4, both missing.
	if calls := callsOf(queries, store); probed(batches) || len(batches) != 1 || calls != 2 {
		t.Errorf("first claim: batches %q, queries %q; want two calls of the function, then one batch", batches, queries)
	}
	if v := runclaim.ClaimSchema(store); v != 2 {
		t.Errorf("after the first claim the store knows version %d, want 2", v)
	}
	cycle("second claim")
	if batches, queries := rec.take(); probed(batches) || callsOf(queries, store) != 0 {
		t.Errorf("the second claim, within the recheck interval, read the version again or called the function")
	}

	// Another replica migrates. The store moves to the function once it
	// reads the version again.
	migratedStore(t, db.Pool)
	runclaim.SetSchemaRecheck(store, recheck)
	waitUntil(t, 30*time.Second, recheck/4, "the store to call the function", func() bool {
		cycle("claim while the function is added")
		return runclaim.ClaimSchema(store) == runclaim.LatestSchemaVersion
	})
	runclaim.SetSchemaRecheck(store, time.Hour)
	rec.take()
	cycle("claim on the latest version")
	if n := checkForm(t, rec, store, claimForms[len(claimForms)-1]); n != 1 {
		t.Errorf("%d claims recorded, want 1", n)
	}

	// The step is undone under the store: its next claim fails to call
	// the function and is sent again as the batch.
	migrateTo(t, db.Pool, 2)
	before := readState(t, db.Pool, store.Table())
	run, err := c.Claim(ctx, "src")
	if err != nil {
		t.Fatalf("claim after the function was dropped: %v", err)
	}
	if after := readState(t, db.Pool, store.Table()); after.Rows != before.Rows+1 || after.MaxID != run.ID {
		t.Errorf("claim after the function was dropped: table went from %+v to %+v, run %d; want exactly one more row", before, after, run.ID)
	}
	batches, queries = rec.take()
	if callsOf(queries, store) != 2 || len(batches) != 1 || probed(batches) {
		t.Errorf("claim after the function was dropped: queries %q, batches %q; want the failed calls (versions 9 and 4), then one batch", queries, batches)
	}
	if v := runclaim.ClaimSchema(store); v != 2 {
		t.Errorf("after the function was dropped the store knows version %d, want 2", v)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}

	// Migrate on the store itself records the version at once.
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if v := runclaim.ClaimSchema(store); v != runclaim.LatestSchemaVersion {
		t.Errorf("after Migrate the store knows version %d, want %d", v, runclaim.LatestSchemaVersion)
	}
	rec.take()
	cycle("claim after Migrate")
	if n := checkForm(t, rec, store, claimForms[len(claimForms)-1]); n != 1 {
		t.Errorf("%d claims recorded after Migrate, want 1", n)
	}
}

// callsOf counts the calls of store's claim function among queries.
func callsOf(queries []string, store *runclaim.PostgresStore) int {
	n := 0
	for _, q := range queries {
		if strings.Contains(q, runclaim.ClaimFuncName(store)) {
			n++
		}
	}
	return n
}

// TestClaimFunctionDefinition: the function is SECURITY INVOKER (it runs
// with the caller's privileges and grants none of its own), VOLATILE (a
// fresh snapshot per statement), PL/pgSQL, with no settings of its own
// (from schema version 6 every name in its body is schema-qualified
// instead of a SET search_path; TestClaimFunctionHostileSearchPath), in
// the table's schema under the table's name with "_claim".
func TestClaimFunctionDefinition(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	store := migratedStore(t, db.Pool, runclaim.WithTable("Sch ema", `runs "x"`))
	var (
		secdef   bool
		volatile string
		lang     string
		config   []string
		named    bool
	)
	// named: the name and argument types docs/least-privilege.md's GRANT and the Down
	// step's DROP use name this function.
	err := db.Pool.QueryRow(t.Context(), `SELECT p.prosecdef, p.provolatile::text, l.lanname, coalesce(p.proconfig, '{}'),
	pg_catalog.to_regprocedure($3) IS NOT DISTINCT FROM p.oid
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.proname = $2`, "Sch ema", `runs "x"_claim`, runclaim.ClaimFuncName(store)+runclaim.ClaimFuncArgs).Scan(&secdef, &volatile, &lang, &config, &named)
	if err != nil {
		t.Fatalf("find the claim function of %s: %v", store.Table(), err)
	}
	want := []any{false, "v", "plpgsql", []string{}, true}
	if diff := cmp.Diff(want, []any{secdef, volatile, lang, config, named}); diff != "" {
		t.Errorf("claim function (security definer, volatility, language, settings, named by its signature) (-want +got):\n%s", diff)
	}
	if got, want := runclaim.ClaimFuncName(store)+runclaim.ClaimFuncArgs, fmt.Sprintf(`"Sch ema"."runs ""x""_claim"%s`, runclaim.ClaimFuncArgs); got != want {
		t.Errorf("function name %s, want %s", got, want)
	}
}

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

// This file tests the claim function (lock.go):
// its answers in every case a claim meets, its definition, and the schema
// versions a store claims on (the current one and the one before it).

// claimForm is a form of the claim: the schema version a store is told its
// table has, the current one (the claim function of sql/claim.sql) or the
// one before it (that version's functions, which a table at the current
// version keeps for the replicas of the release before). Tests range over
// claimForms, on one current table, so that both bodies answer alike.
type claimForm struct {
	name    string
	version int
}

var claimForms = []claimForm{{"current", runclaim.LatestSchemaVersion}, {"previous", runclaim.OldestClaimVersion}}

// formStore returns a store on pool that takes its table to be at f's
// version.
func formStore(t testing.TB, pool *pgxpool.Pool, f claimForm, opts ...runclaim.PostgresOption) *runclaim.PostgresStore {
	t.Helper()
	s, err := runclaim.NewPostgresStore(pool, opts...)
	if err != nil {
		t.Fatalf("NewPostgresStore: %v", err)
	}
	runclaim.SetClaimSchema(s, f.version)
	return s
}

// checkForm fails the test if a recorded claim was sent as anything but
// one call of the claim function, and returns how many calls there were.
func checkForm(t *testing.T, rec *sqlRecorder, store *runclaim.PostgresStore, f claimForm) int {
	t.Helper()
	batches, queries := rec.take()
	n := callsOf(queries, store)
	for _, b := range batches {
		all := strings.Join(b, "\n")
		switch {
		case isClaimCall(all, store):
			n++
		case strings.Contains(all, "pg_try_advisory_xact_lock"):
			t.Errorf("%s form: a claim was sent as a batch: %q", f.name, b)
		}
	}
	return n
}

// claimOutcome is what a claim answered, with the times relative to the
// setup's runs so that forms run on their own sources compare.
type claimOutcome struct {
	Won        bool
	Reason     string // "already running", "too soon", or the error
	Holder     string // the holder's owner, "" if none was named
	HolderRun  string // which of the setup's runs is the holder: "old", "" if none
	RetryAfter string // "holder lease", "interval", "" (zero) or "other"
	Rows       map[string]int
}

// TestClaimFormsAgree: every form of the claim (claimForms) gives the
// answer each case wants, and leaves the rows it wants, in every case a
// claim can meet: a free source,
// a live holder, a lapsed holder (taken over, or left alone while another
// transaction holds its row), a claim too soon by the claimer's interval or
// by the one recorded with the last run (with a lapsed holder too: too soon
// writes nothing), and the advisory lock held by another claim, with and
// without a holder.
func TestClaimFormsAgree(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
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
				if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", runclaim.AdvisoryKeyOf(runclaim.DefaultNamespace, src)); err != nil {
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

// TestClaimSchemaVersions: a store claims on the current schema version
// and on the one before it, in one call of the claim function, and
// refuses a table older than that with an error that names Migrate and
// the CLI's migrate, having written nothing: for a single claim, a claim
// that names keys, and a ClaimMany. A step undone under the store is
// met the same way at its next claim.
func TestClaimSchemaVersions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	pool, rec := recordingPool(t, db)
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, store)
	works := func(what string) {
		t.Helper()
		// The first claim on a table whose version the store has not read
		// yet may pay a failed call of the current function, which writes
		// nothing; every claim after it is one call.
		for i := range 2 {
			rec.take()
			if err := c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
				t.Fatalf("%s: Do: %v", what, err)
			}
			if n := checkForm(t, rec, store, claimForms[0]); n != 1 && i == 1 {
				t.Errorf("%s: %d calls of the claim function, want 1", what, n)
			}
		}
		if err := c.Do(ctx, "keyed", func(context.Context, *runclaim.Run) error { return nil }, runclaim.WithKeys("k")); err != nil {
			t.Fatalf("%s: Do with a key: %v", what, err)
		}
		for _, opts := range [][]runclaim.ClaimOption{nil, {runclaim.WithKeys("k")}} {
			if err := c.DoMany(ctx, []string{"m1", "m2"}, func(context.Context, *runclaim.Run) error { return nil }, opts...); err != nil {
				t.Fatalf("%s: DoMany %v: %v", what, opts, err)
			}
		}
	}
	refused := func(what string, have int) {
		t.Helper()
		before := readState(t, db.Pool, store.Table())
		for _, claim := range []func() error{
			func() error { _, err := c.Claim(ctx, "src"); return err },
			func() error { _, err := c.Claim(ctx, "keyed", runclaim.WithKeys("k")); return err },
			func() error { _, err := c.ClaimMany(ctx, []string{"m1", "m2"}); return err },
			func() error { _, err := c.ClaimMany(ctx, []string{"m1", "m2"}, runclaim.WithKeys("k")); return err },
		} {
			err := claim()
			if err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
				t.Fatalf("%s: claim on a version %d table: %v, want the error that names Migrate", what, have, err)
			}
			for _, want := range []string{"Migrate", "runclaim migrate", fmt.Sprintf("schema version %d", have), fmt.Sprint(runclaim.OldestClaimVersion)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: error %q does not say %q", what, err, want)
				}
			}
		}
		if after := readState(t, db.Pool, store.Table()); after != before {
			t.Errorf("%s: refused claims changed the table from %+v to %+v", what, before, after)
		}
	}

	migrateTo(t, db.Pool, runclaim.OldestClaimVersion-1)
	refused("two versions old", runclaim.OldestClaimVersion-1)
	migrateTo(t, db.Pool, runclaim.OldestClaimVersion)
	works("one version old")
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if v := runclaim.ClaimSchema(store); v != runclaim.LatestSchemaVersion {
		t.Errorf("after Migrate the store knows version %d, want %d", v, runclaim.LatestSchemaVersion)
	}
	works("current")
	// Steps undone under the store, which knows the current version.
	migrateTo(t, db.Pool, runclaim.OldestClaimVersion)
	works("the current step undone")
	// The store, which now claims in the form of the version before, and
	// a new one (a replica started now) refuse a table two steps back.
	migrateTo(t, db.Pool, runclaim.OldestClaimVersion-1)
	refused("two steps undone", runclaim.OldestClaimVersion-1)
	if store, err = runclaim.NewPostgresStore(pool); err != nil {
		t.Fatal(err)
	}
	c = newClaimer(t, store)
	refused("two steps undone, a new store", runclaim.OldestClaimVersion-1)
}

// callsOf counts the calls of store's claim functions among queries.
func callsOf(queries []string, store *runclaim.PostgresStore) int {
	n := 0
	for _, q := range queries {
		if isClaimCall(q, store) {
			n++
		}
	}
	return n
}

// isClaimCall reports whether q calls one of store's claim functions: the
// current version's, the version before's, or an overload of older ones.
func isClaimCall(q string, store *runclaim.PostgresStore) bool {
	return strings.Contains(q, runclaim.ClaimFuncName(store)) || strings.Contains(q, runclaim.ClaimBodyName(store)) ||
		strings.Contains(q, runclaim.ClaimPrevName(store))
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
	// The functions a claim calls: the current version's, and the
	// version before's.
	for _, fn := range []struct{ name, signature string }{
		{`runs "x"_claim13`, runclaim.ClaimBodyName(store) + runclaim.ClaimBodyArgs},
		{`runs "x"_claim12`, runclaim.ClaimPrevName(store) + runclaim.ClaimPrevArgs},
	} {
		var (
			secdef   bool
			volatile string
			lang     string
			config   []string
			named    bool
		)
		// named: the name and argument types docs/least-privilege.md's
		// GRANT and the Down step's DROP use name this function.
		err := db.Pool.QueryRow(t.Context(), `SELECT p.prosecdef, p.provolatile::text, l.lanname, coalesce(p.proconfig, '{}'),
	pg_catalog.to_regprocedure($3) IS NOT DISTINCT FROM p.oid
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.proname = $2 AND p.oid = pg_catalog.to_regprocedure($3)`, "Sch ema", fn.name, fn.signature).Scan(&secdef, &volatile, &lang, &config, &named)
		if err != nil {
			t.Fatalf("find the claim function %s: %v", fn.signature, err)
		}
		want := []any{false, "v", "plpgsql", []string{}, true}
		if diff := cmp.Diff(want, []any{secdef, volatile, lang, config, named}); diff != "" {
			t.Errorf("claim function %s (security definer, volatility, language, settings, named by its signature) (-want +got):\n%s", fn.signature, diff)
		}
	}
	if got, want := runclaim.ClaimFuncName(store)+runclaim.ClaimFuncArgs, fmt.Sprintf(`"Sch ema"."runs ""x""_claim"%s`, runclaim.ClaimFuncArgs); got != want {
		t.Errorf("function name %s, want %s", got, want)
	}
}

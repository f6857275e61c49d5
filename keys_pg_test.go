package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// TestMigrateRepairsKeys: a table whose comment says version 8 but that
// lacks one of version 8's objects (the overload with keys, either table,
// either index, the column) is at version 7 for SchemaVersion, and Migrate
// puts it back; a claim naming a key with a limit is then limited.
func TestMigrateRepairsKeys(t *testing.T) {
	t.Parallel()
	for name, damage := range map[string]string{
		"function": `DROP FUNCTION "public"."runclaim_runs_claim"(bigint, text, text, bigint, bigint, bigint, timestamptz, text[], bigint[], text[], integer[])`,
		"keys":     `DROP TABLE "public"."runclaim_runs_keys"`,
		"starts":   `DROP TABLE "public"."runclaim_runs_starts"`,
		"index":    `DROP INDEX "public"."runclaim_runs_keyed"`,
		"keyset":   `DROP INDEX "public"."runclaim_runs_keyset"`,
		"column":   `ALTER TABLE "public"."runclaim_runs" DROP COLUMN keys`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.New(t)
			fresh := repairDamaged(t, db, "the "+name+" missing", func(*runclaim.PostgresStore) string { return damage }, 7)
			if err := fresh.SetLimit(ctx, "site", runclaim.Limit{MaxRunning: 1}); err != nil {
				t.Fatal(err)
			}
			c := newClaimer(t, fresh)
			run, err := c.Claim(ctx, "a", runclaim.WithKeys("site"))
			if err != nil {
				t.Fatal(err)
			}
			defer run.Finish(ctx, nil)
			if _, err := c.Claim(ctx, "b", runclaim.WithKeys("site")); !errors.Is(err, runclaim.ErrLimited) {
				t.Errorf("claim over the limit after the repair: %v, want ErrLimited", err)
			}
		})
	}
}

// TestKeysOnOlderTable: on a table at version 7, a claim, with keys or
// without (the store claims on the two newest versions only), and a
// Limiter call fail with an error (not a skip) that says to run Migrate.
func TestKeysOnOlderTable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	steps := store.Migrations()
	for i := len(steps) - 1; i >= 7; i-- { // the newest, ..., then 8
		if _, err := db.Pool.Exec(ctx, steps[i].Down); err != nil {
			t.Fatal(err)
		}
	}
	fresh, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, fresh)
	_, err = c.Claim(ctx, "plain")
	if err == nil || errors.Is(err, runclaim.ErrNotClaimed) || !strings.Contains(err.Error(), "Migrate") {
		t.Errorf("a claim without keys on a version 7 table: %v; want an error that says to migrate", err)
	}
	_, err = c.Claim(ctx, "keyed", runclaim.WithKeys("site"))
	if err == nil || errors.Is(err, runclaim.ErrNotClaimed) || !strings.Contains(err.Error(), "Migrate") {
		t.Errorf("a claim with keys on a version 7 table: %v; want an error that says to migrate", err)
	}
	_, err = c.ClaimMany(ctx, []string{"k1", "k2"}, runclaim.WithKeys("site"))
	if err == nil || errors.Is(err, runclaim.ErrNotClaimed) || !strings.Contains(err.Error(), "Migrate") {
		t.Errorf("ClaimMany with keys on a version 7 table: %v; want an error that says to migrate", err)
	}
	if err := fresh.SetLimit(ctx, "site", runclaim.Limit{MaxRunning: 1}); err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Errorf("SetLimit on a version 7 table: %v; want an error that says to migrate", err)
	}
}

// TestKeyStress: four replicas, each with its own pool, claim forty
// sources of one key with MaxRunning 3 as fast as they can, for a while;
// each winner holds its run a moment and finishes it. On the Go side, a
// counter of the runs held never passes 3; in SQL, no run of the key
// started while 3 others of it were running (by started_at and
// finished_at, the database's clock); and the key was full most of the
// time, so that the check meant something.
func TestKeyStress(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	var stores []*runclaim.PostgresStore
	for range 4 {
		s, err := runclaim.NewPostgresStore(db.NewPool(t, nil))
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	keyStress(t, db, stores, nil, "site:stress", 3)
}

// Rule (G17): a key binds every store on the table, whatever its
// namespace. Two services that share a table (and so a key's limit row,
// its runs and its starts) but not their sources use two namespaces;
// their claims of one key still never exceed MaxRunning, in Go and in
// SQL. And during a rolling deploy a replica of the previous release,
// which locks a key by namespace only, still excludes a new one of its
// namespace.
func TestKeyAcrossNamespaces(t *testing.T) {
	t.Parallel()
	store := func(t *testing.T, db *pgtest.DB, ns string, previous bool) *runclaim.PostgresStore {
		s, err := runclaim.NewPostgresStore(db.NewPool(t, nil), runclaim.WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		if previous {
			runclaim.SetPreviousKeyLocks(s)
		}
		return s
	}
	t.Run("two namespaces", func(t *testing.T) {
		t.Parallel()
		db := migratedDB(t)
		stores := []*runclaim.PostgresStore{store(t, db, "svc-a", false), store(t, db, "svc-a", false), store(t, db, "svc-b", false), store(t, db, "svc-b", false)}
		// Each service claims its own sources: a namespace is for
		// services that share no source.
		keyStress(t, db, stores, []string{"a/", "a/", "b/", "b/"}, "site:shared", 2)
	})
	t.Run("previous release beside this one", func(t *testing.T) {
		t.Parallel()
		db := migratedDB(t)
		stores := []*runclaim.PostgresStore{store(t, db, "svc", true), store(t, db, "svc", true), store(t, db, "svc", false), store(t, db, "svc", false)}
		keyStress(t, db, stores, nil, "site:deploy", 2)
	})
	t.Run("starts in two namespaces", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		db := migratedDB(t)
		a, b := store(t, db, "svc-a", false), store(t, db, "svc-b", false)
		const most = 5
		if err := a.SetLimit(ctx, "site:starts", runclaim.Limit{MaxStarts: most, Per: time.Hour}); err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int64
		var wg sync.WaitGroup
		for i := range 4 * most {
			s := a
			if i%2 == 1 {
				s = b
			}
			c := newClaimer(t, s, runclaim.WithOwner(fmt.Sprintf("w%d", i)))
			wg.Go(func() {
				run, err := c.Claim(ctx, fmt.Sprintf("src-%d", i), runclaim.WithKeys("site:starts"))
				switch {
				case err == nil:
					wins.Add(1)
					if err := run.Finish(ctx, nil); err != nil {
						t.Error(err)
					}
				case errors.Is(err, runclaim.ErrLimited), pgCode(err) == "55P03":
				default:
					t.Errorf("claim: %v", err)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n > most {
			t.Errorf("%d starts of a key allowed %d an hour, from two namespaces", n, most)
		}
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM runclaim_runs WHERE 'site:starts' = ANY (keys)`).Scan(&n); err != nil || n > most {
			t.Errorf("in SQL, %d runs of a key allowed %d starts an hour (%v)", n, most, err)
		}
	})
}

// keyStress has two claimers per store claim random sources of 40 naming
// key, which allows limit running runs, for three seconds (longer on a
// starved machine, until there was contention), and checks in
// Go and in SQL that no more than limit ran at once. The sources of
// store i start with prefixes[i], if given.
func keyStress(t *testing.T, db *pgtest.DB, stores []*runclaim.PostgresStore, prefixes []string, key string, limit int64) {
	t.Helper()
	ctx := t.Context()
	const sources = 40
	if err := stores[0].SetLimit(ctx, key, runclaim.Limit{MaxRunning: int(limit)}); err != nil {
		t.Fatal(err)
	}
	var held, most, wins, limited, timeouts atomic.Int64
	// Three seconds, and on a machine so busy that they saw too little
	// contention to mean anything, on until they do, up to five times as
	// long: a starved machine overlaps fewer claims, not none.
	deadline := time.Now().Add(sharedtest.Scale(t, 3*time.Second))
	hardDeadline := time.Now().Add(sharedtest.Scale(t, 15*time.Second))
	enough := func() bool { return wins.Load() >= 10 && limited.Load() >= 10 }
	going := func() bool {
		now := time.Now()
		return ctx.Err() == nil && (now.Before(deadline) || !enough() && now.Before(hardDeadline))
	}
	var wg sync.WaitGroup
	for r, s := range stores {
		c := newClaimer(t, s, runclaim.WithOwner(fmt.Sprintf("replica-%d", r)))
		prefix := ""
		if prefixes != nil {
			prefix = prefixes[r]
		}
		for w := range 2 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(r), uint64(w)))
				for going() {
					src := fmt.Sprintf("%ssrc-%02d", prefix, rng.IntN(sources))
					run, err := c.Claim(ctx, src, runclaim.WithKeys(key))
					switch {
					case errors.Is(err, runclaim.ErrLimited):
						limited.Add(1)
						continue
					case errors.Is(err, runclaim.ErrAlreadyRunning):
						continue
					case pgCode(err) == "55P03":
						// A wait for a table's lock (the runs table's
						// extension, say) ran out: a machine this busy
						// can keep its holder off the CPU for longer than
						// the claim's bound (1 s). The claim changed
						// nothing; a few are allowed below. (A wait for
						// the key's lock that runs out is a skip,
						// ErrLimited.)
						timeouts.Add(1)
						continue
					case err != nil:
						t.Errorf("claim %s: %v", src, err)
						return
					}
					n := held.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					wins.Add(1)
					time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
					held.Add(-1)
					if err := run.Finish(ctx, nil); err != nil {
						t.Errorf("finish: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if m := most.Load(); m > limit {
		t.Errorf("the Go side saw %d runs of the key held at once, more than MaxRunning %d", m, limit)
	}
	var overlap int64
	err := db.Pool.QueryRow(ctx, `
SELECT coalesce(max(n), 0) FROM (
	SELECT (SELECT count(*) FROM runclaim_runs AS o
	         WHERE $1 = ANY (o.keys) AND o.started_at <= r.started_at AND r.started_at < coalesce(o.finished_at, 'infinity')) AS n
	  FROM runclaim_runs AS r WHERE $1 = ANY (r.keys)) AS x`, key).Scan(&overlap)
	if err != nil {
		t.Fatal(err)
	}
	if overlap > limit {
		t.Errorf("in SQL, a run of the key started while %d of its runs (itself included) were running, more than MaxRunning %d", overlap, limit)
	}
	t.Logf("%d wins, %d limited skips, %d lock timeouts, at most %d held on the Go side, %d running at once in SQL", wins.Load(), limited.Load(), timeouts.Load(), most.Load(), overlap)
	if n, all := timeouts.Load(), wins.Load()+limited.Load()+timeouts.Load(); n*50 > all {
		t.Errorf("%d of %d claims timed out on the key's lock (SQLSTATE 55P03)", n, all)
	}
	if !enough() {
		t.Errorf("too little contention to mean anything: %d wins, %d limited skips", wins.Load(), limited.Load())
	}
}

// keysOpsGrants are the statements docs/least-privilege.md gives an
// operator role that sets limits, with %[1]s the schema, %[2]s the keys
// table (quoted) and %[3]s the role.
var keysOpsGrants = []string{
	`GRANT USAGE ON SCHEMA %[1]s TO %[3]s`,
	`GRANT SELECT, INSERT, UPDATE ON %[1]s.%[2]s TO %[3]s`,
}

// TestKeyPrivileges: with docs/least-privilege.md's grants, the
// application role claims with keys (won, limited) and starts
// and ends cooldowns (Run.Cooldown on a 429), but cannot set or delete a
// limit: that fails with a wrapped 42501 that names the grants, and
// changes nothing. The operator role's grants let it set limits.
func TestKeyPrivileges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newPrivEnv(t)
	appStore := e.store(t, e.pool(t, e.app, nil))
	if err := appStore.SetLimit(ctx, "site", runclaim.Limit{MaxRunning: 1}); pgCode(err) != "42501" || !strings.Contains(err.Error(), "least-privilege") {
		t.Errorf("SetLimit by the application: %v, want a wrapped 42501 that names the grants", err)
	}
	if err := appStore.DeleteLimit(ctx, "site"); pgCode(err) != "42501" {
		t.Errorf("DeleteLimit by the application: %v, want a wrapped 42501", err)
	}
	sfx := randomSuffix(t)
	ops := role{"rc_kops_" + sfx, "s3cr3t-K0ps-" + sfx}
	admin(t, e.db, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", ops.name, ops.password))
	t.Cleanup(func() { dropRole(t, e.db, ops.name) })
	ownerPool := e.pool(t, e.owner, nil)
	for _, g := range keysOpsGrants {
		q := fmt.Sprintf(g, pgx.Identifier{e.schema}.Sanitize(), pgx.Identifier{runclaim.DefaultTable + "_keys"}.Sanitize(), ops.name)
		if _, err := ownerPool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	opsStore := e.store(t, e.pool(t, ops, nil))
	if err := opsStore.SetLimit(ctx, "site", runclaim.Limit{MaxRunning: 1, MaxStarts: 10, Per: time.Hour}); err != nil {
		t.Fatalf("SetLimit by the operator role: %v", err)
	}
	checkAppKeys(t, appStore)
	if err := opsStore.DeleteLimit(ctx, "site"); err != nil {
		t.Errorf("DeleteLimit by the operator role: %v", err)
	}
}

// checkAppKeys claims with keys through s, as the application: a win, a
// limited skip, a cooldown from a run and its end. The key "site" must have MaxRunning 1.
func checkAppKeys(t *testing.T, s *runclaim.PostgresStore) {
	t.Helper()
	ctx := t.Context()
	c := newClaimer(t, s)
	run, err := c.Claim(ctx, "a", runclaim.WithKeys("site"))
	if err != nil {
		t.Fatalf("claim with keys by the application: %v", err)
	}
	if _, err := c.Claim(ctx, "b", runclaim.WithKeys("site")); !errors.Is(err, runclaim.ErrLimited) {
		t.Errorf("claim over the limit by the application: %v, want ErrLimited", err)
	}
	if err := run.Cooldown(ctx, "site", time.Hour, "HTTP 429"); err != nil {
		t.Errorf("Run.Cooldown by the application: %v", err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var nc *runclaim.NotClaimedError
	if _, err := c.Claim(ctx, "b", runclaim.WithKeys("site")); !errors.As(err, &nc) || nc.Note != "HTTP 429" {
		t.Errorf("claim of a cooling key by the application: %v, want ErrLimited with the note", err)
	}
	if err := s.EndCooldown(ctx, "site"); err != nil {
		t.Errorf("EndCooldown by the application: %v", err)
	}
	if err := c.Do(ctx, "b", func(context.Context, *runclaim.Run) error { return nil }, runclaim.WithKeys("site")); err != nil {
		t.Errorf("claim with keys after the cooldown ended: %v", err)
	}
}

// TestKeyPrivilegesAfterUpgrade: an application role granted only what
// claims needed before version 8 claims with keys, and cools keys, once
// the owner migrates to it: the step grants it what claims need on the
// new tables.
func TestKeyPrivilegesAfterUpgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newPrivEnv(t)
	ownerPool := e.pool(t, e.owner, nil)
	ownerStore := e.store(t, ownerPool)
	steps := ownerStore.Migrations()
	// Back to version 7: every step from version 8 on undone, newest first.
	for i := len(steps) - 1; steps[i].Version >= 8; i-- {
		if _, err := ownerPool.Exec(ctx, steps[i].Down); err != nil {
			t.Fatalf("step %d down: %v", steps[i].Version, err)
		}
	}
	if v, _, err := ownerStore.SchemaVersion(ctx); err != nil || v != 7 {
		t.Fatalf("SchemaVersion after the steps down: %d, %v; want 7", v, err)
	}
	if err := ownerStore.Migrate(ctx); err != nil {
		t.Fatalf("Migrate as the owner: %v", err)
	}
	if err := ownerStore.SetLimit(ctx, "site", runclaim.Limit{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	checkAppKeys(t, e.store(t, e.pool(t, e.app, nil)))
}

// TestKeyRoomIsPerTransaction: what a claim learns of a key's room is
// kept for the later calls of its own transaction only (a ClaimMany's):
// two replicas, each on one connection, take turns claiming sources of a
// key with MaxRunning 3, and the claim after the third win is limited
// whichever connection's earlier claims saw more room.
func TestKeyRoomIsPerTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	var cs []*runclaim.Claimer
	for i := range 2 {
		s, err := runclaim.NewPostgresStore(db.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 }))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := s.SetLimit(ctx, "site", runclaim.Limit{MaxRunning: 3, MaxStarts: 3, Per: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		cs = append(cs, newClaimer(t, s))
	}
	for i, c := range []int{0, 1, 1} {
		if _, err := cs[c].Claim(ctx, fmt.Sprintf("src-%d", i), runclaim.WithKeys("site")); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	if _, err := cs[0].Claim(ctx, "src-3", runclaim.WithKeys("site")); !errors.Is(err, runclaim.ErrLimited) {
		t.Errorf("fourth claim of a key with MaxRunning 3, on the connection of the first: %v, want ErrLimited", err)
	}
}

// TestKeys: Keys reports each key with a limit or a cooldown in force,
// with its live runs, its starts in the window and its cooldown.
func TestKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := migratedStore(t, pgtest.New(t).Pool)
	if err := store.SetLimit(ctx, "site:a", runclaim.Limit{MaxRunning: 2, MaxStarts: 5, Per: time.Hour}); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if err := store.Cooldown(ctx, "site:b", until, "HTTP 429"); err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, store)
	run, err := c.Claim(ctx, "a1", runclaim.WithKeys("site:a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "a2", func(context.Context, *runclaim.Run) error { return nil }, runclaim.WithKeys("site:a")); err != nil {
		t.Fatal(err)
	}
	keys, now, err := store.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if now.IsZero() || len(keys) != 2 {
		t.Fatalf("Keys = %+v at %v, want 2 keys", keys, now)
	}
	a, b := keys[0], keys[1]
	if a.Key != "site:a" || a.Limit != (runclaim.Limit{MaxRunning: 2, MaxStarts: 5, Per: time.Hour}) || a.Running != 1 || a.Starts != 2 || !a.CoolingUntil.IsZero() {
		t.Errorf("site:a: %+v, want its limit, 1 running, 2 starts, no cooldown", a)
	}
	if b.Key != "site:b" || !b.CoolingUntil.Equal(until) || b.Note != "HTTP 429" || b.Limit != (runclaim.Limit{}) {
		t.Errorf("site:b: %+v, want the cooldown until %v with its note", b, until)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// TestKeysTruncated: with more than MaxKeyStates keys that have a limit
// or a cooldown, Keys returns the first MaxKeyStates by name and the clock,
// with an error matching ErrKeysTruncated; with MaxKeyStates, all of them
// and no error.
func TestKeysTruncated(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO public.runclaim_runs_keys (key, max_running)
SELECT 'k:' || lpad(i::text, 5, '0'), 1 FROM generate_series(1, $1) AS i`, runclaim.MaxKeyStates+1); err != nil {
		t.Fatal(err)
	}
	keys, now, err := store.Keys(ctx)
	if !errors.Is(err, runclaim.ErrKeysTruncated) || len(keys) != runclaim.MaxKeyStates || now.IsZero() {
		t.Fatalf("Keys of %d keys = %d keys at %v, %v; want %d and ErrKeysTruncated", runclaim.MaxKeyStates+1, len(keys), now, err, runclaim.MaxKeyStates)
	}
	for i, k := range keys {
		if want := fmt.Sprintf("k:%05d", i+1); k.Key != want || k.Limit.MaxRunning != 1 {
			t.Fatalf("key %d: %+v, want %s with its limit", i, k, want)
		}
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM public.runclaim_runs_keys WHERE key = $1`, fmt.Sprintf("k:%05d", runclaim.MaxKeyStates+1)); err != nil {
		t.Fatal(err)
	}
	if keys, _, err := store.Keys(ctx); err != nil || len(keys) != runclaim.MaxKeyStates {
		t.Errorf("Keys of %d keys = %d keys, %v; want all, no error", runclaim.MaxKeyStates, len(keys), err)
	}
}

// TestNoKeySamePath: a claim that names no key sends one statement, the
// claim function (which returns the state of a win); a ClaimMany that
// names none sends one statement too, one call of the same function per
// source, each returning its win's state, without the keys' arguments; a
// claim that names one sends one statement too, the function with the
// keys.
func TestNoKeySamePath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	rec := &sqlRecorder{}
	store, err := runclaim.NewPostgresStore(db.NewPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = rec }))
	if err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, store)
	// The store's one probe of the advisory locks, which its first claim
	// would make, made first.
	if ok, err := store.ProveExclusion(ctx); !ok || err != nil {
		t.Fatalf("ProveExclusion = %v, %v", ok, err)
	}
	rec.take()
	run, err := c.Claim(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ClaimMany(ctx, []string{"m1", "m2"}); err != nil {
		t.Fatal(err)
	}
	batches, queries := rec.take()
	if len(batches) != 0 || len(queries) != 2 {
		t.Fatalf("a claim and a ClaimMany naming no key sent %d batches and %d queries, want 0 and 2: %q", len(batches), len(queries), queries)
	}
	if !strings.Contains(queries[0], "$9::bigint[], true, NULL, NULL)") {
		t.Errorf("a claim naming no key sent %q, not the claim function with a state", queries[0])
	}
	if q := queries[1]; !strings.Contains(q, "s.tick, NULL, NULL, true, NULL, NULL)") || strings.Contains(q, "$9::") || strings.Contains(q, "_cursors") {
		t.Errorf("a ClaimMany naming no key sent %q, not the calls without keys that return the states", q)
	}
	// A ClaimMany that wins nothing sends its claim's statement only.
	if runs, err := c.ClaimMany(ctx, []string{"m1", "m2"}); err != nil || len(runs) != 0 {
		t.Fatalf("ClaimMany of held sources: %d runs, %v", len(runs), err)
	}
	if batches, queries := rec.take(); len(batches) != 0 || len(queries) != 1 {
		t.Errorf("a ClaimMany that won nothing sent %d batches and %d queries, want 0 and 1: %q", len(batches), len(queries), queries)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	rec.take()
	if _, err := c.Claim(ctx, "keyed", runclaim.WithKeys("site")); err != nil {
		t.Fatal(err)
	}
	batches, queries = rec.take()
	if len(batches) != 0 || len(queries) != 1 || !strings.Contains(queries[0], "$9::bigint[], true, NULL, NULL)") {
		t.Errorf("a claim naming a key sent %d batches and %q, want one call of the overload with keys", len(batches), queries)
	}
}

// TestOldStartsPruned: the starts of a key older than the longest window
// (MaxLimitPer) are deleted by a later win naming the key, one win in 64
// (those whose run ID is a multiple of 64), so that the table of starts
// stays bounded without costing every win a delete; the starts in the
// window stay.
func TestOldStartsPruned(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	store := benchStore(t, db.Pool)
	const key = "site:old"
	starts := `"public"."runclaim_runs_starts"`
	if _, err := db.Pool.Exec(ctx, `INSERT INTO `+starts+` (key, started_at, run_id)
VALUES ($1, pg_catalog.clock_timestamp() - $2::bigint * interval '1 microsecond', -1)`, key, (runclaim.MaxLimitPer + time.Hour).Microseconds()); err != nil {
		t.Fatal(err)
	}
	count := func(q string) int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+starts+` WHERE key = $1 AND `+q, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	c := benchClaimer(t, store, "prune")
	var won []int64
	for i := 0; ; i++ {
		if i > 200 {
			t.Fatalf("no win with a run ID that is a multiple of 64 in %d wins: %v", i, won)
		}
		run, err := c.Claim(ctx, fmt.Sprintf("src/%d", i), runclaim.WithKeys(key))
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		mustFinish(t, run)
		won = append(won, run.ID)
		if run.ID%64 == 0 {
			break
		}
		if n := count("run_id = -1"); n != 1 {
			t.Fatalf("after run %d: %d old starts, want 1 (only a run whose ID is a multiple of 64 deletes them)", run.ID, n)
		}
	}
	if n := count("run_id = -1"); n != 0 {
		t.Errorf("after run %d: the start older than MaxLimitPer is still there", won[len(won)-1])
	}
	if n := count("run_id > 0"); n != len(won) {
		t.Errorf("%d starts of the %d wins in the window, want all", n, len(won))
	}
}

// Rule (G17): a claim that cannot get a key's lock within its bound (a
// claim of the key that holds it longer, or any session that holds it) is
// a skip, ErrLimited with the key named and RetryAfter now, never an
// error; a ClaimMany naming the key skips each of its sources alike. The
// claim changed nothing.
func TestKeyLockBusyIsSkip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	if err := store.SetLimit(ctx, "site:busy", runclaim.Limit{MaxRunning: 5}); err != nil {
		t.Fatal(err)
	}
	conn, err := db.NewPool(t, nil).Acquire(ctx) // a pool of its own: the store's keeps every connection
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	key := runclaim.TableKeyLockOf(store.Table(), "site:busy")
	if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), `SELECT pg_catalog.pg_advisory_unlock($1)`, key)
	before := time.Now()
	_, err = store.Claim(ctx, runclaim.ClaimRequest{Source: "busy/a", Owner: "o", Lease: time.Minute, Keys: []string{"site:busy"}})
	var nc *runclaim.NotClaimedError
	if !errors.Is(err, runclaim.ErrLimited) || !errors.As(err, &nc) || nc.Key != "site:busy" || nc.RetryAfter.Before(before) {
		t.Errorf("claim of a key whose lock is held: %v; want ErrLimited naming the key, RetryAfter now", err)
	}
	res, err := store.ClaimMany(ctx, []runclaim.ClaimRequest{
		{Source: "busy/b", Owner: "o", Lease: time.Minute, Keys: []string{"site:busy"}},
		{Source: "busy/c", Owner: "o", Lease: time.Minute, Keys: []string{"site:busy"}},
	})
	if err != nil || len(res) != 2 {
		t.Fatalf("ClaimMany of a key whose lock is held: %v, %v; want a skip of each source", res, err)
	}
	for _, r := range res {
		if !errors.Is(r.Err, runclaim.ErrLimited) || !errors.As(r.Err, &nc) || nc.Key != "site:busy" {
			t.Errorf("ClaimMany of a key whose lock is held: %+v; want ErrLimited naming the key", r)
		}
	}
	if runs, _, err := store.Running(ctx, ""); err != nil || len(runs) != 0 {
		t.Errorf("after the skips: %d running runs, %v; want none", len(runs), err)
	}
}

// TestKeyStartsNumberedWithoutGaps: a claim finds a key's MaxStarts-th
// newest start by its number (schema version 10), so a start taken back
// from inside the numbers must close its gap, or a claim would find no
// start where one is owed and start one too many. With MaxStarts 3 per
// hour: x, a and b win, a is taken back (Unclaim), c wins, and d must be
// limited, by a, c and x. Then many claimers win, take back and finish
// claims of one key at once; every key's numbers are 1 to its count of
// starts at the end, and the key holds exactly MaxStarts starts. The
// table's key lock in SQL, which the renumbering takes, is TableKeyLock.
func TestKeyStartsNumberedWithoutGaps(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	const key = "site:numbered"
	if err := store.SetLimit(ctx, key, runclaim.Limit{MaxStarts: 3, Per: time.Hour}); err != nil {
		t.Fatal(err)
	}
	claim := func(source string) (runclaim.RunInfo, error) {
		return store.Claim(ctx, runclaim.ClaimRequest{Source: source, Owner: "t", Lease: time.Minute, Keys: []string{key}})
	}
	for _, src := range []string{"x", "a", "b"} {
		if _, err := claim(src); err != nil {
			t.Fatalf("claim of %s: %v", src, err)
		}
	}
	a, err := claim("a")
	if !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("claim of a held: %v (%v)", err, a)
	}
	var aRun runclaim.RunInfo
	if err := db.Pool.QueryRow(ctx, `SELECT id, started_at FROM `+store.Table()+` WHERE source = 'a' AND status = 'running'`).Scan(&aRun.ID, &aRun.StartedAt); err != nil {
		t.Fatal(err)
	}
	aRun.Source = "a"
	if err := store.Unclaim(ctx, aRun); err != nil {
		t.Fatalf("Unclaim of a: %v", err)
	}
	if _, err := claim("c"); err != nil {
		t.Fatalf("claim of c after a was taken back: %v", err)
	}
	if info, err := claim("d"); !errors.Is(err, runclaim.ErrLimited) {
		t.Fatalf("claim of d with x, b and c started in the window: %v (%+v), want ErrLimited", err, info)
	}
	checkStartNumbers(t, db.Pool, store)

	// Many at once: win, then take back or finish.
	const busy, limit = "site:busy", 20
	if err := store.SetLimit(ctx, busy, runclaim.Limit{MaxStarts: limit, Per: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var won, unclaimed atomic.Int64
	for w := range 6 {
		wg.Go(func() {
			for i := range 40 {
				info, err := store.Claim(ctx, runclaim.ClaimRequest{Source: fmt.Sprintf("busy/%d/%d", w, i), Owner: "t", Lease: time.Minute, Keys: []string{busy}})
				switch {
				case errors.Is(err, runclaim.ErrLimited):
					continue
				case err != nil:
					t.Errorf("claim: %v", err)
					return
				}
				won.Add(1)
				if i%2 == 0 {
					if err := store.Unclaim(ctx, info); err != nil {
						t.Errorf("Unclaim: %v", err)
						return
					}
					unclaimed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	var n int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+runclaim.StartsTable(store)+` WHERE key = $1`, busy).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != limit || won.Load()-unclaimed.Load() != limit {
		t.Errorf("key %s: %d starts recorded, %d won and %d taken back; want %d starts kept", busy, n, won.Load(), unclaimed.Load(), limit)
	}
	checkStartNumbers(t, db.Pool, store)

	for _, k := range []string{key, "", "clé", "a\x01b", strings.Repeat("k", 300)} {
		var got int64
		if err := db.Pool.QueryRow(ctx, `SELECT `+pgx.Identifier{"public", runclaim.DefaultTable + "_keylock"}.Sanitize()+`($1)`, k).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := runclaim.TableKeyLockOf(store.Table(), k); got != want {
			t.Errorf("the key lock of %q in SQL is %d, TableKeyLock says %d", k, got, want)
		}
	}
}

// checkStartNumbers fails t unless each key's starts have as many numbers
// in a row as there are starts, once each (the lowest may be above 1: the
// oldest starts are deleted as they age, which leaves no gap).
func checkStartNumbers(t *testing.T, pool *pgxpool.Pool, store *runclaim.PostgresStore) {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT key, count(*), count(DISTINCT seq), min(seq), max(seq) FROM `+runclaim.StartsTable(store)+` GROUP BY key ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var n, distinct, lo, hi int64
		if err := rows.Scan(&key, &n, &distinct, &lo, &hi); err != nil {
			t.Fatal(err)
		}
		if distinct != n || hi-lo+1 != n {
			t.Errorf("key %q: %d starts numbered %d to %d, %d numbers distinct; want %d numbers in a row", key, n, lo, hi, distinct, n)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestBusyBatchKeyNoErrors: the scene of issue "Keys that bind every
// replica at any scale", item 2. A ClaimMany of MaxClaimMany sources, all
// naming a key whose window holds its MaxStarts (10,000) starts, holds the
// key's lock for as long as it decides; meanwhile three other replicas
// claim the key one source at a time. Every claim on either side is a
// skip for the key (ErrLimited), never an error: the batch decides the
// full key once, and a single claim that cannot get the key's lock in
// its bound is a skip too.
func TestBusyBatchKeyNoErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	const key, starts = "site:busy-batch", 10000
	if err := store.SetLimit(ctx, key, runclaim.Limit{MaxStarts: starts, Per: time.Hour}); err != nil {
		t.Fatal(err)
	}
	insertStarts(t, db.Pool, store, key, starts)
	sources := make([]string, runclaim.MaxClaimMany)
	for i := range sources {
		sources[i] = fmt.Sprintf("batch/%d", i)
	}
	batch := newClaimer(t, migratedStore(t, db.NewPool(t, nil)), runclaim.WithSourceKeys(func(string) []string { return []string{key} }))
	var (
		wg            sync.WaitGroup
		done          atomic.Bool
		singles, errs atomic.Int64
		mu            sync.Mutex
		firstErrs     []error
	)
	record := func(err error) {
		if errors.Is(err, runclaim.ErrLimited) {
			return
		}
		errs.Add(1)
		mu.Lock()
		if len(firstErrs) < 5 {
			firstErrs = append(firstErrs, err)
		}
		mu.Unlock()
	}
	for r := range 3 {
		c := newClaimer(t, migratedStore(t, db.NewPool(t, nil)), runclaim.WithSourceKeys(func(string) []string { return []string{key} }))
		wg.Go(func() {
			for i := 0; i < 2000 && !done.Load(); i++ {
				_, err := c.Claim(ctx, fmt.Sprintf("single/%d/%d", r, i))
				singles.Add(1)
				record(err)
			}
		})
	}
	for range 3 {
		start := time.Now()
		runs, err := batch.ClaimMany(ctx, sources)
		if err != nil {
			record(err)
		}
		if len(runs) != 0 {
			t.Errorf("the batch won %d runs of a full key", len(runs))
		}
		t.Logf("a batch of %d sources naming the full key took %v", len(sources), time.Since(start))
	}
	done.Store(true)
	wg.Wait()
	t.Logf("%d single claims beside the batches", singles.Load())
	if errs.Load() != 0 {
		t.Errorf("%d claims failed (want every one a skip for the key): %v", errs.Load(), firstErrs)
	}
	if singles.Load() == 0 {
		t.Errorf("no single claim ran beside the batches")
	}
}

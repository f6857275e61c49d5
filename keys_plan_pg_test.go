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

// TestKeyCountPlansUseBtree pins down how a claim counts a key's running
// runs, on every supported server version, in custom and generic plans:
// the runs naming the key alone through a plain index scan of the btree
// of running runs naming one key (runclaim_runs_keyed), never a bitmap
// scan, and those naming it with others through the GIN index. An index
// scan marks the entries of finished runs dead as it meets them, so the
// next count skips them; a bitmap scan, like every scan of a GIN index,
// visits them until the table is vacuumed, and a count cost more the more
// runs of the key had finished since (BENCHMARKS.md, Keys). The table
// holds finished runs of the key, analyzed. auto_explain, loaded in the
// test's sessions as in TestClaimFunctionPlansUseIndexes, reports the
// plans of the statements inside the claim function: a single claim's
// check of the key, a batch's check, and the operators' list of keys.
func TestKeyCountPlansUseBtree(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	store := benchStore(t, db.Pool)
	ctx := t.Context()
	const key = "site:plan"
	if err := store.SetLimit(ctx, key, runclaim.Limit{MaxRunning: 100_000}); err != nil {
		t.Fatal(err)
	}
	// Finished runs of the key, alone and with another, and an analyzed
	// table that knows them.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO `+store.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at, min_interval, keys)
SELECT 'old/' || i, 'succeeded', 'old', now(), now(), now(), now(), interval '0',
       CASE WHEN i % 10 = 0 THEN ARRAY[$1, 'other'] ELSE ARRAY[$1] END
FROM pg_catalog.generate_series(1, 5000) AS i`, key); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE "+store.Table()); err != nil {
		t.Fatal(err)
	}
	for i, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			testKeyCountPlans(t, db, store, mode, i, key)
		})
	}
}

// testKeyCountPlans is TestKeyCountPlansUseBtree in one plan cache mode; n
// makes the sources its own.
func testKeyCountPlans(t *testing.T, db *pgtest.DB, store *runclaim.PostgresStore, mode string, n int, key string) {
	ctx := t.Context()
	pool, plans := explainingPool(t, db, mode, false)
	pstore, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := benchClaimer(t, pstore, "plan")
	for i := range 3 {
		run, err := c.Claim(ctx, fmt.Sprintf("one/%d/%d", n, i), runclaim.WithKeys(key))
		if err != nil {
			t.Fatalf("Claim with a key: %v", err)
		}
		mustFinish(t, run)
	}
	batch := benchClaimer(t, pstore, "plan", runclaim.WithSourceKeys(func(string) []string { return []string{key} }))
	runs, err := batch.ClaimMany(ctx, []string{fmt.Sprintf("many/%d/a", n), fmt.Sprintf("many/%d/b", n)})
	if err != nil || len(runs) != 2 {
		t.Fatalf("ClaimMany with a key: %d runs, %v", len(runs), err)
	}
	for _, r := range runs {
		mustFinish(t, r)
	}
	if _, _, err := pstore.Keys(ctx); err != nil {
		t.Fatalf("Keys: %v", err)
	}

	table := runclaim.DefaultTable
	keyed := table + "_keyed"
	counts := 0
	reported := plans()
	for _, p := range reported {
		q := p.QueryText
		if !strings.Contains(q, "cardinality(r.keys)") {
			continue // not a count of a key's running runs
		}
		counts++
		byIndex := map[string][]string{}
		p.Plan.walk(func(n planNode) {
			if n.IndexName != "" {
				byIndex[n.IndexName] = append(byIndex[n.IndexName], n.NodeType)
			}
			if n.RelationName == table && n.NodeType == "Seq Scan" {
				t.Errorf("a sequential scan of %s in:\n%s\nplan: %s", table, q, p.JSON)
			}
		})
		if len(byIndex[keyed]) == 0 {
			t.Errorf("a count of a key that does not read %s (it reads %v):\n%s", keyed, byIndex, q)
		}
		for _, nt := range byIndex[keyed] {
			if nt != "Index Scan" && nt != "Index Only Scan" {
				t.Errorf("%s read by a %s, which leaves the entries of finished runs for the next count, in:\n%s\nplan: %s", keyed, nt, q, p.JSON)
			}
		}
	}
	// Each single claim's check, the batch's, and the list of keys.
	if counts < 5 {
		t.Errorf("%d counts of a key's running runs seen, want at least 5 (auto_explain reported %d plans)", counts, len(reported))
	}
}

// TestKeyDecisionIgnoresWindowSize pins down that what a claim reads to
// decide a key's MaxStarts does not grow with the starts in its window
// (issue "Keys that bind every replica at any scale", item 2): with 20,000
// starts in the window of each key, a single claim that wins on a key with
// room, a single claim skipped for a full key (which also says when there
// is room), and a batch of each, read at most a few rows of the starts
// table per statement. auto_explain, with ANALYZE, reports the rows each
// node of the statements inside the claim function returned.
func TestKeyDecisionIgnoresWindowSize(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	store := benchStore(t, db.Pool)
	ctx := t.Context()
	const window, full, starts = "site:window", "site:full", 20000
	for key, l := range map[string]runclaim.Limit{
		window: {MaxStarts: 1_000_000, Per: time.Hour},
		full:   {MaxStarts: starts, Per: time.Hour},
	} {
		if err := store.SetLimit(ctx, key, l); err != nil {
			t.Fatal(err)
		}
		insertStarts(t, db.Pool, store, key, starts)
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE "+runclaim.StartsTable(store)); err != nil {
		t.Fatal(err)
	}
	for i, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			testKeyDecisionPlans(t, db, mode, i, window, full)
		})
	}
}

// testKeyDecisionPlans is TestKeyDecisionIgnoresWindowSize in one plan
// cache mode; n makes the sources its own.
func testKeyDecisionPlans(t *testing.T, db *pgtest.DB, mode string, n int, window, full string) {
	ctx := t.Context()
	pool, plans := explainingPool(t, db, mode, true)
	pstore, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := benchClaimer(t, pstore, "plan")
	run, err := c.Claim(ctx, fmt.Sprintf("one/%d/window", n), runclaim.WithKeys(window))
	if err != nil {
		t.Fatalf("claim of a key with room: %v", err)
	}
	mustFinish(t, run)
	if _, err := c.Claim(ctx, fmt.Sprintf("one/%d/full", n), runclaim.WithKeys(full)); !errors.Is(err, runclaim.ErrLimited) {
		t.Fatalf("claim of a full key: %v, want ErrLimited", err)
	}
	for _, key := range []string{window, full} {
		batch := benchClaimer(t, pstore, "plan", runclaim.WithSourceKeys(func(string) []string { return []string{key} }))
		before := len(plans())
		pre := fmt.Sprintf("many/%d/%s/", n, key)
		runs, err := batch.ClaimMany(ctx, []string{pre + "a", pre + "b", pre + "c"})
		want := 3
		if key == full {
			want = 0
		}
		if err != nil || len(runs) != want {
			t.Fatalf("ClaimMany naming %s: %d runs, %v; want %d", key, len(runs), err, want)
		}
		for _, r := range runs {
			mustFinish(t, r)
		}
		// A batch decides a key with no room once: one source's check
		// of it (its row, runs and starts), not one per source.
		checks := 0
		for _, p := range plans()[before:] {
			if strings.Contains(p.QueryText, "first_end") {
				checks++
			}
		}
		if key == full && checks != 1 {
			t.Errorf("ClaimMany of 3 sources naming a full key checked it %d times, want once", checks)
		}
	}
	table := runclaim.DefaultTable + "_starts"
	seen := 0
	for _, p := range plans() {
		p.Plan.walk(func(n planNode) {
			if n.RelationName != table && !strings.HasPrefix(n.IndexName, table) {
				return
			}
			seen++
			if rows := n.ActualRows * max(n.ActualLoops, 1); rows > 4 {
				t.Errorf("%s returned %.0f rows of %s, which grow with the window, in:\n%s\nplan: %s", n.NodeType, rows, table, p.QueryText, p.JSON)
			}
		})
	}
	if seen == 0 {
		t.Fatalf("no statement read %s", table)
	}
}

// insertStarts records n starts of key in store's table of starts, a tenth
// of a second apart and ending now, oldest first, as claims would have,
// with run IDs no run has.
func insertStarts(tb testing.TB, pool *pgxpool.Pool, store *runclaim.PostgresStore, key string, n int) {
	tb.Helper()
	if _, err := pool.Exec(tb.Context(), `INSERT INTO `+runclaim.StartsTable(store)+` (key, started_at, run_id)
SELECT $1, pg_catalog.clock_timestamp() - i * interval '100 milliseconds', -i FROM pg_catalog.generate_series($2::int, 1, -1) AS i`, key, n); err != nil {
		tb.Fatal(err)
	}
}

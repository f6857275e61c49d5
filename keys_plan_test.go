package runclaim_test

import (
	"fmt"
	"strings"
	"testing"

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

package runclaim_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestPlanIndexesPerStatement pins down which indexes of the runs table
// each statement of a heartbeat and a finish reads (the claim function's
// statements: TestClaimFunctionPlansUseIndexes), in both the
// custom and the generic plan, so that CI, which runs it on every
// supported server version, shows that they are the same on each: a
// planner that answered a claim's "last start" from the primary key, say,
// would still use an index (TestHistoryPlansUseIndexes) but read a
// source's whole history. The table holds 20,000 finished runs over 1,000
// sources, analyzed.
func TestPlanIndexesPerStatement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	store := benchStore(t, db.Pool)
	loadHistory(t, db.Pool, store, runclaim.DefaultTable, 20_000)

	rec := &stmtRecorder{}
	traced := db.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
	tstore := formStore(t, traced, claimForms[0])
	c := benchClaimer(t, tstore, "plan", runclaim.WithMinInterval(time.Millisecond))
	run, err := c.Claim(ctx, "src-0007") // has history
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if err := run.Heartbeat(ctx); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	stmts := rec.take()

	table := runclaim.DefaultTable
	pkey, running := table+"_pkey", table+"_running"
	// Each statement that reads the runs table, known by how it starts,
	// and the indexes its plan must read, in sorted order.
	want := []struct {
		name, prefix string
		indexes      []string
	}{
		{"heartbeat", "UPDATE " + store.Table() + "\nSET lease_until", []string{running}},
		{"finish", "WITH c AS MATERIALIZED", []string{pkey, running}},
	}
	seen := map[string]bool{}

	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		func() {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var prepared []string
			defer func() {
				// Prepared statements outlive the transaction; DEALLOCATE ALL
				// would take pgx's own too.
				_ = tx.Rollback(ctx)
				for _, name := range prepared {
					if _, err := conn.Exec(ctx, "DEALLOCATE "+name); err != nil {
						t.Errorf("DEALLOCATE %s: %v", name, err)
					}
				}
			}()
			for _, q := range []string{
				"SET LOCAL plan_cache_mode = " + mode,
				"SELECT pg_catalog.set_config('runclaim.locked', 'true', true)",
			} {
				if _, err := tx.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			for i, s := range stmts {
				if !strings.Contains(s.sql, store.Table()) {
					continue
				}
				name := fmt.Sprintf("q%d", i)
				if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+s.sql); err != nil {
					t.Fatalf("PREPARE %s: %v", s.sql, err)
				}
				prepared = append(prepared, name)
				exec, err := execute(name, s.args)
				if err != nil {
					t.Fatal(err)
				}
				plan, out := explainJSON(t, tx, exec, s.sql)
				var used []string
				plan.walk(func(n planNode) {
					if n.IndexName != "" && !slices.Contains(used, n.IndexName) {
						used = append(used, n.IndexName)
					}
				})
				slices.Sort(used)
				i := slices.IndexFunc(want, func(w struct {
					name, prefix string
					indexes      []string
				}) bool {
					return strings.HasPrefix(s.sql, w.prefix)
				})
				if i < 0 {
					t.Errorf("%s: a statement with no expected plan here (add one), using %v:\n%s", mode, used, s.sql)
					continue
				}
				seen[want[i].name] = true
				t.Logf("%s: %s uses %v", mode, want[i].name, used)
				if !slices.Equal(used, want[i].indexes) {
					t.Errorf("%s: the %s statement reads indexes %v, want %v; plan: %s", mode, want[i].name, used, want[i].indexes, out)
				}
			}
		}()
	}
	for _, w := range want {
		if !seen[w.name] {
			t.Errorf("no %s statement recorded (%d statements: %q)", w.name, len(stmts), stmts)
		}
	}
}

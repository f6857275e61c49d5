package runclaim_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestCheckPlansAreBounded: on a table of finished runs (RUNCLAIM_PLAN_ROWS,
// default 20,000, over 1,000 sources, analyzed) plus one source with
// 5,000 failures since its last success, neither Check's query nor
// SourceStates' scans the runs table sequentially, in the custom and the
// generic plan, and each reads a bounded number of rows: Check at most
// CheckScanLimit + 2 however many failures there are, SourceStates a few
// per source. The statements are the ones the store really sends,
// recorded by a tracer. With -v it logs the plans as they run.
func TestCheckPlansAreBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	store := benchStore(t, db.Pool)
	loadHistory(t, db.Pool, store, runclaim.DefaultTable, planRows(t))
	const failures = 5000
	insertCheckRun(t, db.Pool, store, "failing", runclaim.StatusSucceeded, 2*time.Hour, "")
	if _, err := db.Pool.Exec(ctx, `INSERT INTO `+store.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at, error)
SELECT 'failing', 'failed', 'o', t, t, t, t, 'x' FROM (SELECT pg_catalog.clock_timestamp() - g * interval '1 second' AS t FROM pg_catalog.generate_series(1, $1::int) AS g) AS s`, failures); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE "+store.Table()); err != nil {
		t.Fatal(err)
	}

	rec := &stmtRecorder{}
	traced := db.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
	tstore := benchStore(t, traced)
	h, err := tstore.Check(ctx, "failing", time.Hour)
	if err != nil || h.Healthy || !h.SuccessUnread {
		t.Fatalf("Check(failing) = %+v, %v; want overdue, success unread", h, err)
	}
	if _, err := tstore.Check(ctx, "src-0007", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := tstore.SourceStates(ctx); err != nil {
		t.Fatal(err)
	}
	var stmts []recordedStmt
	for _, s := range rec.take() {
		if strings.Contains(s.sql, store.Table()) && !strings.Contains(s.sql, "pg_catalog.pg_class") {
			stmts = append(stmts, s)
		}
	}
	if len(stmts) != 3 {
		t.Fatalf("recorded %d statements on the runs table, want 3 (two checks, one SourceStates): %q", len(stmts), stmts)
	}
	// The most rows of the runs table each statement may read.
	bounds := []float64{runclaim.CheckScanLimit + 3, runclaim.CheckScanLimit + 3, 10 * (historySources + 1)}

	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	table := runclaim.DefaultTable
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for i, s := range stmts {
			func() {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					_ = tx.Rollback(ctx)
					if _, err := conn.Exec(ctx, "DEALLOCATE p"); err != nil {
						t.Errorf("DEALLOCATE: %v", err)
					}
				}()
				for _, q := range []string{"SET LOCAL plan_cache_mode = " + mode, "PREPARE p AS " + s.sql} {
					if _, err := tx.Exec(ctx, q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
				exec, err := execute("p", s.args)
				if err != nil {
					t.Fatal(err)
				}
				var out string
				if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+exec).Scan(&out); err != nil {
					t.Fatalf("EXPLAIN %s: %v", s.sql, err)
				}
				plan := parsePlan(t, out)
				var read float64
				usesIndex := false
				plan.walk(func(n planNode) {
					if n.RelationName != table {
						return
					}
					if n.NodeType == "Seq Scan" {
						t.Errorf("%s: a sequential scan of %s in:\n%s", mode, table, s.sql)
					}
					usesIndex = usesIndex || n.IndexName == table+"_history"
					read += n.ActualRows * n.ActualLoops
				})
				if !usesIndex {
					t.Errorf("%s: statement %d does not use %s_history", mode, i, table)
				}
				if read > bounds[i] {
					t.Errorf("%s: statement %d read %.0f rows of %s, more than %.0f", mode, i, read, table, bounds[i])
				}
				if testing.Verbose() {
					var b strings.Builder
					plan.summary(&b, 0)
					t.Logf("%s, statement %d: %.0f rows of %s read\n%s", mode, i, read, table, b.String())
				}
			}()
		}
	}
}

// parsePlan parses the output of EXPLAIN (FORMAT JSON).
func parsePlan(t *testing.T, out string) planNode {
	t.Helper()
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("unexpected EXPLAIN output %s (%v)", out, err)
	}
	return plans[0].Plan
}

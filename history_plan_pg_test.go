package runclaim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// planRowsEnv sets how many finished runs TestHistoryPlansUseIndexes
// loads; BENCHMARKS.md shows its plans with 1,000,000.
const planRowsEnv = "RUNCLAIM_PLAN_ROWS"

// stmtRecorder is a pgx tracer that records each statement a pool sends,
// with its arguments, batched or not.
type stmtRecorder struct {
	mu    sync.Mutex // protects stmts
	stmts []recordedStmt
}

type recordedStmt struct {
	sql  string
	args []any
}

func (r *stmtRecorder) add(sql string, args []any) {
	if strings.HasPrefix(sql, "BEGIN") || sql == "COMMIT" || sql == "ROLLBACK" {
		return // transaction control: the batch's bounded prepare, the explicit form
	}
	if len(args) > 0 {
		if _, ok := args[0].(pgx.QueryRewriter); ok {
			args = args[1:] // an option to pgx, not an argument
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = append(r.stmts, recordedStmt{sql: sql, args: args})
}

func (r *stmtRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL, d.Args)
	return ctx
}

func (r *stmtRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *stmtRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		r.add(q.SQL, q.Arguments)
	}
	return ctx
}

func (r *stmtRecorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *stmtRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// take returns the statements recorded since the last call.
func (r *stmtRecorder) take() []recordedStmt {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stmts
	r.stmts = nil
	return s
}

// sqlLiteral writes an argument the library sends as an SQL literal.
func sqlLiteral(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "NULL", nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case int:
		return strconv.Itoa(v), nil
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'", nil
	case *string:
		if v == nil {
			return "NULL", nil
		}
		return sqlLiteral(*v)
	case []int64:
		lits := make([]string, len(v))
		for i, x := range v {
			lits[i] = strconv.FormatInt(x, 10)
		}
		return "ARRAY[" + strings.Join(lits, ", ") + "]::bigint[]", nil
	case []string:
		lits := make([]string, len(v))
		for i, x := range v {
			lits[i], _ = sqlLiteral(x)
		}
		return "ARRAY[" + strings.Join(lits, ", ") + "]::text[]", nil
	case time.Time:
		return "'" + v.UTC().Format("2006-01-02 15:04:05.999999") + "+00'::timestamptz", nil
	case []time.Time:
		lits := make([]string, len(v))
		for i, x := range v {
			lits[i], _ = sqlLiteral(x)
		}
		return "ARRAY[" + strings.Join(lits, ", ") + "]::timestamptz[]", nil
	}
	return "", fmt.Errorf("no SQL literal for %T", v)
}

// execute returns an EXECUTE of prepared statement name with args.
func execute(name string, args []any) (string, error) {
	if len(args) == 0 {
		return "EXECUTE " + name, nil
	}
	lits := make([]string, len(args))
	for i, a := range args {
		l, err := sqlLiteral(a)
		if err != nil {
			return "", err
		}
		lits[i] = l
	}
	return "EXECUTE " + name + "(" + strings.Join(lits, ", ") + ")", nil
}

// planRows is how many finished runs the plan tests load.
func planRows(t *testing.T) int {
	rows := 20_000
	if s := os.Getenv(planRowsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			t.Fatalf("%s=%q: want a number of rows", planRowsEnv, s)
		}
		rows = n
	}
	return rows
}

// planNode is a node of an EXPLAIN (FORMAT JSON) plan.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	Plans        []planNode `json:"Plans"`

	// With ANALYZE and BUFFERS.
	ActualRows  float64 `json:"Actual Rows"`
	ActualLoops float64 `json:"Actual Loops"`
	ActualTime  float64 `json:"Actual Total Time"`
	SharedHit   int64   `json:"Shared Hit Blocks"`
}

// summary writes n and the nodes below it, one a line, indented.
func (n planNode) summary(b *strings.Builder, depth int) {
	fmt.Fprintf(b, "%s%s", strings.Repeat("  ", depth), n.NodeType)
	if n.IndexName != "" {
		fmt.Fprintf(b, " using %s", n.IndexName)
	}
	if n.RelationName != "" {
		fmt.Fprintf(b, " on %s", n.RelationName)
	}
	fmt.Fprintf(b, " (actual time=%.3f rows=%.0f loops=%.0f) buffers hit=%d\n", n.ActualTime, n.ActualRows, n.ActualLoops, n.SharedHit)
	for _, c := range n.Plans {
		c.summary(b, depth+1)
	}
}

// explainJSON returns the plan of exec (an EXECUTE of prepared statement
// sql) in tx, parsed, and as EXPLAIN (FORMAT JSON) printed it.
func explainJSON(t *testing.T, tx pgx.Tx, exec, sql string) (planNode, string) {
	t.Helper()
	var out string
	if err := tx.QueryRow(t.Context(), "EXPLAIN (FORMAT JSON) "+exec).Scan(&out); err != nil {
		t.Fatalf("EXPLAIN %s: %v", sql, err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN %s: unexpected output %s (%v)", sql, out, err)
	}
	return plans[0].Plan, out
}

// walk calls f on n and every node below it.
func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// TestHistoryPlansUseIndexes checks that claims stay O(1) as history grows:
// on a table of finished runs (RUNCLAIM_PLAN_ROWS, default 20,000, over
// 1,000 sources, analyzed), no statement that a heartbeat (of one run, or
// of many) or a finish sends scans the runs table sequentially, and each one that reads
// it uses one of its indexes, in both the custom and the generic plan
// (prepared statements switch to the generic plan after five executions).
// The statements are the ones the store really sends, recorded by a tracer.
// With -v it also logs EXPLAIN (ANALYZE, BUFFERS) of the generic plans.
func TestHistoryPlansUseIndexes(t *testing.T) {
	t.Parallel()
	rows := planRows(t)
	ctx := t.Context()
	db := pgtest.New(t)
	store := benchStore(t, db.Pool)
	loadHistory(t, db.Pool, store, runclaim.DefaultTable, rows)

	rec := &stmtRecorder{}
	traced := db.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
	// The statements are prepared here as pgx sends them; those inside
	// the claim function: TestClaimFunctionPlansUseIndexes.
	tstore := formStore(t, traced, claimForms[0])
	// A minimum interval, so that the claim reads the source's last start.
	c := benchClaimer(t, tstore, "plan", runclaim.WithMinInterval(time.Millisecond))
	const source = "src-0007" // has history
	run, err := c.Claim(ctx, source)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if err := run.Heartbeat(ctx); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	// The heartbeat of many runs (DoMany's), here of one.
	if res, err := tstore.HeartbeatMany(ctx, []runclaim.HeartbeatRequest{{ID: run.ID, Source: run.Source, StartedAt: run.StartedAt, Lease: c.Settings().Lease}}); err != nil || res[0].Err != nil {
		t.Fatalf("HeartbeatMany: %v, %v", res, err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	// The statements that read the runs table (the claim's call reads it
	// inside the function).
	var stmts []recordedStmt
	for _, s := range rec.take() {
		if strings.Contains(s.sql, store.Table()) {
			stmts = append(stmts, s)
		}
	}

	table := runclaim.DefaultTable
	indexes := map[string]bool{table + "_pkey": true, table + "_running": true, table + "_history": true}
	reading := len(stmts)
	// The heartbeats and the finish.
	if reading < 3 {
		t.Fatalf("recorded %d statements that read the runs table, want at least 3: %q", reading, stmts)
	}

	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// inTx runs f in a transaction that is rolled back, with the setting
	// that the claim's lock statement makes and the statements prepared as
	// p0, p1, ...
	inTx := func(mode string, f func(tx pgx.Tx)) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			// Prepared statements outlive the transaction.
			_ = tx.Rollback(ctx)
			for i := range stmts {
				if _, err := conn.Exec(ctx, fmt.Sprintf("DEALLOCATE p%d", i)); err != nil {
					t.Errorf("DEALLOCATE p%d: %v", i, err)
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
			if _, err := tx.Exec(ctx, fmt.Sprintf("PREPARE p%d AS %s", i, s.sql)); err != nil {
				t.Fatalf("PREPARE %s: %v", s.sql, err)
			}
		}
		f(tx)
	}

	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		inTx(mode, func(tx pgx.Tx) {
			for i, s := range stmts {
				exec, err := execute(fmt.Sprintf("p%d", i), s.args)
				if err != nil {
					t.Fatal(err)
				}
				plan, out := explainJSON(t, tx, exec, s.sql)
				usesIndex := false
				plan.walk(func(n planNode) {
					if n.RelationName == table && n.NodeType == "Seq Scan" {
						t.Errorf("%s: a sequential scan of %s in:\n%s\nplan: %s", mode, table, s.sql, out)
					}
					usesIndex = usesIndex || indexes[n.IndexName]
				})
				if strings.Contains(s.sql, store.Table()) && !usesIndex {
					t.Errorf("%s: no index of %s used by:\n%s\nplan: %s", mode, table, s.sql, out)
				}
			}
		})
	}

	if !testing.Verbose() {
		return
	}
	// Show the plans as they run: claim source again (it wins), then
	// heartbeat and finish the new run.
	inTx("force_generic_plan", func(tx pgx.Tx) {
		var newID int64
		for i, s := range stmts {
			args := s.args
			if len(args) > 0 && args[0] == any(run.ID) && newID != 0 {
				args = append([]any{newID}, args[1:]...)
			}
			exec, err := execute(fmt.Sprintf("p%d", i), args)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+exec)
			if err != nil {
				t.Fatal(err)
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s\n%s", s.sql, strings.Join(lines, "\n"))
			if newID == 0 {
				err := tx.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM "+store.Table()+" WHERE source = $1 AND status = 'running'", source).Scan(&newID)
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// TestHeartbeatPlanStaleStatistics: Heartbeat and Finish find their run by
// its ID and its source, so that their plan stays one probe when the
// statistics are stale. The table is analyzed while no run is running, and
// then 2,000 runs start (autovacuum off, so nothing updates the
// statistics): the heartbeat and the finish, as the store sends them, each
// read a handful of buffers, in the custom and the generic plan. (Found by
// ID alone, the planner walked the whole partial index of running runs:
// 410 buffers here.) With -v it logs the plans.
func TestHeartbeatPlanStaleStatistics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	table := store.Table()
	for _, q := range []string{
		`ALTER TABLE ` + table + ` SET (autovacuum_enabled = false)`,
		`INSERT INTO ` + table + ` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at)
SELECT 'old-' || g, 'succeeded', 'x', clock_timestamp(), clock_timestamp(), clock_timestamp(), clock_timestamp() FROM generate_series(1, 20) g`,
		`ANALYZE ` + table,
		`INSERT INTO ` + table + ` (source, status, owner, started_at, lease_until, heartbeat_at)
SELECT 'run-' || g, 'running', 'x', clock_timestamp(), clock_timestamp() + interval '1 hour', clock_timestamp() FROM generate_series(1, 2000) g`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rec := &stmtRecorder{}
	traced := db.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
	tstore, err := runclaim.NewPostgresStore(traced)
	if err != nil {
		t.Fatal(err)
	}
	var (
		id      int64
		started time.Time
	)
	if err := db.Pool.QueryRow(ctx, `SELECT id, started_at FROM `+table+` WHERE source = 'run-1000'`).Scan(&id, &started); err != nil {
		t.Fatal(err)
	}
	if _, err := tstore.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: id, Source: "run-1000", StartedAt: started, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := tstore.Finish(ctx, runclaim.FinishRequest{ID: id, Source: "run-1000", StartedAt: started, Status: runclaim.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	stmts := rec.take()
	if len(stmts) != 2 {
		t.Fatalf("recorded %d statements, want the heartbeat and the finish: %q", len(stmts), stmts)
	}
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for i, s := range stmts {
			func() {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx) // the statements write: undo them
				if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, fmt.Sprintf("PREPARE hb%d AS %s", i, s.sql)); err != nil {
					t.Fatal(err)
				}
				defer conn.Exec(context.Background(), fmt.Sprintf("DEALLOCATE hb%d", i))
				// The finish above made the run succeeded: run the plans on
				// a running one.
				args := append([]any{}, s.args...)
				var other int64
				if err := tx.QueryRow(ctx, `SELECT id FROM `+table+` WHERE source = 'run-1500'`).Scan(&other); err != nil {
					t.Fatal(err)
				}
				args[0], args[1] = other, "run-1500"
				exec, err := execute(fmt.Sprintf("hb%d", i), args)
				if err != nil {
					t.Fatal(err)
				}
				var out string
				if _, err := tx.Exec(ctx, "SAVEPOINT explained"); err != nil {
					t.Fatal(err)
				}
				if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+exec).Scan(&out); err != nil {
					t.Fatalf("EXPLAIN %s: %v", s.sql, err)
				}
				if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT explained"); err != nil {
					t.Fatal(err)
				}
				var plans []struct {
					Plan struct {
						SharedHit  int `json:"Shared Hit Blocks"`
						SharedRead int `json:"Shared Read Blocks"`
					}
				}
				if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
					t.Fatalf("EXPLAIN: %s (%v)", out, err)
				}
				if b := plans[0].Plan.SharedHit + plans[0].Plan.SharedRead; b > 40 {
					t.Errorf("%s: %d buffers for one run, among 2,000 running, in:\n%s\nplan: %s", mode, b, s.sql, out)
				}
				if testing.Verbose() {
					rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) "+exec)
					if err != nil {
						t.Fatal(err)
					}
					lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("%s:\n%s", mode, strings.Join(lines, "\n"))
				}
			}()
		}
	}
}

// TestClaimFunctionPlansUseIndexes is TestHistoryPlansUseIndexes for the
// statements inside the claim function, which the client never sees: on
// the same history, auto_explain (loaded in the test's sessions, with
// log_nested_statements, sending its plans to the client as notices)
// reports the plan of every statement the function runs. The claims cover
// every path through it: a win on a source with history and a minimum
// interval (the running run, the last start, the insert), a loss to a live
// holder, a claim too soon, a takeover (the expiry too), and a lapsed
// holder whose row another transaction holds (the second read of the
// running run). No statement scans the runs table sequentially, each one
// that reads it (all but the INSERT of VALUES) uses one of its indexes, in custom and in generic plans;
// and every statement of the function is seen. With -v it logs the plans,
// with ANALYZE and BUFFERS.
func TestClaimFunctionPlansUseIndexes(t *testing.T) {
	t.Parallel()
	rows := planRows(t)
	db := pgtest.New(t)
	store := benchStore(t, db.Pool)
	loadHistory(t, db.Pool, store, runclaim.DefaultTable, rows)
	table := runclaim.DefaultTable
	indexes := map[string]bool{table + "_pkey": true, table + "_running": true, table + "_history": true, table + "_tick": true}
	for i, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for f, form := range []claimForm{{"function", runclaim.LatestSchemaVersion}, {"function with a tick", runclaim.LatestSchemaVersion}} {
			t.Run(mode+"/"+form.name, func(t *testing.T) {
				testClaimFunctionPlans(t, db, store, mode, form, 10*i+f, indexes)
			})
		}
	}
}

// testClaimFunctionPlans is TestClaimFunctionPlansUseIndexes in one plan
// cache mode and one form; n makes the sources its own. In the form with a
// tick, every claim names a later tick, and a claim of a tick served
// is added to the losses.
func testClaimFunctionPlans(t *testing.T, db *pgtest.DB, store *runclaim.PostgresStore, mode string, form claimForm, i int, indexes map[string]bool) {
	table := runclaim.DefaultTable
	// The function's statements, by how each begins.
	// (The source's latest start, for the interval, is read with its
	// running run, in the statement that begins "SELECT c.id".)
	statements := []string{"SELECT c.id", "UPDATE", "INSERT"}
	ticks := strings.HasSuffix(form.name, "tick")
	if ticks {
		// The latest tick served, by a run that ran and by one that was
		// replaced (schema version 13), each from its own index.
		statements = append(statements, "SELECT pg_catalog.max(x.tick)")
	}
	tick := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	claim := func(c *runclaim.Claimer, ctx context.Context, source string) (*runclaim.Run, error) {
		if !ticks {
			return c.Claim(ctx, source)
		}
		tick = tick.Add(time.Minute)
		return c.Claim(ctx, source, runclaim.ForTick(tick))
	}
	ctx := t.Context()
	pool, plans := explainingPool(t, db, mode, true)
	fstore := formStore(t, pool, form)
	src := func(n int) string { return fmt.Sprintf("src-%04d", 100*i+n) } // each with history
	c := benchClaimer(t, fstore, "plan", runclaim.WithMinInterval(time.Millisecond))

	// A win, then a loss to it.
	run, err := claim(c, ctx, src(1))
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if _, err := claim(c, ctx, src(1)); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("Claim of a held source: %v, want ErrAlreadyRunning", err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if ticks { // the tick served, and the one before it
		for _, tk := range []time.Time{run.Tick, run.Tick.Add(-time.Minute)} {
			if _, err := c.Claim(ctx, src(1), runclaim.ForTick(tk)); !errors.Is(err, runclaim.ErrTickDone) {
				t.Fatalf("Claim of a tick served: %v, want ErrTickDone", err)
			}
		}
	}
	// Too soon.
	if _, err := claim(benchClaimer(t, fstore, "plan", runclaim.WithMinInterval(time.Hour)), ctx, src(1)); !errors.Is(err, runclaim.ErrTooSoon) {
		t.Fatalf("Claim too soon: %v, want ErrTooSoon", err)
	}
	// A takeover, and a lapsed holder whose row is locked.
	// MinLease (10 ms): a run that lapses at once, to reach the path of an
	// expired run; the test waits for its end by the database clock.
	short := benchClaimer(t, fstore, "plan", runclaim.WithLease(runclaim.MinLease))
	var lapsed []*runclaim.Run
	for _, n := range []int{2, 3} {
		r, err := claim(short, ctx, src(n))
		if err != nil {
			t.Fatal(err)
		}
		lapsed = append(lapsed, r)
	}
	waitUntil(t, 10*time.Second, 5*time.Millisecond, "the short leases to end", func() bool { return dbNow(t, db.Pool).After(lapsed[1].LeaseUntil) })
	if _, err := claim(c, ctx, src(2)); err != nil {
		t.Fatalf("takeover Claim: %v", err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT FROM "+store.Table()+" WHERE id = $1 FOR UPDATE", lapsed[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := claim(c, ctx, src(3)); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("Claim of a lapsed holder whose row is locked: %v, want ErrAlreadyRunning", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	seen := map[string]int{}
	reported := plans()
	for _, p := range reported {
		q := strings.TrimSpace(p.QueryText)
		if !strings.Contains(q, store.Table()) {
			continue // the call itself, or statements of no table
		}
		for _, st := range statements {
			if strings.HasPrefix(q, st) {
				seen[st]++
			}
		}
		usesIndex := false
		p.Plan.walk(func(n planNode) {
			if n.RelationName == table && n.NodeType == "Seq Scan" {
				t.Errorf("a sequential scan of %s in:\n%s\nplan: %s", table, q, p.JSON)
			}
			usesIndex = usesIndex || indexes[n.IndexName]
		})
		// The INSERT reads nothing (VALUES); every other statement reads.
		if !usesIndex && !strings.HasPrefix(q, "INSERT") {
			t.Errorf("no index of %s used by:\n%s\nplan: %s", table, q, p.JSON)
		}
		if testing.Verbose() {
			var b strings.Builder
			p.Plan.summary(&b, 0)
			t.Logf("%s\n%s", q, b.String())
		}
	}
	for _, st := range statements {
		if seen[st] == 0 {
			t.Errorf("no plan seen for the function's %q statement (%d plans reported)", st, len(reported))
		}
	}
	t.Logf("%s, %s: plans of %v", mode, form.name, seen)
}

// explainedPlan is one plan that auto_explain reported: the statement, its
// plan, and the plan as auto_explain wrote it, in JSON.
type explainedPlan struct {
	QueryText string   `json:"Query Text"`
	Plan      planNode `json:"Plan"`
	JSON      string   `json:"-"`
}

// explainingPool returns a pool of one connection whose session loads
// auto_explain and has it send the plan of every statement, those that
// functions run too (log_nested_statements), to the client as a notice,
// in JSON, with ANALYZE and BUFFERS if analyze, in the plan cache mode
// mode; and a function that returns the plans reported so far. Loading
// auto_explain needs a superuser, as pgtest's servers have.
func explainingPool(t *testing.T, db *pgtest.DB, mode string, analyze bool) (*pgxpool.Pool, func() []explainedPlan) {
	t.Helper()
	var (
		mu      sync.Mutex // protects notices
		notices []string
	)
	settings := []string{
		"LOAD 'auto_explain'",
		"SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_nested_statements = on",
		"SET auto_explain.log_format = json",
		"SET auto_explain.log_level = notice",
		"SET plan_cache_mode = " + mode,
	}
	if analyze {
		settings = append(settings, "SET auto_explain.log_analyze = on", "SET auto_explain.log_buffers = on")
	}
	pool := db.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			notices = append(notices, n.Message)
			mu.Unlock()
		}
		c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			for _, q := range settings {
				if _, err := conn.Exec(ctx, q); err != nil {
					return fmt.Errorf("%s (the plan tests need a superuser, as pgtest's servers have): %w", q, err)
				}
			}
			return nil
		}
	})
	return pool, func() []explainedPlan {
		mu.Lock()
		defer mu.Unlock()
		var plans []explainedPlan
		for _, msg := range notices {
			j := strings.Index(msg, "{")
			if j < 0 {
				continue
			}
			p := explainedPlan{JSON: msg[j:]}
			if err := json.Unmarshal([]byte(p.JSON), &p); err != nil {
				t.Fatalf("auto_explain output %q: %v", msg, err)
			}
			plans = append(plans, p)
		}
		return plans
	}
}

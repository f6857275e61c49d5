package runclaim_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestPruneKeepLast: PruneRuns with KeepLast keeps the KeepLast runs of
// each source that started last, whatever their age or status, with or
// without OlderThan; running runs count among them and are never deleted.
func TestPruneKeepLast(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	table := store.Table()
	const h = time.Hour
	var want []int64 // IDs that must survive
	keep := func(id int64) { want = append(want, id) }
	ins := func(source, status string, startedAgo time.Duration) int64 {
		finished := startedAgo - time.Minute
		if finished < 0 {
			finished = 0
		}
		return insertRun(t, db.Pool, table, source, status, startedAgo, finished)
	}

	// a: six old runs of every status; the three that started last stay.
	for i, st := range []string{"succeeded", "failed", "expired", "released", "succeeded", "failed"} {
		id := ins("a", st, time.Duration(20-i)*h)
		if i >= 3 {
			keep(id)
		}
	}
	// b: two runs, fewer than three: both stay.
	keep(ins("b", "succeeded", 20*h))
	keep(ins("b", "failed", 19*h))
	// c: a running run that started long ago (its lease long over) and
	// three finished runs after it: the running run stays although it is
	// not among the three newest, and the oldest finished one goes.
	keep(ins("c", "running", 30*h))
	ins("c", "succeeded", 25*h)
	keep(ins("c", "succeeded", 24*h))
	keep(ins("c", "succeeded", 23*h))
	keep(ins("c", "succeeded", 22*h))
	// d: a running run among the three newest counts as one of them.
	ins("d", "succeeded", 25*h)
	keep(ins("d", "succeeded", 24*h))
	keep(ins("d", "failed", 23*h))
	keep(ins("d", "running", 22*h))
	// e: five runs, the last three finished within the cut-off: the
	// cut-off keeps them, KeepLast keeps nothing more.
	ins("e", "succeeded", 10*h)
	ins("e", "succeeded", 9*h)
	keep(ins("e", "succeeded", 50*time.Minute))
	keep(ins("e", "succeeded", 40*time.Minute))
	keep(ins("e", "succeeded", 30*time.Minute))

	before := allRuns(t, db.Pool, table)
	n, err := store.PruneRuns(t.Context(), runclaim.PruneOptions{OlderThan: h, KeepLast: 3})
	if err != nil {
		t.Fatalf("PruneRuns: %v", err)
	}
	after := allRuns(t, db.Pool, table)
	if want := int64(len(before) - len(want)); n != want {
		t.Errorf("PruneRuns deleted %d runs, want %d", n, want)
	}
	var got []int64
	for id := range after {
		got = append(got, id)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("runs left %v, want %v", got, want)
	}

	// Again with KeepLast 1 and no age: the newest of each source stays,
	// and every running run.
	n, err = store.PruneRuns(t.Context(), runclaim.PruneOptions{KeepLast: 1})
	if err != nil {
		t.Fatalf("PruneRuns: %v", err)
	}
	left := allRuns(t, db.Pool, table)
	bySource := map[string][]string{}
	for _, r := range left {
		bySource[r.Source] = append(bySource[r.Source], r.Status)
	}
	for src, statuses := range map[string]int{"a": 1, "b": 1, "c": 2, "d": 1, "e": 1} {
		if len(bySource[src]) != statuses {
			t.Errorf("after KeepLast 1, source %q has runs %v, want %d", src, bySource[src], statuses)
		}
	}
	if want := int64(len(after) - len(left)); n != want {
		t.Errorf("PruneRuns deleted %d runs, reported %d", want, n)
	}
}

// TestPruneKeepLastTies: runs of a source that started at the same instant
// count as one: none of them is deleted for being older than the others.
func TestPruneKeepLastTies(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	_, err := db.Pool.Exec(t.Context(), `INSERT INTO `+store.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at)
SELECT 'tie', 'succeeded', 'test', t, t, t, t
FROM pg_catalog.generate_series(1, 4), (SELECT pg_catalog.now() - interval '1 day' AS t) AS s`)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := store.PruneRuns(t.Context(), runclaim.PruneOptions{KeepLast: 2}); err != nil || n != 0 {
		t.Errorf("PruneRuns over four runs started at one instant = %d, %v; want 0", n, err)
	}
}

// TestPruneKeepLastBatches: with KeepLast, PruneRuns goes through the
// table in batches of PruneBatchSize rows, one statement each, deleted or
// not, each its own transaction, and counts exactly.
func TestPruneKeepLastBatches(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	const sources, perSource, keepLast = 50, 60, 7 // 3,000 rows: three batches
	_, err := db.Pool.Exec(t.Context(), `INSERT INTO `+store.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at)
SELECT 's' || (g % $2), 'succeeded', 'test', t, t, t, t
FROM pg_catalog.generate_series(1, $1::int) AS g,
     LATERAL (SELECT pg_catalog.now() - interval '1 day' + g * interval '1 second' AS t) AS s`, sources*perSource, sources)
	if err != nil {
		t.Fatal(err)
	}
	ps, tr := pruneStore(t, db)
	n, err := ps.PruneRuns(t.Context(), runclaim.PruneOptions{KeepLast: keepLast})
	if err != nil {
		t.Fatalf("PruneRuns: %v", err)
	}
	if want := int64(sources * (perSource - keepLast)); n != want {
		t.Errorf("PruneRuns deleted %d runs, want %d", n, want)
	}
	if s := readState(t, db.Pool, store.Table()); s.Rows != sources*keepLast {
		t.Errorf("%d runs left, want %d", s.Rows, sources*keepLast)
	}
	stmts, inTx := tr.counts()
	// A new store first reads the table's schema version, once (whether
	// its runs carry ticks, which decides which runs Prune must keep).
	if want := sources*perSource/runclaim.PruneBatchSize + 1 + 1; stmts != want {
		t.Errorf("PruneRuns ran %d statements, want %d (the schema version, one per %d rows, and the last, short one)", stmts, want, runclaim.PruneBatchSize)
	}
	if inTx != 0 {
		t.Errorf("%d of PruneRuns' %d statements left a transaction open", inTx, stmts)
	}
}

// TestPruneOptionsInvalid: bad options are refused before any statement,
// and delete nothing.
func TestPruneOptionsInvalid(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	insertRun(t, db.Pool, store.Table(), "x", "succeeded", 3*time.Hour, 3*time.Hour)
	insertRun(t, db.Pool, store.Table(), "x", "succeeded", 2*time.Hour, 2*time.Hour)
	ps, tr := pruneStore(t, db)
	for _, o := range []runclaim.PruneOptions{
		{OlderThan: -time.Second},
		{KeepLast: -1},
		{KeepLast: runclaim.MaxKeepLast + 1},
	} {
		if n, err := ps.PruneRuns(t.Context(), o); err == nil || n != 0 || !strings.HasPrefix(err.Error(), "runclaim: prune: ") {
			t.Errorf("PruneRuns(%+v) = %d, %v; want 0 and a runclaim: prune: error", o, n, err)
		}
	}
	if stmts, _ := tr.counts(); stmts != 0 {
		t.Errorf("invalid options ran %d statements", stmts)
	}
	if s := readState(t, db.Pool, store.Table()); s.Rows != 2 {
		t.Errorf("%d runs left, want 2", s.Rows)
	}
}

// TestPrunePlanUsesIndexes: the statement PruneRuns sends, as it sends it,
// reads the runs table only through its indexes, in the custom and the
// generic plan, on a table of 20,000 analyzed finished runs (RUNCLAIM_PLAN_ROWS):
// the batch walks the primary key, and the keep-last check the history
// index, so a batch costs the same however long the history is.
func TestPrunePlanUsesIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	store := benchStore(t, db.Pool)
	loadHistory(t, db.Pool, store, runclaim.DefaultTable, planRows(t))

	rec := &stmtRecorder{}
	traced := db.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
	ts, err := runclaim.NewPostgresStore(traced)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing old enough: the statement runs but deletes nothing, so the
	// EXPLAINs below see the loaded table.
	if _, err := ts.PruneRuns(ctx, runclaim.PruneOptions{OlderThan: 1000 * time.Hour, KeepLast: 5}); err != nil {
		t.Fatal(err)
	}
	// A new store reads the schema version first: the prune statement is
	// the one that deletes.
	stmts := slices.DeleteFunc(rec.take(), func(s recordedStmt) bool { return !strings.Contains(s.sql, "DELETE FROM") })
	if len(stmts) == 0 {
		t.Fatal("PruneRuns sent no prune statement")
	}
	table := runclaim.DefaultTable
	for i, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		name := "prune" + strconv.Itoa(i) // a prepared statement outlives its transaction
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		s := stmts[0]
		if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+s.sql); err != nil {
			t.Fatalf("PREPARE %s: %v", s.sql, err)
		}
		exec, err := execute(name, s.args)
		if err != nil {
			t.Fatal(err)
		}
		plan, out := explainJSON(t, tx, exec, s.sql)
		used := map[string]bool{}
		plan.walk(func(n planNode) {
			if n.RelationName == table && n.NodeType == "Seq Scan" {
				t.Errorf("%s: a sequential scan of %s; plan: %s", mode, table, out)
			}
			used[n.IndexName] = true
		})
		for _, idx := range []string{table + "_pkey", table + "_history"} {
			if !used[idx] {
				t.Errorf("%s: index %s not used; plan: %s", mode, idx, out)
			}
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

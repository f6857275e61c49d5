package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// insertRun writes a run directly: started startedAgo before now and, unless
// status is running, finished finishedAgo before now. It returns its ID.
func insertRun(t *testing.T, pool *pgxpool.Pool, table, source, status string, startedAgo, finishedAgo time.Duration) int64 {
	t.Helper()
	var id int64
	err := pool.QueryRow(t.Context(), `INSERT INTO `+table+` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at)
SELECT $1, $2, 'test', s, s + interval '30 seconds', s, CASE WHEN $2 <> 'running' THEN pg_catalog.clock_timestamp() - $4::bigint * interval '1 microsecond' END
FROM (SELECT pg_catalog.clock_timestamp() - $3::bigint * interval '1 microsecond' AS s) AS t
RETURNING id`, source, status, startedAgo.Microseconds(), finishedAgo.Microseconds()).Scan(&id)
	if err != nil {
		t.Fatalf("insert %s run of %q: %v", status, source, err)
	}
	return id
}

// allRuns returns every row of table by ID.
func allRuns(t *testing.T, pool *pgxpool.Pool, table string) map[int64]runRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT id, source, status, owner, started_at, lease_until, heartbeat_at, finished_at, error FROM `+table)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (runRow, error) {
		var x runRow
		err := r.Scan(&x.ID, &x.Source, &x.Status, &x.Owner, &x.StartedAt, &x.LeaseUntil, &x.HeartbeatAt, &x.FinishedAt, &x.Error)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[int64]runRow, len(got))
	for _, r := range got {
		m[r.ID] = r
	}
	return m
}

// pruneTracer records, for each statement a pool ran, whether the
// connection was outside a transaction once it had finished, and can call
// a function after each statement.
type pruneTracer struct {
	mu      sync.Mutex // protects the fields below
	stmts   int
	inTx    int            // statements after which a transaction was still open
	afterFn func(stmt int) // called after each statement, with its number from 1
}

func (p *pruneTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (p *pruneTracer) TraceQueryEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceQueryEndData) {
	p.mu.Lock()
	p.stmts++
	n := p.stmts
	if conn.PgConn().TxStatus() != 'I' {
		p.inTx++
	}
	f := p.afterFn
	p.mu.Unlock()
	if f != nil {
		f(n)
	}
}

func (p *pruneTracer) counts() (stmts, inTx int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stmts, p.inTx
}

// pruneStore returns a store on a pool of its own, traced by a
// pruneTracer, for the table of store.
func pruneStore(t *testing.T, db *pgtest.DB) (*runclaim.PostgresStore, *pruneTracer) {
	t.Helper()
	tr := &pruneTracer{}
	pool := db.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr })
	s, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	return s, tr
}

// TestPruneKeepsRunningAndNewest: Prune deletes finished runs that
// finished before the cut-off, except the newest run of each source; it
// leaves running runs alone, even old ones whose lease has ended, and it
// leaves every row it keeps unchanged.
func TestPruneKeepsRunningAndNewest(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	table := store.Table()
	const h = time.Hour
	var want []int64 // IDs that must survive
	keep := func(id int64) { want = append(want, id) }

	// a: old finished runs of every kind, and a run holding the source.
	for i, st := range []string{"succeeded", "failed", "expired", "released", "succeeded"} {
		insertRun(t, db.Pool, table, "a", st, time.Duration(10-i)*h, time.Duration(10-i)*h-time.Minute)
	}
	run, err := benchClaimer(t, store, "holder").Claim(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	keep(run.ID)
	// b: old finished runs only: the newest stays.
	insertRun(t, db.Pool, table, "b", "succeeded", 9*h, 9*h)
	insertRun(t, db.Pool, table, "b", "failed", 8*h, 8*h)
	keep(insertRun(t, db.Pool, table, "b", "succeeded", 7*h, 7*h))
	// c: a single old run, which is the newest.
	keep(insertRun(t, db.Pool, table, "c", "expired", 9*h, 9*h))
	// d: a running run, started long ago and long out of lease (no claim
	// has expired it yet), is the newest; the older finished run goes.
	insertRun(t, db.Pool, table, "d", "succeeded", 9*h, 9*h)
	keep(insertRun(t, db.Pool, table, "d", "running", 8*h, 0))
	// e: a running run that is not the newest row of its source (a row
	// started later, finished, exists): still untouched.
	keep(insertRun(t, db.Pool, table, "e", "running", 9*h, 0))
	keep(insertRun(t, db.Pool, table, "e", "succeeded", 8*h, 8*h))
	// f: finished within the cut-off: kept even though not the newest.
	keep(insertRun(t, db.Pool, table, "f", "succeeded", 50*time.Minute, 40*time.Minute))
	keep(insertRun(t, db.Pool, table, "f", "failed", 30*time.Minute, 20*time.Minute))

	before := allRuns(t, db.Pool, table)
	n, err := store.Prune(t.Context(), h)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	after := allRuns(t, db.Pool, table)
	if want, got := int64(len(before)-len(want)), n; got != want {
		t.Errorf("Prune deleted %d runs, want %d", got, want)
	}
	var got []int64
	for id, r := range after {
		got = append(got, id)
		if diff := cmp.Diff(before[id], r); diff != "" {
			t.Errorf("Prune changed run %d (-before +after):\n%s", id, diff)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("runs left after Prune (-want +got):\n%s", diff)
	}
}

// TestPruneBatches: Prune deletes more than two batches' worth of runs, one
// statement per batch, each its own transaction, and counts them exactly.
func TestPruneBatches(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	// 2.5 batches of deletable runs over 10 sources, plus each source's
	// newest, which stays.
	const sources, deletable = 10, 2*runclaim.PruneBatchSize + runclaim.PruneBatchSize/2
	_, err := db.Pool.Exec(t.Context(), `INSERT INTO `+store.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at)
SELECT 's' || (g % $2), 'succeeded', 'test', t, t, t, t
FROM pg_catalog.generate_series(1, $1::int) AS g,
     LATERAL (SELECT pg_catalog.now() - interval '1 day' + g * interval '1 second' AS t) AS s`, deletable+sources, sources)
	if err != nil {
		t.Fatal(err)
	}
	ps, tr := pruneStore(t, db)
	n, err := ps.Prune(t.Context(), time.Hour)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if n != deletable {
		t.Errorf("Prune deleted %d runs, want %d", n, deletable)
	}
	if s := readState(t, db.Pool, store.Table()); s.Rows != sources {
		t.Errorf("%d runs left, want %d (the newest of each source)", s.Rows, sources)
	}
	stmts, inTx := tr.counts()
	// A new store reads the table's schema version first, from the
	// catalogs (whether runs record ticks), then sends one statement per
	// batch.
	if want := 1 + (deletable+runclaim.PruneBatchSize-1)/runclaim.PruneBatchSize; stmts != want {
		t.Errorf("Prune ran %d statements, want %d (a read of the schema version, then one per batch of %d)", stmts, want, runclaim.PruneBatchSize)
	}
	if inTx != 0 {
		t.Errorf("%d of Prune's %d statements left a transaction open: a batch is not its own transaction", inTx, stmts)
	}

	// Nothing left to prune: one statement, nothing deleted.
	if n, err := ps.Prune(t.Context(), 0); err != nil || n != 0 {
		t.Errorf("second Prune = %d, %v; want 0, nil", n, err)
	}
}

// TestPruneDoesNotBlockClaims: while a batch of Prune is in the middle of
// its DELETE — held there by a trigger on one of its rows that waits for a
// lock another session holds, with its own row and table locks taken (a
// row locked by another session would not hold it: Prune skips locked
// rows) — claims, heartbeats and finishes
// of the sources it is deleting from go through. They need the advisory
// lock, the running rows and the unique index on running runs, none of
// which Prune takes. The check is structural, not timed: Prune is seen
// waiting in pg_stat_activity before the claims and still after them.
func TestPruneDoesNotBlockClaims(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	table := store.Table()
	// 5 runs of each of 1,000 sources, IDs 1 to 5,000; the first 4,000 are
	// not their source's newest.
	const rows = 5000
	loadHistory(t, db.Pool, store, runclaim.DefaultTable, rows)
	const deletable = rows - historySources

	// Hold the first batch's DELETE at row 500.
	const holdKey = 500500
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION hold_delete() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN PERFORM pg_catalog.pg_advisory_xact_lock(%d); RETURN OLD; END$$;
CREATE TRIGGER hold_delete BEFORE DELETE ON %s FOR EACH ROW WHEN (OLD.id = 500) EXECUTE FUNCTION hold_delete()`, holdKey, table)); err != nil {
		t.Fatal(err)
	}
	blocker, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(context.Background())
	if _, err := blocker.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1)", holdKey); err != nil {
		t.Fatal(err)
	}

	ps, _ := pruneStore(t, db)
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := ps.Prune(ctx, 0)
		done <- result{n, err}
	}()
	var prunePID int32
	prunerWaits := func() bool {
		err := db.Pool.QueryRow(ctx, `SELECT pid FROM pg_catalog.pg_stat_activity
WHERE datname = pg_catalog.current_database() AND pid <> pg_catalog.pg_backend_pid()
  AND wait_event_type = 'Lock' AND query LIKE 'WITH scope AS%'`).Scan(&prunePID)
		return err == nil
	}
	waitUntil(t, 30*time.Second, 5*time.Millisecond, "Prune to wait for the locked row", prunerWaits)
	var held []string
	err = db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT mode ORDER BY mode), '{}') FROM pg_catalog.pg_locks
WHERE pid = $1 AND granted AND relation = $2::regclass`, prunePID, table).Scan(&held)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(held, "RowExclusiveLock") {
		t.Fatalf("Prune, waiting mid-batch, holds %q on the table; want RowExclusiveLock (is it really mid-DELETE?)", held)
	}

	// Claims of sources whose runs the batch is deleting, and of others.
	c := benchClaimer(t, store, "claimer")
	sources := benchSources(historySources)
	var claimed []string
	for i := range 20 {
		src := sources[i*37%historySources]
		claimed = append(claimed, src)
		opCtx, cancel := context.WithTimeout(ctx, 30*time.Second) // a guard against a hang, not a measure
		run, err := c.Claim(opCtx, src)
		if err != nil {
			cancel()
			t.Fatalf("Claim %q while Prune is mid-batch: %v", src, err)
		}
		if err := run.Heartbeat(opCtx); err != nil {
			t.Errorf("Heartbeat while Prune is mid-batch: %v", err)
		}
		if err := run.Finish(opCtx, nil); err != nil {
			t.Errorf("Finish while Prune is mid-batch: %v", err)
		}
		cancel()
	}
	if !prunerWaits() {
		t.Fatal("Prune stopped waiting before the claims were done; the test proves nothing")
	}
	select {
	case r := <-done:
		t.Fatalf("Prune returned while its row was still locked: %d, %v", r.n, r.err)
	default:
	}

	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("Prune: %v", r.err)
	}
	// The claims made a newer run of each claimed source, so each one's
	// previous newest run went too.
	if want := int64(deletable + len(claimed)); r.n != want {
		t.Errorf("Prune deleted %d runs, want %d", r.n, want)
	}
}

// TestPruneContext: Prune with an ended context returns its error and
// deletes nothing; a context that ends between batches stops Prune there,
// with the count of the batches done.
func TestPruneContext(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	loadHistory(t, db.Pool, store, runclaim.DefaultTable, 3000+historySources)

	ps, tr := pruneStore(t, db)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	n, err := ps.Prune(ctx, 0)
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Errorf("Prune(cancelled ctx) = %d, %v; want 0 and an error matching context.Canceled", n, err)
	}
	if err != nil && !strings.HasPrefix(err.Error(), "runclaim: ") {
		t.Errorf("Prune error %q lacks the runclaim: prefix", err)
	}
	if stmts, _ := tr.counts(); stmts != 0 {
		t.Errorf("Prune(cancelled ctx) ran %d statements", stmts)
	}

	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	tr.mu.Lock()
	tr.afterFn = func(stmt int) {
		if stmt == 2 { // the read of the schema version, then the first batch
			cancel()
		}
	}
	tr.mu.Unlock()
	n, err = ps.Prune(ctx, 0)
	if !errors.Is(err, context.Canceled) || n != runclaim.PruneBatchSize {
		t.Errorf("Prune cancelled after its first batch = %d, %v; want %d and an error matching context.Canceled", n, err, runclaim.PruneBatchSize)
	}
	if s := readState(t, db.Pool, store.Table()); s.Rows != 3000+historySources-runclaim.PruneBatchSize {
		t.Errorf("%d runs left, want %d", s.Rows, 3000+historySources-runclaim.PruneBatchSize)
	}

	if _, err := ps.Prune(t.Context(), -time.Second); err == nil {
		t.Error("Prune with a negative age returned no error")
	}
}

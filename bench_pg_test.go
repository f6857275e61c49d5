package runclaim_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
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
	"github.com/runclaim/runclaim/internal/tcpproxy"
)

// The benchmarks of the performance targets listed in BENCHMARKS.md. Each
// one that compares the library with a floor measures both in the same
// loop, on the same pool (and, single-threaded, the same connection),
// alternating which goes first, and reports each one's percentiles and
// their ratio with b.ReportMetric, so that one line of `go test -bench`
// output says it. Where ns/op would mix the candidate with its floor it is
// suppressed.
// BENCHMARKS.md has the command, the figures and what bounds each one.
//
// RUNCLAIM_BENCH_ROWS sets the number of finished runs BenchmarkHistory1M
// loads (default 1,000,000, or 100,000 in a -benchtime=1x smoke run).

// benchRowsEnv names the environment variable that sets how many finished
// runs BenchmarkHistory1M loads.
const benchRowsEnv = "RUNCLAIM_BENCH_ROWS"

// ---------------------------------------------------------------------------
// Helpers

// latencies collects the durations of one kind of operation.
type latencies []time.Duration

// measure runs f and records how long it took.
func (l *latencies) measure(f func()) {
	start := time.Now()
	f()
	*l = append(*l, time.Since(start))
}

// pct returns the p-th percentile (nearest rank), or 0 without samples.
func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// ratio is a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// reportPair reports the p50s of a candidate and its floor, and their ratio.
func reportPair(b *testing.B, cand, floor string, c, f latencies) {
	b.ReportMetric(micros(c.pct(50)), cand+"-p50-µs")
	b.ReportMetric(micros(f.pct(50)), floor+"-p50-µs")
	b.ReportMetric(ratio(micros(c.pct(50)), micros(f.pct(50))), cand+"/"+floor)
	b.ReportMetric(0, "ns/op")
}

// smokeRun reports whether the benchmarks run once each (-benchtime=1x), as
// the CI smoke run does.
func smokeRun() bool {
	f := flag.Lookup("test.benchtime")
	return f != nil && f.Value.String() == "1x"
}

// benchDelayEnv names the environment variable that adds network delay
// to the benchmarks' connections: a Go duration (for example 250us), by
// which internal/tcpproxy delays every chunk in each direction, so that a
// round trip takes twice as long more.
const benchDelayEnv = "RUNCLAIM_BENCH_DELAY"

// benchDB returns a fresh database, as pgtest.New does; with
// RUNCLAIM_BENCH_DELAY set, its DSN, its Pool and every pool opened with
// its NewPool go through a TCP proxy that delays each direction by that
// much.
func benchDB(b testing.TB) *pgtest.DB {
	b.Helper()
	db := pgtest.New(b)
	v := os.Getenv(benchDelayEnv)
	if v == "" {
		return db
	}
	delay, err := time.ParseDuration(v)
	if err != nil || delay < 0 {
		b.Fatalf("%s=%q: want a duration such as 250us", benchDelayEnv, v)
	}
	u, err := url.Parse(db.DSN)
	if err != nil || u.Host == "" {
		b.Fatalf("%s needs a URL DSN: %v", benchDelayEnv, err)
	}
	proxy, err := tcpproxy.Start(u.Host)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = proxy.Close() }) // after the pools, which close first
	proxy.Delay(delay)
	u.Host = proxy.Addr().String()
	delayed := *db
	delayed.DSN = u.String()
	delayed.Pool = delayed.NewPool(b, nil)
	if testing.Verbose() {
		b.Logf("every connection delayed %v each way by a proxy at %s", delay, proxy.Addr())
	}
	return &delayed
}

// benchStore returns a migrated Postgres store on pool.
func benchStore(b testing.TB, pool *pgxpool.Pool, opts ...runclaim.PostgresOption) *runclaim.PostgresStore {
	b.Helper()
	s, err := runclaim.NewPostgresStore(pool, opts...)
	if err != nil {
		b.Fatalf("NewPostgresStore: %v", err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatalf("Migrate: %v", err)
	}
	return s
}

// benchClaimer returns a Claimer on store with a long lease, so that no run
// expires during a benchmark.
func benchClaimer(b testing.TB, store runclaim.Store, owner string, opts ...runclaim.Option) *runclaim.Claimer {
	b.Helper()
	c, err := runclaim.New(store, append([]runclaim.Option{runclaim.WithOwner(owner), runclaim.WithLease(time.Hour)}, opts...)...)
	if err != nil {
		b.Fatalf("New: %v", err)
	}
	return c
}

// benchSources returns n source names.
func benchSources(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("src-%04d", i)
	}
	return s
}

// mustWin claims source and fails the benchmark unless the claim won.
func mustWin(b testing.TB, c *runclaim.Claimer, source string, opts ...runclaim.ClaimOption) *runclaim.Run {
	run, err := c.Claim(context.Background(), source, opts...)
	if err != nil {
		b.Fatalf("Claim %q: %v", source, err)
	}
	return run
}

// mustFinish finishes run as succeeded.
func mustFinish(b testing.TB, run *runclaim.Run) {
	if err := run.Finish(context.Background(), nil); err != nil {
		b.Fatalf("Finish run %d: %v", run.ID, err)
	}
}

// mustLose claims a source that another run holds and fails the benchmark
// unless the claim was skipped as ErrAlreadyRunning.
func mustLose(b testing.TB, c *runclaim.Claimer, source string) {
	run, err := c.Claim(context.Background(), source)
	if !errors.Is(err, runclaim.ErrAlreadyRunning) {
		if run != nil {
			_ = run.Finish(context.Background(), nil)
		}
		b.Fatalf("Claim %q of a held source: got %v, want ErrAlreadyRunning", source, err)
	}
}

// insertFloor is the floor of a winning claim: one autocommit INSERT of the
// same running row into the runs table itself, so that it pays the same
// round trip, the same WAL flush and the same index updates (primary key,
// history index and the partial unique index on running runs).
type insertFloor struct {
	store  *runclaim.PostgresStore
	pool   *pgxpool.Pool
	insert string
	lease  int64
}

func newInsertFloor(store *runclaim.PostgresStore, pool *pgxpool.Pool) *insertFloor {
	return &insertFloor{store: store, pool: pool, lease: time.Hour.Microseconds(), insert: `INSERT INTO ` + store.Table() +
		` (source, status, owner, started_at, lease_until, heartbeat_at, min_interval)
VALUES ($1, 'running', $2, pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp() + $3::bigint * interval '1 microsecond', pg_catalog.clock_timestamp(), interval '0')
RETURNING id, started_at, lease_until`}
}

// insertRow inserts a running row for source and returns its ID and start.
func (f *insertFloor) insertRow(b testing.TB, source string) (int64, time.Time) {
	var (
		id             int64
		started, until time.Time
	)
	if err := f.pool.QueryRow(context.Background(), f.insert, source, "floor", f.lease).Scan(&id, &started, &until); err != nil {
		b.Fatalf("floor INSERT: %v", err)
	}
	return id, started
}

// finishRow ends the floor's row the way Finish ends a run, so that both
// leave the same row versions behind.
func (f *insertFloor) finishRow(b testing.TB, id int64, started time.Time, source string) {
	if err := f.store.Finish(context.Background(), runclaim.FinishRequest{ID: id, Source: source, StartedAt: started, Status: runclaim.StatusSucceeded}); err != nil {
		b.Fatalf("finish floor row %d: %v", id, err)
	}
}

// selectOne is the floor of a losing claim: one round trip that reads
// nothing and writes nothing.
func selectOne(b testing.TB, pool *pgxpool.Pool) {
	var one int
	if err := pool.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil {
		b.Fatalf("SELECT 1: %v", err)
	}
}

// walPosition returns the server's WAL insert position, in bytes, and the
// next transaction ID it will assign. Both are server-wide.
func walPosition(b testing.TB, pool *pgxpool.Pool) (lsn, nextXID int64) {
	err := pool.QueryRow(context.Background(), `SELECT
	pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_insert_lsn(), '0/0')::bigint,
	pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint`).Scan(&lsn, &nextXID)
	if err != nil {
		b.Fatalf("read WAL position: %v", err)
	}
	return lsn, nextXID
}

// overlappingRuns counts pairs of runs of one source whose lifetimes
// overlap: double runs. It is the check of TestContentionOneSource.
func overlappingRuns(b testing.TB, pool *pgxpool.Pool, table string) int64 {
	var n int64
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` a JOIN `+table+` b
  ON b.source = a.source AND b.id <> a.id
 AND b.started_at >= a.started_at AND (b.started_at, b.id) > (a.started_at, a.id)
 AND b.started_at < coalesce(a.finished_at, 'infinity')
 AND tstzrange(a.started_at, coalesce(a.finished_at, 'infinity')) && tstzrange(b.started_at, coalesce(b.finished_at, 'infinity'))`).Scan(&n)
	if err != nil {
		b.Fatalf("overlap query: %v", err)
	}
	return n
}

// ---------------------------------------------------------------------------
// The reference: one statement per round trip

// refClaimer is the protocol the library is measured against: the one
// runclaim was designed to replace (see Targets in BENCHMARKS.md), one
// statement per round trip in an explicit transaction (BEGIN; pre-check;
// try-lock; re-check; INSERT; COMMIT). It is
// the minimal form of it, without lease expiry or a minimum interval, which
// flatters the reference.
type refClaimer struct {
	pool      *pgxpool.Pool
	namespace string
	owner     string
	lease     int64 // microseconds
	check     string
	insert    string
	finish    string
}

// errRefSkipped is the reference's skip.
var errRefSkipped = errors.New("reference claim skipped")

func newRefClaimer(store *runclaim.PostgresStore, pool *pgxpool.Pool, owner string) *refClaimer {
	t := store.Table()
	return &refClaimer{
		pool:      pool,
		namespace: runclaim.DefaultNamespace,
		owner:     owner,
		lease:     time.Hour.Microseconds(),
		check:     `SELECT EXISTS (SELECT FROM ` + t + ` WHERE source = $1 AND status = 'running')`,
		insert: `INSERT INTO ` + t + ` (source, status, owner, started_at, lease_until, heartbeat_at, min_interval)
VALUES ($1, 'running', $2, pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp() + $3::bigint * interval '1 microsecond', pg_catalog.clock_timestamp(), interval '0')
RETURNING id`,
		finish: `UPDATE ` + t + ` SET status = 'succeeded', finished_at = pg_catalog.clock_timestamp() WHERE id = $1 AND status = 'running'`,
	}
}

// claim runs the reference protocol once: six round trips for a win.
func (r *refClaimer) claim(ctx context.Context, source string) (id int64, err error) {
	tx, err := r.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) // after Commit, no round trip
	var running, locked bool
	if err := tx.QueryRow(ctx, r.check, source).Scan(&running); err != nil {
		return 0, err
	}
	if running {
		return 0, errRefSkipped
	}
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1::bigint)`,
		runclaim.AdvisoryKeyOf(r.namespace, source)).Scan(&locked); err != nil {
		return 0, err
	}
	if !locked {
		return 0, errRefSkipped
	}
	if err := tx.QueryRow(ctx, r.check, source).Scan(&running); err != nil {
		return 0, err
	}
	if running {
		return 0, errRefSkipped
	}
	if err := tx.QueryRow(ctx, r.insert, source, r.owner, r.lease).Scan(&id); err != nil {
		return 0, err
	}
	return id, tx.Commit(ctx)
}

// finishRun ends a reference run as succeeded: one round trip.
func (r *refClaimer) finishRun(ctx context.Context, id int64) error {
	_, err := r.pool.Exec(ctx, r.finish, id)
	return err
}

// ---------------------------------------------------------------------------
// Both forms side by side

// timedOp is one operation of an interleaved benchmark: run does step i of
// it and returns how long its timed part took (set-up and clean-up, such as
// finishing a won run, are not timed).
type timedOp struct {
	name string
	run  func(i int) time.Duration
}

// timed returns how long f took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// interleave runs every op once per iteration, in a new random order each
// time, for 50 untimed warm-up iterations (which prepare the statements and
// warm the caches) and then as b.Loop says, and returns the latencies of
// each op and the number of timed iterations.
func interleave(b *testing.B, ops []timedOp) ([]latencies, int) {
	res := make([]latencies, len(ops))
	step := func(i int, keep bool) {
		for _, k := range rand.Perm(len(ops)) {
			if d := ops[k].run(i); keep {
				res[k] = append(res[k], d)
			}
		}
	}
	// 50 rounds of warm-up; 2 in the smoke run (-benchtime=1x), which
	// checks that the benchmark runs, not what it measures.
	warm := 50
	if smokeRun() {
		warm = 2
	}
	for i := range warm {
		step(i, false)
	}
	n := 0
	for b.Loop() {
		step(warm+n, true)
		n++
	}
	return res, n
}

// benchForms returns a store pinned to each form of the claim (batch, then
// function) on pool, whose table Migrate has brought to the latest version.
func benchForms(b testing.TB, pool *pgxpool.Pool, opts ...runclaim.PostgresOption) (batch *runclaim.BatchStore, function *runclaim.PostgresStore) {
	b.Helper()
	benchStore(b, pool, opts...)
	return runclaim.NewBatchStore(b, formStore(b, pool, claimForms[0], opts...)), formStore(b, pool, claimForms[0], opts...)
}

// backendCPU returns the CPU time the server has spent, so far, in the
// client backends of monitor's database other than monitor's own, from
// /proc/<pid>/schedstat read by pg_read_file: that needs a superuser (or
// pg_read_server_files) and a server on Linux; ok is false otherwise. It
// counts only backends alive when it is called, so compare two readings
// over a phase in which the same connections stay open.
func backendCPU(b testing.TB, monitor *pgxpool.Pool) (cpu time.Duration, ok bool) {
	var ns int64
	err := monitor.QueryRow(context.Background(), `SELECT coalesce(sum(pg_catalog.split_part(
	pg_catalog.pg_read_file('/proc/' || pid || '/schedstat', 0, 200, true), ' ', 1)::bigint), 0)
FROM pg_catalog.pg_stat_activity
WHERE datname = pg_catalog.current_database() AND pid <> pg_catalog.pg_backend_pid() AND backend_type = 'client backend'`).Scan(&ns)
	if err != nil {
		if testing.Verbose() {
			b.Logf("no backend CPU figures: %v", err)
		}
		return 0, false
	}
	return time.Duration(ns), true
}

// ---------------------------------------------------------------------------
// Single-connection latency

// BenchmarkClaimWin: a winning claim in each form against one autocommit
// INSERT of the same running row into the runs table (target: p50 ≤
// 1.25×). Sources rotate; each run is finished, untimed, before the next
// claim.
func BenchmarkClaimWin(b *testing.B) {
	db := benchDB(b)
	batch, function := benchForms(b, db.Pool)
	cb, cf := benchClaimer(b, batch, "bench"), benchClaimer(b, function, "bench")
	floor := newInsertFloor(function, db.Pool)
	sources := benchSources(16)
	claim := func(c *runclaim.Claimer) func(int) time.Duration {
		return func(i int) time.Duration {
			var run *runclaim.Run
			d := timed(func() { run = mustWin(b, c, sources[i%len(sources)]) })
			mustFinish(b, run)
			return d
		}
	}
	res, _ := interleave(b, []timedOp{
		{"insert", func(i int) time.Duration {
			src := sources[i%len(sources)]
			var (
				id      int64
				started time.Time
			)
			d := timed(func() { id, started = floor.insertRow(b, src) })
			floor.finishRow(b, id, started, src)
			return d
		}},
		{"batch", claim(cb)},
		{"func", claim(cf)},
	})
	reportForms(b, res, "insert")
}

// reportForms reports the p50 of a floor and of each form (res holds the
// floor's latencies, the batch's and the function's, in that order), each
// form's ratio to the floor, and the function's to the batch.
func reportForms(b *testing.B, res []latencies, floor string) {
	f, bt, fn := micros(res[0].pct(50)), micros(res[1].pct(50)), micros(res[2].pct(50))
	b.ReportMetric(f, floor+"-p50-µs")
	b.ReportMetric(bt, "batch-p50-µs")
	b.ReportMetric(fn, "func-p50-µs")
	b.ReportMetric(ratio(bt, f), "batch/"+floor)
	b.ReportMetric(ratio(fn, f), "func/"+floor)
	b.ReportMetric(ratio(fn, bt), "func/batch")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkClaimLose: a losing claim in each form on a source that another
// run has held for a while, against SELECT 1 (target: p50 ≤ 1.4×), and what
// a losing claim costs besides its latency, each form over a separate run
// of losses minus a run of as many SELECT 1s:
//   - wal-B and xid (target: none): the server's WAL insert position and
//     next transaction ID. Both are server-wide, so they are exact only on a
//     server of its own (the pgtest container), and noisy on a shared one.
//   - db-cpu-µs: the CPU time of the database's backends (see backendCPU)
//     per loss, and per SELECT 1 (select1-db-cpu-µs), when the server lets
//     the benchmark read it. The server's own work for a SELECT 1 (a round
//     trip, a transaction) is part of every loss too.
//
// The costs are measured in rounds of losses in each form and SELECT 1s,
// in a new order every round.
func BenchmarkClaimLose(b *testing.B) {
	db := benchDB(b)
	batch, function := benchForms(b, db.Pool)
	monitor := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 1 })
	holder := benchClaimer(b, function, "holder")
	lb, lf := benchClaimer(b, batch, "loser"), benchClaimer(b, function, "loser")
	const held = "held"
	mustWin(b, holder, held)
	// Held for a while: the row is committed, all-visible and hinted, as it
	// is after the first few ticks that lose to it.
	if _, err := db.Pool.Exec(context.Background(), "VACUUM (ANALYZE) "+batch.Table()); err != nil {
		b.Fatal(err)
	}
	lose := func(c *runclaim.Claimer) func(int) time.Duration {
		return func(int) time.Duration { return timed(func() { mustLose(b, c, held) }) }
	}
	sel := func(int) time.Duration { return timed(func() { selectOne(b, db.Pool) }) }
	res, n := interleave(b, []timedOp{{"select1", sel}, {"batch", lose(lb)}, {"func", lose(lf)}})
	reportForms(b, res, "select1")

	// The costs: rounds of k losses in each form and k SELECT 1s, in a new
	// order each round, so that the machine's drift spreads evenly.
	k := min(max(n/10, 1), 100)
	type cost struct {
		wal, xid int64
		cpu      time.Duration
		cpuOK    bool
	}
	ops := []func(){
		func() { selectOne(b, db.Pool) },
		func() { mustLose(b, lb, held) },
		func() { mustLose(b, lf, held) },
	}
	costs := make([]cost, len(ops))
	for i := range costs {
		costs[i].cpuOK = true
	}
	const rounds = 10
	for range rounds {
		for _, i := range rand.Perm(len(ops)) {
			lsn0, xid0 := walPosition(b, monitor)
			cpu0, ok0 := backendCPU(b, monitor)
			for range k {
				ops[i]()
			}
			cpu1, ok1 := backendCPU(b, monitor)
			lsn1, xid1 := walPosition(b, monitor)
			c := &costs[i]
			c.wal, c.xid, c.cpu = c.wal+lsn1-lsn0, c.xid+xid1-xid0, c.cpu+cpu1-cpu0
			c.cpuOK = c.cpuOK && ok0 && ok1
		}
	}
	per := float64(rounds * k)
	floor := costs[0]
	for i, name := range []string{"", "batch", "func"} {
		if i == 0 {
			continue
		}
		c := costs[i]
		b.ReportMetric(float64(c.wal-floor.wal)/per, name+"-wal-B/lose")
		b.ReportMetric(float64(c.xid-floor.xid)/per, name+"-xid/lose")
		if c.cpuOK && floor.cpuOK {
			b.ReportMetric(micros(c.cpu)/per, name+"-db-cpu-µs/lose")
		}
	}
	if floor.cpuOK {
		b.ReportMetric(micros(floor.cpu)/per, "select1-db-cpu-µs")
	}
}

// BenchmarkClaimLoseBreakdown explains BenchmarkClaimLose: it replays the
// losing claim's batch, as the store sends it (recorded by a tracer), one
// statement at a time, and the function's call, and reports the p50 of
// each prefix of the batch, of the call, of SELECT 1 and of Claimer.Claim
// in each form, all interleaved on one connection. The differences are
// what each statement adds on the server, and what the library adds in Go.
func BenchmarkClaimLoseBreakdown(b *testing.B) {
	db := benchDB(b)
	rec := &stmtRecorder{}
	traced := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 1; c.ConnConfig.Tracer = rec })
	batch, function := benchForms(b, traced)
	holder := benchClaimer(b, function, "holder")
	lb, lf := benchClaimer(b, batch, "loser"), benchClaimer(b, function, "loser")
	const held = "held"
	mustWin(b, holder, held)
	if _, err := traced.Exec(context.Background(), "VACUUM (ANALYZE) "+batch.Table()); err != nil {
		b.Fatal(err)
	}
	rec.take()
	mustLose(b, lb, held)
	stmts := rec.take()
	mustLose(b, lf, held)
	call := rec.take()
	if len(stmts) < 2 || len(call) != 1 {
		b.Fatalf("recorded %d statements for a losing claim as the batch, %d as the function", len(stmts), len(call))
	}
	ctx := context.Background()
	replay := func(sts []recordedStmt) func(int) time.Duration {
		return func(int) time.Duration {
			return timed(func() {
				var bt pgx.Batch
				for _, st := range sts {
					bt.Queue(st.sql, st.args...)
				}
				if err := traced.SendBatch(ctx, &bt).Close(); err != nil {
					b.Fatalf("replay: %v", err)
				}
			})
		}
	}
	ops := []timedOp{{"select1", func(int) time.Duration { return timed(func() { selectOne(b, traced) }) }}}
	for n := 1; n <= len(stmts); n++ {
		ops = append(ops, timedOp{fmt.Sprintf("stmts%d", n), replay(stmts[:n])})
	}
	ops = append(ops,
		timedOp{"batch-claim", func(int) time.Duration { return timed(func() { mustLose(b, lb, held) }) }},
		timedOp{"call", replay(call)},
		timedOp{"func-claim", func(int) time.Duration { return timed(func() { mustLose(b, lf, held) }) }},
	)
	res, _ := interleave(b, ops)
	rec.take()
	for k, op := range ops {
		b.ReportMetric(micros(res[k].pct(50)), op.name+"-p50-µs")
	}
	// Planning is not part of the cost: pgx prepares each statement once
	// per connection, and after five custom plans the server reuses a
	// generic one. The pool has one connection, so this reads its plans.
	sqls := make([]string, 0, len(stmts)+1)
	for _, st := range append(stmts, call...) {
		sqls = append(sqls, st.sql)
	}
	var custom, generic int64
	if err := traced.QueryRow(ctx, `SELECT coalesce(sum(custom_plans), 0), coalesce(sum(generic_plans), 0)
FROM pg_catalog.pg_prepared_statements WHERE statement = ANY($1)`, sqls).Scan(&custom, &generic); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(100*ratio(float64(generic), float64(generic+custom)), "generic-plan-%")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkClaimVsReference: a winning claim of the library, in each form,
// against the one-statement-per-round-trip reference, on one pool.
func BenchmarkClaimVsReference(b *testing.B) {
	db := benchDB(b)
	batch, function := benchForms(b, db.Pool)
	ref := newRefClaimer(function, db.Pool, "ref")
	sources := benchSources(16)
	ctx := context.Background()
	claim := func(c *runclaim.Claimer) func(int) time.Duration {
		return func(i int) time.Duration {
			var run *runclaim.Run
			d := timed(func() { run = mustWin(b, c, sources[i%len(sources)]) })
			mustFinish(b, run)
			return d
		}
	}
	res, _ := interleave(b, []timedOp{
		{"ref", func(i int) time.Duration {
			var (
				id  int64
				err error
			)
			d := timed(func() { id, err = ref.claim(ctx, sources[i%len(sources)]) })
			if err != nil {
				b.Fatalf("reference claim: %v", err)
			}
			if err := ref.finishRun(ctx, id); err != nil {
				b.Fatalf("reference finish: %v", err)
			}
			return d
		}},
		{"batch", claim(benchClaimer(b, batch, "lib"))},
		{"func", claim(benchClaimer(b, function, "lib"))},
	})
	reportForms(b, res, "ref")
}

// ---------------------------------------------------------------------------
// Concurrency

// throughputPhase is how long each protocol runs per iteration of
// BenchmarkThroughput16.
const throughputPhase = 300 * time.Millisecond

// BenchmarkThroughput16: 16 workers, each on a source of its own, claim and
// finish in a loop; the library in each form against the reference, in
// phases of throughputPhase on the same pool, in a new order every
// iteration (target: ≥ 1.6×).
func BenchmarkThroughput16(b *testing.B) {
	const workers = 16
	db := benchDB(b)
	pool := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = workers })
	batch, function := benchForms(b, pool)
	sources := benchSources(workers)
	claimers := [2][]*runclaim.Claimer{make([]*runclaim.Claimer, workers), make([]*runclaim.Claimer, workers)}
	refs := make([]*refClaimer, workers)
	for w := range workers {
		claimers[0][w] = benchClaimer(b, batch, fmt.Sprintf("lib-%02d", w))
		claimers[1][w] = benchClaimer(b, function, fmt.Sprintf("lib-%02d", w))
		refs[w] = newRefClaimer(function, pool, fmt.Sprintf("ref-%02d", w))
	}
	ctx := context.Background()
	const ref = 2 // protocols: 0 the batch, 1 the function, 2 the reference

	// phase runs one protocol on every worker for d and returns how many
	// claim+finish cycles completed and how long the phase took.
	phase := func(proto int, d time.Duration) (int64, time.Duration) {
		var (
			done     atomic.Int64
			failed   atomic.Pointer[error]
			wg       sync.WaitGroup
			deadline = time.Now().Add(d)
		)
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					var err error
					if proto == ref {
						var id int64
						if id, err = refs[w].claim(ctx, sources[w]); err == nil {
							err = refs[w].finishRun(ctx, id)
						}
					} else {
						var run *runclaim.Run
						if run, err = claimers[proto][w].Claim(ctx, sources[w]); err == nil {
							err = run.Finish(ctx, nil)
						}
					}
					if err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
					done.Add(1)
				}
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			b.Fatalf("worker (protocol %d): %v", proto, *err)
		}
		return done.Load(), time.Since(start)
	}
	for proto := range 3 { // open the connections, prepare the statements
		phase(proto, 50*time.Millisecond)
	}

	var (
		ops   [3]int64
		spent [3]time.Duration
	)
	for b.Loop() {
		for _, proto := range rand.Perm(3) {
			n, d := phase(proto, throughputPhase)
			ops[proto], spent[proto] = ops[proto]+n, spent[proto]+d
		}
	}
	var rate [3]float64
	for p := range rate {
		rate[p] = float64(ops[p]) / spent[p].Seconds()
	}
	b.ReportMetric(rate[0], "batch-ops/s")
	b.ReportMetric(rate[1], "func-ops/s")
	b.ReportMetric(rate[ref], "ref-ops/s")
	b.ReportMetric(ratio(rate[0], rate[ref]), "batch/ref")
	b.ReportMetric(ratio(rate[1], rate[ref]), "func/ref")
	b.ReportMetric(ratio(rate[1], rate[0]), "func/batch")
	b.ReportMetric(0, "ns/op")
}

// contentionPhase is how long the 64 workers of BenchmarkContention64 run
// per iteration and form.
const contentionPhase = 500 * time.Millisecond

// contentionSample is what the wait-event sampler of BenchmarkContention64
// saw: backends of the benchmark's database, and how many of them were
// waiting for a heavyweight lock (a row, a transaction, an advisory lock:
// what a blocking claim would wait for) or for the lock manager's
// partition lock.
type contentionSample struct {
	backends, lockWaits, lockManagerWaits int64
}

func (s *contentionSample) add(o contentionSample) {
	s.backends += o.backends
	s.lockWaits += o.lockWaits
	s.lockManagerWaits += o.lockManagerWaits
}

// contentionStats is what BenchmarkContention64 collects for one form.
type contentionStats struct {
	lose, probe latencies
	wins        int64
	waits       contentionSample
	elapsed     time.Duration
	cpu         time.Duration // the backends' CPU time (see backendCPU)
	cpuOK       bool
}

// BenchmarkContention64: 64 workers, each with a Claimer of its own, claim
// one source; a winner holds the run for 2 ms and finishes it. Every
// iteration runs a phase with each form of the claim, in a new order. For
// each form it reports the p50 and p99 of a losing attempt's time, the same
// percentiles of a SELECT 1 sent by a 65th goroutine under the same load
// (the floor of an attempt there), what share of the database's backends a
// sampler found waiting for a heavyweight lock (lock-wait-%: a loser that
// waited for the holder would show here) or for the lock manager
// (lockmgr-wait-%), and the database's CPU time per attempt, won or lost
// (db-cpu-µs/attempt: the backends' CPU over the phases, see backendCPU,
// divided by the attempts); and the double runs that the SQL overlap check
// finds in the history (must be 0).
//
//   - spin: every worker claims again as soon as its attempt returns, which
//     saturates the two cores of the machine the figures come from; the
//     latencies then measure the CPU run queue as much as the claim.
//   - tick=50ms: every worker claims once per 50 ms tick, at a random
//     phase, like 64 replicas whose schedulers tick on their own; this is
//     the figure the 3 ms target applies to.
func BenchmarkContention64(b *testing.B) {
	const workers = 64
	db := benchDB(b)
	pool := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = workers + 2 })
	monitor := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 1 })
	batch, function := benchForms(b, pool)
	var claimers [2][]*runclaim.Claimer
	for f, store := range []runclaim.Store{batch, function} {
		claimers[f] = make([]*runclaim.Claimer, workers)
		for w := range workers {
			claimers[f][w] = benchClaimer(b, store, fmt.Sprintf("w%02d", w))
		}
	}
	const source = "contended"
	ctx := context.Background()

	// phase runs the workers of form f, the probe and the sampler for d;
	// pace is each worker's tick, or 0 to spin.
	phase := func(f int, d, pace time.Duration, st *contentionStats) {
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex // protects st.lose and failure
			failure  error
			nwins    atomic.Int64
			deadline = time.Now().Add(d)
		)
		fail := func(err error) {
			mu.Lock()
			defer mu.Unlock()
			failure = err
		}
		cpu0, ok0 := backendCPU(b, monitor)
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				var mine latencies
				defer func() {
					mu.Lock()
					st.lose = append(st.lose, mine...)
					mu.Unlock()
				}()
				var tick *time.Ticker
				if pace > 0 {
					time.Sleep(time.Duration(w) * pace / workers) // spread the phases
					tick = time.NewTicker(pace)
					defer tick.Stop()
				}
				for time.Now().Before(deadline) {
					start := time.Now()
					run, err := claimers[f][w].Claim(ctx, source)
					took := time.Since(start)
					if err == nil {
						nwins.Add(1)
						time.Sleep(2 * time.Millisecond) // the job
						err = run.Finish(ctx, nil)
					} else if errors.Is(err, runclaim.ErrNotClaimed) {
						mine = append(mine, took)
						err = nil
					}
					if err != nil {
						fail(err)
						return
					}
					if tick != nil {
						<-tick.C
					}
				}
			})
		}
		wg.Go(func() {
			for time.Now().Before(deadline) {
				var one int
				var err error
				d := timed(func() { err = pool.QueryRow(ctx, "SELECT 1").Scan(&one) })
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				st.probe = append(st.probe, d)
				mu.Unlock()
				if pace > 0 {
					time.Sleep(pace / 4)
				}
			}
		})
		var waits contentionSample
		wg.Go(func() {
			for time.Now().Before(deadline) {
				var s contentionSample
				err := monitor.QueryRow(ctx, `SELECT count(*),
	count(*) FILTER (WHERE wait_event_type = 'Lock'),
	count(*) FILTER (WHERE wait_event_type = 'LWLock' AND wait_event = 'LockManager')
FROM pg_catalog.pg_stat_activity
WHERE datname = pg_catalog.current_database() AND pid <> pg_catalog.pg_backend_pid() AND state = 'active'`).Scan(&s.backends, &s.lockWaits, &s.lockManagerWaits)
				if err != nil {
					fail(err)
					return
				}
				waits.add(s)
				time.Sleep(10 * time.Millisecond)
			}
		})
		wg.Wait()
		st.elapsed += time.Since(start)
		cpu1, ok1 := backendCPU(b, monitor)
		st.cpu += cpu1 - cpu0
		st.cpuOK = ok0 && ok1
		if failure != nil {
			b.Fatalf("worker: %v", failure)
		}
		st.wins += nwins.Load()
		st.waits.add(waits)
	}

	for _, mode := range []struct {
		name string
		pace time.Duration
	}{{"spin", 0}, {"tick=50ms", 50 * time.Millisecond}} {
		b.Run(mode.name, func(b *testing.B) {
			if _, err := pool.Exec(ctx, "TRUNCATE "+batch.Table()); err != nil {
				b.Fatal(err)
			}
			for f := range 2 { // open the connections, prepare the statements
				phase(f, 100*time.Millisecond, mode.pace, &contentionStats{})
			}
			var stats [2]contentionStats
			for b.Loop() {
				for _, f := range rand.Perm(2) {
					phase(f, contentionPhase, mode.pace, &stats[f])
				}
			}
			b.StopTimer()
			doubles := overlappingRuns(b, pool, batch.Table())
			if doubles != 0 {
				b.Errorf("G1 broken: %d pairs of runs of one source overlap in the history", doubles)
			}
			for f, name := range []string{"batch", "func"} {
				st := &stats[f]
				b.ReportMetric(micros(st.lose.pct(50)), name+"-lose-p50-µs")
				b.ReportMetric(micros(st.lose.pct(99)), name+"-lose-p99-µs")
				b.ReportMetric(micros(st.probe.pct(50)), name+"-select1-p50-µs")
				b.ReportMetric(micros(st.probe.pct(99)), name+"-select1-p99-µs")
				b.ReportMetric(100*ratio(float64(st.waits.lockWaits), float64(st.waits.backends)), name+"-lock-wait-%")
				b.ReportMetric(100*ratio(float64(st.waits.lockManagerWaits), float64(st.waits.backends)), name+"-lockmgr-wait-%")
				b.ReportMetric(float64(len(st.lose))/st.elapsed.Seconds(), name+"-losses/s")
				b.ReportMetric(float64(st.wins)/st.elapsed.Seconds(), name+"-wins/s")
				if st.cpuOK {
					b.ReportMetric(micros(st.cpu)/float64(int64(len(st.lose))+st.wins), name+"-db-cpu-µs/attempt")
				}
			}
			b.ReportMetric(float64(doubles), "double-runs")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// ---------------------------------------------------------------------------
// History

// historyRows is how many finished runs BenchmarkHistory1M loads.
func historyRows(b testing.TB) int {
	if s := os.Getenv(benchRowsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			b.Fatalf("%s=%q: want a number of rows", benchRowsEnv, s)
		}
		return n
	}
	if smokeRun() {
		return 100_000
	}
	return 1_000_000
}

// historySources is how many sources BenchmarkHistory1M spreads its runs
// over.
const historySources = 1000

// loadHistory fills table with rows finished runs spread over
// historySources sources, the newest an hour old, and vacuums and analyzes
// it. It drops the history index during the load and builds it again after.
func loadHistory(b testing.TB, pool *pgxpool.Pool, store *runclaim.PostgresStore, table string, rows int) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	if _, err := pool.Exec(ctx, "DROP INDEX "+pgx.Identifier{"public", table + "_history"}.Sanitize()); err != nil {
		b.Fatal(err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO `+store.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at)
SELECT 'src-' || lpad((g % $2)::text, 4, '0'), 'succeeded', 'history', t, t + interval '30 seconds', t, t + interval '1 second'
FROM pg_catalog.generate_series(1, $1::int) AS g,
     LATERAL (SELECT pg_catalog.now() - interval '1 hour' - ($1::int - g) * interval '1 second' AS t) AS s`, rows, historySources)
	if err != nil {
		b.Fatalf("load history: %v", err)
	}
	// Migrate does not repair a dropped index (on a current schema it only
	// reads the catalogs): build it again as version 1 did.
	if _, err := pool.Exec(ctx, "CREATE INDEX "+pgx.Identifier{table + "_history"}.Sanitize()+" ON "+store.Table()+" (source, started_at DESC)"); err != nil {
		b.Fatalf("rebuild the history index: %v", err)
	}
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+store.Table()); err != nil {
		b.Fatal(err)
	}
	if testing.Verbose() {
		b.Logf("loaded %d finished runs in %v", rows, time.Since(start).Round(time.Millisecond))
	}
}

// BenchmarkHistory1M: a winning claim in each form, with a minimum interval
// so that the claim also reads the source's last start, on a table holding
// 1,000,000 finished runs over 1,000 sources against the same claim on an
// empty table (target: p50 ≤ 1.10×). The history is loaded once per
// process, however many times -count runs the sub-benchmark.
func BenchmarkHistory1M(b *testing.B) {
	rows := historyRows(b)
	db := benchDB(b)
	const fullTable = "runclaim_history"
	emptyBatch, emptyFunc := benchForms(b, db.Pool)
	fullBatch, fullFunc := benchForms(b, db.Pool, runclaim.WithTable("public", fullTable))
	loadHistory(b, db.Pool, fullBatch.PostgresStore, fullTable, rows)
	var loaded int64
	if err := db.Pool.QueryRow(context.Background(), "SELECT coalesce(max(id), 0) FROM "+fullBatch.Table()).Scan(&loaded); err != nil {
		b.Fatal(err)
	}

	b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
		ctx := context.Background()
		// Start each run from the loaded state: an empty table and the
		// loaded history. The empty table is not vacuumed: a generic plan
		// cached while the table is known to be empty (vacuumed with no
		// rows) is a sequential scan, and stays one as the table fills
		// until the next invalidation, such as autovacuum's ANALYZE. A
		// truncated table, like a new one, has no such statistics.
		for _, q := range []string{
			"TRUNCATE " + emptyBatch.Table(),
			"DELETE FROM " + fullBatch.Table() + " WHERE id > " + strconv.FormatInt(loaded, 10),
			"VACUUM (ANALYZE) " + fullBatch.Table(),
		} {
			if _, err := db.Pool.Exec(ctx, q); err != nil {
				b.Fatalf("%s: %v", q, err)
			}
		}
		opt := runclaim.WithMinInterval(time.Millisecond)
		sources := benchSources(historySources)
		// The forms claim sources half the list apart, so that no source is
		// claimed twice within the minimum interval.
		claim := func(store interface {
			runclaim.Store
			Table() string
		}, offset int) timedOp {
			c := benchClaimer(b, store, "bench", opt)
			return timedOp{store.Table(), func(i int) time.Duration {
				var run *runclaim.Run
				d := timed(func() { run = mustWin(b, c, sources[(i+offset)%len(sources)]) })
				mustFinish(b, run)
				return d
			}}
		}
		half := len(sources) / 2
		res, _ := interleave(b, []timedOp{claim(emptyBatch, 0), claim(fullBatch, 0), claim(emptyFunc, half), claim(fullFunc, half)})
		for f, name := range []string{"batch", "func"} {
			e, full := micros(res[2*f].pct(50)), micros(res[2*f+1].pct(50))
			b.ReportMetric(full, name+"-full-p50-µs")
			b.ReportMetric(e, name+"-empty-p50-µs")
			b.ReportMetric(ratio(full, e), name+"-full/empty")
		}
		b.ReportMetric(0, "ns/op")
	})
}

// pruneRows is how many old finished runs BenchmarkClaimDuringPrune
// prunes per iteration.
const pruneRows = 50_000

// BenchmarkClaimDuringPrune: the latency of claim+finish cycles on sources
// whose history Prune is deleting, against the same cycles just before,
// without Prune. TestPruneDoesNotBlockClaims checks that claims never wait
// for Prune; this measures what they pay for sharing the machine with it.
func BenchmarkClaimDuringPrune(b *testing.B) {
	db := pgtest.New(b)
	pool := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 4 })
	store := benchStore(b, pool)
	c := benchClaimer(b, store, "bench")
	sources := benchSources(historySources)[:16]
	ctx := context.Background()
	cycle := func(i int, l *latencies) {
		l.measure(func() { mustFinish(b, mustWin(b, c, sources[i%len(sources)])) })
	}
	for i := range 50 {
		var l latencies
		cycle(i, &l)
	}

	var (
		base, during latencies
		pruned       int64
		pruneTime    time.Duration
	)
	for b.Loop() {
		b.StopTimer()
		if _, err := pool.Exec(ctx, "TRUNCATE "+store.Table()); err != nil {
			b.Fatal(err)
		}
		loadHistory(b, pool, store, runclaim.DefaultTable, pruneRows)
		// Write the load's dirty pages out now, not during the baseline.
		if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		// Baseline: as many cycles as fit in a second, or 200.
		for i, deadline := 0, time.Now().Add(time.Second); i < 200 && time.Now().Before(deadline); i++ {
			cycle(i, &base)
		}
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			n, err := store.Prune(ctx, 0)
			pruned += n
			done <- err
		}()
	cycles:
		for i := 0; ; i++ {
			select {
			case err := <-done:
				pruneTime += time.Since(start)
				if err != nil {
					b.Fatalf("Prune: %v", err)
				}
				break cycles
			default:
			}
			cycle(i, &during)
		}
	}
	b.ReportMetric(micros(base.pct(50)), "base-p50-µs")
	b.ReportMetric(micros(during.pct(50)), "prune-p50-µs")
	b.ReportMetric(micros(base.pct(99)), "base-p99-µs")
	b.ReportMetric(micros(during.pct(99)), "prune-p99-µs")
	b.ReportMetric(micros(during.pct(100)), "prune-max-µs")
	b.ReportMetric(ratio(micros(during.pct(99)), micros(base.pct(99))), "p99-prune/base")
	b.ReportMetric(float64(pruned)/pruneTime.Seconds(), "pruned-rows/s")
	b.ReportMetric(0, "ns/op")
}

// ---------------------------------------------------------------------------
// Allocations

// BenchmarkClaimAllocs reports the allocations of one Claimer.Claim, won
// and lost, on the memory store and on the Postgres store in each form,
// with a context that can never end (context.Background) and with one that
// can (which costs the claim's cancellation grace, see
// PostgresStore.Claim). Finishing a won run is not counted.
func BenchmarkClaimAllocs(b *testing.B) {
	bench := func(b *testing.B, store runclaim.Store, ctx context.Context) {
		c := benchClaimer(b, store, "bench")
		b.Run("win", func(b *testing.B) {
			b.ReportAllocs()
			sources := benchSources(16)
			mustFinish(b, mustWin(b, c, "warm-up")) // prepare the statements
			i := 0
			for b.Loop() {
				run, err := c.Claim(ctx, sources[i%len(sources)])
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				mustFinish(b, run)
				b.StartTimer()
				i++
			}
		})
		b.Run("lose", func(b *testing.B) {
			b.ReportAllocs()
			run := mustWin(b, c, "held")
			defer mustFinish(b, run)
			mustLose(b, c, "held")
			for b.Loop() {
				// Not errors.Is: NotClaimedError.Unwrap allocates, and the
				// check is not part of the claim.
				if _, err := c.Claim(ctx, "held"); err == nil {
					b.Fatal("Claim of a held source won")
				}
			}
		})
	}
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("store=memory", func(b *testing.B) { bench(b, runclaim.NewMemoryStore(), context.Background()) })
	b.Run("store=postgres", func(b *testing.B) {
		batch, function := benchForms(b, pgtest.New(b).Pool)
		for _, form := range []struct {
			name  string
			store runclaim.Store
		}{{"batch", batch}, {"func", function}} {
			b.Run("form="+form.name+"/ctx=background", func(b *testing.B) { bench(b, form.store, context.Background()) })
			b.Run("form="+form.name+"/ctx=cancellable", func(b *testing.B) { bench(b, form.store, cancellable) })
		}
	})
}

// BenchmarkRunAllocs reports the allocations of Run.Heartbeat and
// Run.Finish on the Postgres store. Claiming the run that Finish ends is
// not counted.
func BenchmarkRunAllocs(b *testing.B) {
	c := benchClaimer(b, benchStore(b, pgtest.New(b).Pool), "bench")
	ctx := context.Background()
	b.Run("heartbeat", func(b *testing.B) {
		b.ReportAllocs()
		run := mustWin(b, c, "held")
		defer mustFinish(b, run)
		if err := run.Heartbeat(ctx); err != nil { // prepare the statement
			b.Fatalf("Heartbeat: %v", err)
		}
		for b.Loop() {
			if err := run.Heartbeat(ctx); err != nil {
				b.Fatalf("Heartbeat: %v", err)
			}
		}
	})
	b.Run("finish", func(b *testing.B) {
		b.ReportAllocs()
		sources := benchSources(16)
		mustFinish(b, mustWin(b, c, "warm-up")) // prepare the statement
		i := 0
		for b.Loop() {
			b.StopTimer()
			run := mustWin(b, c, sources[i%len(sources)])
			b.StartTimer()
			mustFinish(b, run)
			i++
		}
	})
}

// ---------------------------------------------------------------------------
// What a claim puts on the wire: the figures of docs/how-it-works.md

// TestClaimWireSize measures the round trips and the bytes a claim sends,
// in pgx's default mode and in the modes that work behind PgBouncer, on a
// pool of one connection, for both forms of the claim, and checks the
// figures docs/how-it-works.md, docs/pgbouncer.md and BENCHMARKS.md give:
//   - the function (schema version 3): in every mode a warm claim is 1
//     round trip of under 600 bytes, one TCP segment; in the default mode
//     its first call on a connection takes 2 (pgx prepares it first);
//
// A new store's first claim is logged, and its round trips checked.
// The figures are for a source and an owner of 8 bytes each, with the
// default isolation level (READ COMMITTED).
func TestClaimWireSize(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	benchStore(t, db.Pool)
	const segment = 1460 // TCP payload of a 1,500-byte Ethernet frame
	type bounds struct {
		minBytes, maxBytes     int64 // per claim, client to server, once warm
		oneSegment, twoSegment bool
	}
	small := bounds{100, 600, true, false}
	for _, tc := range []struct {
		mode       pgx.QueryExecMode
		firstTrips int64
		function   bounds
	}{
		{pgx.QueryExecModeCacheStatement, 2, small},
		{pgx.QueryExecModeExec, 1, small},
		{pgx.QueryExecModeSimpleProtocol, 1, small},
	} {
		t.Run(strings.ReplaceAll(tc.mode.String(), " ", "_"), func(t *testing.T) {
			ctx := t.Context()
			w := &sharedtest.Wire{}
			pool := db.NewPool(t, func(cfg *pgxpool.Config) {
				cfg.MaxConns = 1
				cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
				cfg.ConnConfig.TLSConfig = nil
				cfg.ConnConfig.Fallbacks = nil
				cfg.ConnConfig.DialFunc = w.Dial
				cfg.ConnConfig.DefaultQueryExecMode = tc.mode
			})
			if err := pool.Ping(ctx); err != nil { // connect outside the counts
				t.Fatal(err)
			}
			measure := func(what string, f func() error) (sent, received, trips int64) {
				t.Helper()
				s0, r0, t0 := w.Sent.Load(), w.Received.Load(), w.Turns.Load()
				if err := f(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				s1, r1, t1 := w.Sent.Load(), w.Received.Load(), w.Turns.Load()
				sent, received, trips = s1-s0, r1-r0, t1-t0
				t.Logf("%-16v %-34s %d round trips, %5d bytes sent, %5d received", tc.mode, what, trips, sent, received)
				return sent, received, trips
			}
			// One source per mode and form, each 8 bytes, as the table is shared.
			source := func(form string) string { return fmt.Sprintf("%c-src-%02d", form[0], int(tc.mode)) }

			store, err := runclaim.NewPostgresStore(pool)
			if err != nil {
				t.Fatal(err)
			}
			var run *runclaim.Run
			if _, _, trips := measure("new store's first claim", func() (err error) {
				run, err = benchClaimer(t, store, "owner-aa").Claim(ctx, source("new"))
				return err
			}); trips != tc.firstTrips {
				t.Errorf("a new store's first claim: %d round trips, want %d", trips, tc.firstTrips)
			}
			if err := run.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}

			for _, f := range []struct {
				form claimForm
				want bounds
			}{{claimForms[0], tc.function}} {
				store := formStore(t, pool, f.form)
				a := benchClaimer(t, store, "owner-aa")
				b := benchClaimer(t, store, "owner-bb")
				src := source(f.form.name)
				claim := func(c *runclaim.Claimer) func() error {
					return func() (err error) { run, err = c.Claim(ctx, src); return err }
				}
				// The new store's first claim prepared the call on the
				// pool's one connection.
				firstTrips := int64(1)
				if _, _, trips := measure(f.form.name+": first claim", claim(a)); trips != firstTrips {
					t.Errorf("%s: first claim: %d round trips, want %d", f.form.name, trips, firstTrips)
				}
				if err := run.Finish(ctx, nil); err != nil {
					t.Fatal(err)
				}
				for _, step := range []struct {
					what string
					f    func() error
				}{
					{f.form.name + ": winning claim", claim(a)},
					{f.form.name + ": losing claim", func() error {
						if _, err := b.Claim(ctx, src); !errors.Is(err, runclaim.ErrAlreadyRunning) {
							return fmt.Errorf("got %v, want ErrAlreadyRunning", err)
						}
						return nil
					}},
				} {
					sent, _, trips := measure(step.what, step.f)
					if trips != 1 {
						t.Errorf("%s: %d round trips, want 1", step.what, trips)
					}
					if sent < f.want.minBytes || sent > f.want.maxBytes {
						t.Errorf("%s: %d bytes sent, want %d to %d (the figure the docs give)", step.what, sent, f.want.minBytes, f.want.maxBytes)
					}
					if f.want.oneSegment && sent > segment || f.want.twoSegment && sent <= segment {
						t.Errorf("%s: %d bytes sent; the docs say it is %s one TCP segment (%d bytes)", step.what, sent,
							map[bool]string{true: "within", false: "more than"}[f.want.oneSegment], segment)
					}
				}
				if err := run.Finish(ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// The redeploy test runs replicas as OS processes through a rolling
// redeploy on a loop: replicas start and call Migrate while a maintenance
// transaction holds a lock on the runs table, claim each tick of a
// runclaim.Ticker through Do and ForTick, on clocks skewed by up to redeploySkew
// either way, with jobs of random length, and are then stopped gracefully
// (SIGTERM, with a wind-down longer than the lease) or killed with SIGKILL.
const (
	envRedeployChild = "CHAOS_REDEPLOY_CHILD" // "1" in a child
	envRedeploySkew  = "CHAOS_REDEPLOY_SKEW"  // how far the child's clock is ahead, for its ticks

	redeploySources  = 4
	redeployLease    = time.Second // heartbeat: the default, a third of it
	redeployTick     = 50 * time.Millisecond
	redeploySkew     = 120 * time.Millisecond // more than two ticks, more than the shortest job
	redeployDeadline = time.Second            // the Ticker's starting deadline
	redeployReplicas = 3
	redeployTime     = 32 * time.Second // how long the parent keeps redeploying
	redeployWindDown = 3 * redeployLease / 2
	// redeployBeat is how often a job writes that it is still working.
	redeployBeat = 25 * time.Millisecond
)

func redeploySource(i int) string { return fmt.Sprintf("deploy-%d", i) }

// jobLogSQL is the table in which jobs record when they work, by the
// host's clock (which the database's container shares): a row per run,
// began when fn started and found its run holding, last_seen the
// last time it was still working. A run's work lies within [began,
// last_seen] or a little after last_seen, never before began.
const jobLogSQL = `CREATE TABLE IF NOT EXISTS job_log (
	run_id    bigint PRIMARY KEY,
	source    text NOT NULL,
	owner     text NOT NULL,
	began     timestamptz NOT NULL,
	last_seen timestamptz NOT NULL,
	ended     text
)`

// TestRedeployChild is one replica of TestRedeploy.
func TestRedeployChild(t *testing.T) {
	if os.Getenv(envRedeployChild) != "1" {
		t.Skip("a helper process of TestRedeploy; it runs only when TestRedeploy starts it")
	}
	// SIGTERM cancels the replica's context: the graceful shutdown of a
	// redeploy. Runs in flight see their context end and wind down.
	term, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	owner := os.Getenv(envOwner)
	seed, err := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", envSeed, err)
	}
	skew, err := time.ParseDuration(os.Getenv(envRedeploySkew))
	if err != nil {
		t.Fatalf("%s: %v", envRedeploySkew, err)
	}
	clock := func() time.Time { return time.Now().Add(skew) }
	pool, err := pgxpool.New(context.Background(), os.Getenv(envDSN))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(os.Getenv(envOut), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var outMu sync.Mutex
	record := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		if _, err := fmt.Fprintf(out, format+"\n", args...); err != nil {
			t.Errorf("record: %v", err)
		}
	}

	// Every replica migrates at its start, as docs/schema.md says to.
	began := time.Now()
	mctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err = store.Migrate(mctx)
	cancel()
	record("M %d %v", time.Since(began).Microseconds(), err)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}

	claimer, err := runclaim.New(store, runclaim.WithLease(redeployLease), runclaim.WithOwner(owner),
		runclaim.WithHooks(runclaim.Hooks{
			Claimed: func(e runclaim.Event) { record("C %s %d won", e.Run.Source, e.Duration.Microseconds()) },
			Skipped: func(e runclaim.Event) { record("C %s %d skipped", e.Source, e.Duration.Microseconds()) },
			ClaimFailed: func(e runclaim.Event) {
				outcome := "failed"
				if term.Err() != nil && errors.Is(e.Err, context.Canceled) {
					outcome = "shutdown" // claimed as SIGTERM came: the replica's own cancellation
				}
				record("C %s %d %s %q", e.Source, e.Duration.Microseconds(), outcome, e.Err)
			},
		}))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(childReady)

	var wg sync.WaitGroup
	for i := range redeploySources {
		source := redeploySource(i)
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() {
			ticker, err := runclaim.NewTicker(runclaim.Every(redeployTick), redeployDeadline, runclaim.WithClock(clock))
			if err != nil {
				t.Error(err)
				return
			}
			defer ticker.Stop()
			for term.Err() == nil {
				var tick time.Time
				select {
				case <-term.Done():
					return
				case tick = <-ticker.C:
				}
				// Do with ForTick gets the replica's context: SIGTERM cancels fn's.
				err := claimer.Do(term, source, func(ctx context.Context, run *runclaim.Run) error {
					return redeployJob(ctx, pool, run, claimer.Settings().ExpiryMargin, time.Duration(50+rng.IntN(1500))*time.Millisecond)
				}, runclaim.ForTick(tick))
				switch {
				case err == nil, errors.Is(err, runclaim.ErrNotClaimed), errors.Is(err, context.Canceled):
				case errors.Is(err, runclaim.ErrLeaseLost):
					// Allowed on a loaded machine; the parent's checks hold.
					fmt.Fprintf(os.Stderr, "redeploy child %s: %s: %v\n", owner, source, err)
				default:
					fmt.Fprintf(os.Stderr, "redeploy child %s: %s: %v\n", owner, source, err)
				}
			}
		})
	}
	wg.Wait()
}

// redeployJob is a job that records that it works, every redeployBeat,
// for d. When its context ends because the replica is shutting down, it
// winds down for longer than a lease, still working; when the run is lost
// it stops at once.
//
// It does what the docs ask of a job that must never overlap another
// replica's run: before each unit of work it checks that the run still
// holds, by Run.Lost and by the local clock against Run.Deadline less the
// expiry margin, and it records the time of that check, not the time its
// write reaches the database. On a machine so busy that a goroutine or a
// timer runs late by more than the margin, a job that trusted only its
// context could work past the lease; a job that checks the clock cannot.
// Run.Deadline is the lease's end by the database clock, and the database
// runs on this machine (a container shares its kernel's clock), so the
// recorded intervals end at least a margin before the run's lease ends,
// before any other replica can take the source over. A real fault still
// shows: a takeover before the lease ends overlaps, and
// heartbeats that stop at a shutdown make every wind-down stop early (the
// test asserts that several wind-downs outlast a lease).
func redeployJob(ctx context.Context, pool *pgxpool.Pool, run *runclaim.Run, margin, d time.Duration) error {
	bg := context.Background()
	// holds is checked before each unit of work; now is when it held.
	holds := func() (now time.Time, ok bool) {
		select {
		case <-run.Lost():
			return time.Time{}, false
		default:
		}
		now = time.Now()
		return now, now.Before(run.Deadline().Add(-margin))
	}
	// The job begins when its run holds, and says so: began is that
	// moment, as last_seen is each later one, not when the record reaches
	// the database (on a loaded machine the insert can land after the
	// lease ended, which is a slow record, not work done late).
	at, ok := holds()
	if !ok {
		return fmt.Errorf("run %d: %w: before the job began", run.ID, runclaim.ErrLeaseLost)
	}
	if _, err := pool.Exec(bg, `INSERT INTO job_log (run_id, source, owner, began, last_seen)
VALUES ($1, $2, $3, $4, $4)`, run.ID, run.Source, run.Owner, at); err != nil {
		return err
	}
	beat := func(at time.Time) error {
		_, err := pool.Exec(bg, `UPDATE job_log SET last_seen = $2 WHERE run_id = $1`, run.ID, at)
		return err
	}
	end := func(how string) {
		_, _ = pool.Exec(bg, `UPDATE job_log SET ended = $2 WHERE run_id = $1`, run.ID, how)
	}
	lost := func() error {
		end("lost")
		if cause := context.Cause(ctx); errors.Is(cause, runclaim.ErrLeaseLost) {
			return cause
		}
		return fmt.Errorf("run %d: %w", run.ID, runclaim.ErrLeaseLost)
	}
	work := time.NewTimer(d)
	defer work.Stop()
	tick := time.NewTicker(redeployBeat)
	defer tick.Stop()
	for {
		select {
		case <-work.C:
			end("done")
			return nil
		case <-run.Lost():
			return lost()
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), runclaim.ErrLeaseLost) {
				return lost()
			}
			// Shutdown: flush, checkpoint, close, for longer than a lease.
			windDown := time.NewTimer(redeployWindDown)
			defer windDown.Stop()
			for {
				select {
				case <-windDown.C:
					end("wound down")
					return ctx.Err()
				case <-run.Lost():
					return lost()
				case <-tick.C:
					at, ok := holds()
					if !ok {
						return lost()
					}
					if err := beat(at); err != nil {
						return err
					}
				}
			}
		case <-tick.C:
			at, ok := holds()
			if !ok {
				return lost()
			}
			if err := beat(at); err != nil {
				return err
			}
		}
	}
}

// maintenanceApp is the application_name of maintenance's transactions.
const maintenanceApp = "runclaim-test-maintenance"

// maintenance holds a SHARE UPDATE EXCLUSIVE lock on table, what autovacuum
// and ANALYZE hold, for most of the time until ctx ends: a transaction
// holds it for 2 s, lets it go for 200 ms, and takes it again.
func maintenance(ctx context.Context, t *testing.T, pool *pgxpool.Pool, table string) {
	for ctx.Err() == nil {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return
		}
		// Named, so that the lock watcher tells it from the replicas.
		if _, err := tx.Exec(ctx, "SET LOCAL application_name = '"+maintenanceApp+"'; LOCK TABLE "+table+" IN SHARE UPDATE EXCLUSIVE MODE"); err != nil {
			_ = tx.Rollback(context.Background())
			if ctx.Err() == nil {
				t.Errorf("maintenance lock: %v", err)
			}
			return
		}
		hold := time.NewTimer(2 * time.Second)
		select {
		case <-ctx.Done():
		case <-hold.C:
		}
		hold.Stop()
		_ = tx.Rollback(context.Background())
		gap := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-gap.C:
		}
		gap.Stop()
	}
}

// TestRedeploy lives through a rolling redeploy on a loop for 32 s: three
// replicas of four sources; every 1–2.5 s a new replica starts (and calls
// Migrate while a maintenance transaction holds a lock on the table), and
// the oldest one is stopped, either gracefully with SIGTERM (its jobs wind
// down for 1.5 leases, still working) or with SIGKILL. Then, from the
// jobs' own records of when they worked, by the database clock:
//
//   - no two runs of a source worked at the same time, checked in SQL and
//     in Go;
//   - the history of the runs table has no overlapping runs either;
//   - every run served a tick, no tick was served twice, and each source's
//     ticks were served in order, on replica clocks up to 120 ms apart
//     either way (checked in SQL);
//   - no statement waited for a lock on the runs table or for an advisory
//     lock (claims of held sources are skipped at once, and nothing, a
//     Migrate on a current schema least of all, may make a claim wait): a
//     watcher polls pg_locks for such waiters throughout. A DDL statement
//     queued behind the maintenance lock waits up to 500 ms, many polls'
//     worth, so a busy machine delays the watcher without hiding it;
//   - no claim failed, every Migrate succeeded, and no claim or Migrate
//     took longer than the wait bound (a hang, not a slow machine: how long
//     they took is logged, not asserted, since a busy machine stretches it
//     past a lease without anything being wrong);
//   - there were enough runs, takeovers after kills and graceful
//     wind-downs longer than a lease (the redeploy goes on until three,
//     and at least one is required) for the test to mean something.
//
// Set CHAOS_SEED to replay a schedule.
func TestRedeploy(t *testing.T) {
	db := sharedtest.MigratedDB(t)
	direct := db.Pool
	store := newStore(t, direct)
	if _, err := direct.Exec(t.Context(), jobLogSQL); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED: %v", err)
		}
	}
	t.Logf("CHAOS_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	mctx, stopMaintenance := context.WithCancel(t.Context())
	var mwg sync.WaitGroup
	// The maintenance session is named for the whole session, not by a SET
	// LOCAL in each transaction: between two of them its name reverted, and
	// the watcher, reading pg_stat_activity a moment late, once counted its
	// wait for autovacuum as a replica's (load-test, 'rollback').
	maintPool := db.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.RuntimeParams["application_name"] = maintenanceApp
	})
	mwg.Go(func() { maintenance(mctx, t, maintPool, store.Table()) })
	var waits lockWaits
	mwg.Go(func() { waits.watch(mctx, t, direct, store.Table()) })
	defer func() {
		stopMaintenance()
		mwg.Wait()
	}()

	var children []*child
	t.Cleanup(func() {
		for _, c := range children {
			if !c.exited {
				_ = c.cmd.Process.Kill()
				<-c.done
			}
		}
	})
	started := 0
	start := func() *child {
		started++
		owner := fmt.Sprintf("deploy-%02d", started)
		// A minute to be ready: a stalled Migrate shows as a replica that
		// never is.
		skew := time.Duration(rng.Int64N(int64(2*redeploySkew+1))) - redeploySkew
		c := startChild(t, owner, filepath.Join(dir, fmt.Sprintf("replica-%02d.log", started)), "TestRedeployChild", "3m", time.Minute,
			envRedeployChild+"=1", envDSN+"="+db.DSN, envSeed+"="+strconv.FormatUint(rng.Uint64(), 10), envRedeploySkew+"="+skew.String())
		children = append(children, c)
		return c
	}
	// Stopped replicas are reaped in the background: a graceful stop takes
	// a wind-down, and the redeploy goes on meanwhile.
	var stopping sync.WaitGroup
	stop := func(c *child, graceful bool) {
		c.killed = !graceful
		sig := syscall.SIGTERM
		if !graceful {
			sig = syscall.SIGKILL
		}
		if err := c.cmd.Process.Signal(sig); err != nil {
			t.Errorf("signal %s: %v", c.owner, err)
		}
		stopping.Go(func() {
			select {
			case err := <-c.done:
				if graceful && err != nil {
					t.Errorf("replica %s, stopped gracefully, exited with %v:\n%s", c.owner, err, c.output)
				}
			case <-time.After(time.Minute):
				t.Errorf("replica %s did not exit within a minute of %v", c.owner, sig)
				_ = c.cmd.Process.Kill()
				<-c.done
			}
		})
	}

	var live []*child
	for range redeployReplicas {
		live = append(live, start())
	}
	graceful, killed := 0, 0
	// The redeploy goes on for redeployTime, and then, on a machine so
	// loaded that too little has happened yet for the checks below to mean
	// something, up to twice as long again.
	begin := time.Now()
	enough := func() bool {
		if time.Since(begin) < redeployTime {
			return false
		}
		var runs, windDowns, takeovers int
		err := direct.QueryRow(t.Context(), `SELECT count(*),
	count(*) FILTER (WHERE ended = 'wound down' AND last_seen - began > interval '1 second' * $1)
FROM job_log`, redeployLease.Seconds()).Scan(&runs, &windDowns)
		if err == nil {
			err = direct.QueryRow(t.Context(), `SELECT count(*) FROM `+store.Table()+` WHERE status = 'expired'`).Scan(&takeovers)
		}
		if err != nil {
			t.Errorf("redeploy: counting what happened: %v", err)
			return true
		}
		return runs >= 50 && windDowns >= 3 && killed >= 3 && takeovers >= 1 || time.Since(begin) >= 3*redeployTime
	}
	for !enough() {
		pause := time.NewTimer(time.Duration(1000+rng.IntN(1500)) * time.Millisecond)
		<-pause.C
		live = append(live, start())
		oldest := live[0]
		live = live[1:]
		g := rng.IntN(2) == 0
		if g {
			graceful++
		} else {
			killed++
		}
		stop(oldest, g)
	}
	for _, c := range live {
		stop(c, true)
		graceful++
	}
	stopping.Wait()
	for _, c := range children {
		c.exited = true
	}
	stopMaintenance()
	mwg.Wait()
	t.Logf("%d replicas: %d stopped gracefully, %d killed", started, graceful, killed)

	checkJobOverlaps(t, direct)
	checkRunOverlaps(t, direct, store.Table())
	checkOneRunPerTick(t, direct, store.Table())
	checkClaimLatencies(t, children)
	waits.check(t)

	var runs, windDowns, lost int
	err := direct.QueryRow(t.Context(), `SELECT count(*),
	count(*) FILTER (WHERE ended = 'wound down' AND last_seen - began > interval '1 second' * $1),
	count(*) FILTER (WHERE ended = 'lost')
FROM job_log`, redeployLease.Seconds()).Scan(&runs, &windDowns, &lost)
	if err != nil {
		t.Fatal(err)
	}
	var takeovers int
	if err := direct.QueryRow(t.Context(), `SELECT count(*) FROM `+store.Table()+` WHERE status = 'expired'`).Scan(&takeovers); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs, %d graceful wind-downs, %d expired runs taken over, %d runs lost by their holder", runs, windDowns, takeovers, lost)
	if graceful >= 3 && windDowns == 0 {
		// Jobs check that their run holds before each unit of work (see
		// redeployJob), so heartbeats that stop at a shutdown show here,
		// not as overlaps.
		t.Errorf("%d replicas stopped gracefully, yet no job wound down for longer than a lease: a run must be kept alive while its job winds down", graceful)
	}
	// The redeploy went on (see enough) for three wind-downs longer than a
	// lease; one is the least that shows a run kept alive through a
	// wind-down. On a machine loaded enough, most runs of replicas stopped
	// gracefully are lost to heartbeats that did not get through in time,
	// which is the safe outcome, and fewer wind-downs outlast a lease.
	if runs < 50 || windDowns < 1 || killed < 3 || takeovers < 1 {
		t.Errorf("too little happened for the test to mean something: %d runs, %d wind-downs, %d kills, %d takeovers", runs, windDowns, killed, takeovers)
	}
}

// checkOneRunPerTick checks, in SQL, that every run named a tick, that no
// tick was served by two runs (running, succeeded or failed), and that each
// source's runs that served a tick did so in the order of their ticks: no
// run served a tick at or before one an earlier run had served, however
// far apart the replicas' clocks were.
func checkOneRunPerTick(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	var plain, doubles, backwards, served int
	var example string
	err := pool.QueryRow(t.Context(), `WITH serving AS (
	SELECT id, source, tick, lag(tick) OVER (PARTITION BY source ORDER BY id) AS prev
	FROM `+table+` WHERE status IN ('running', 'succeeded', 'failed')
)
SELECT (SELECT count(*) FROM `+table+` WHERE tick IS NULL),
	(SELECT count(*) FROM (SELECT source, tick FROM serving GROUP BY source, tick HAVING count(*) > 1) AS d),
	(SELECT count(*) FROM serving WHERE tick <= prev),
	(SELECT coalesce(min(format('run %s of %s served tick %s after tick %s', id, source, tick, prev)), '') FROM serving WHERE tick <= prev),
	(SELECT count(*) FROM serving)`).Scan(&plain, &doubles, &backwards, &example, &served)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs served a tick", served)
	if plain > 0 || doubles > 0 || backwards > 0 {
		t.Errorf("G11 broken: %d runs without a tick, %d ticks served twice, %d runs of a tick at or before an earlier run's; e.g. %s", plain, doubles, backwards, example)
	}
}

// jobSpan is one run's work, by the database clock.
type jobSpan struct {
	runID       int64
	source      string
	owner       string
	began, last time.Time
}

// checkJobOverlaps checks, in SQL and in Go, that no two runs of a source
// worked at the same time.
func checkJobOverlaps(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	var overlaps int
	var example string
	err := pool.QueryRow(ctx, `SELECT count(*), coalesce(min(format('run %s of %s by %s worked %s..%s, run %s by %s worked %s..%s',
	a.run_id, a.source, a.owner, a.began, a.last_seen, b.run_id, b.owner, b.began, b.last_seen)), '')
FROM job_log a JOIN job_log b ON a.source = b.source AND a.run_id < b.run_id
WHERE tstzrange(a.began, a.last_seen, '[]') && tstzrange(b.began, b.last_seen, '[]')`).Scan(&overlaps, &example)
	if err != nil {
		t.Fatal(err)
	}
	if overlaps > 0 {
		t.Errorf("G1 broken: %d pairs of runs of one source worked at the same time (SQL); e.g. %s", overlaps, example)
	}

	rows, err := pool.Query(ctx, `SELECT run_id, source, owner, began, last_seen FROM job_log ORDER BY source, began`)
	if err != nil {
		t.Fatal(err)
	}
	var spans []jobSpan
	for rows.Next() {
		var s jobSpan
		if err := rows.Scan(&s.runID, &s.source, &s.owner, &s.began, &s.last); err != nil {
			t.Fatal(err)
		}
		spans = append(spans, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	goOverlaps := 0
	for i := 1; i < len(spans); i++ {
		cur := spans[i]
		// Sorted by source and start: compare with every earlier run of
		// the source.
		for j := i - 1; j >= 0 && spans[j].source == cur.source; j-- {
			if !cur.began.After(spans[j].last) {
				goOverlaps++
				if goOverlaps <= 3 {
					t.Errorf("G1 broken (Go): run %d of %s by %s worked %v..%v while run %d by %s worked %v..%v",
						cur.runID, cur.source, cur.owner, cur.began, cur.last, spans[j].runID, spans[j].owner, spans[j].began, spans[j].last)
				}
			}
		}
	}
	if (goOverlaps > 0) != (overlaps > 0) {
		t.Errorf("the Go check found %d overlaps and the SQL check %d", goOverlaps, overlaps)
	}
}

// checkRunOverlaps checks that no two runs of a source overlap in the runs
// table's history, a run lasting from its start to its finish, or for an
// expired run to the end of its last lease.
func checkRunOverlaps(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	var overlaps int
	err := pool.QueryRow(t.Context(), `WITH r AS (
	SELECT id, source, started_at,
		CASE WHEN status = 'expired' THEN least(coalesce(finished_at, lease_until), lease_until) ELSE coalesce(finished_at, 'infinity') END AS ended
	FROM `+table+`)
SELECT count(*) FROM r a JOIN r b ON a.source = b.source AND a.id < b.id
WHERE tstzrange(a.started_at, a.ended) && tstzrange(b.started_at, b.ended)`).Scan(&overlaps)
	if err != nil {
		t.Fatal(err)
	}
	if overlaps > 0 {
		t.Errorf("G1 broken: %d pairs of runs of one source overlap in the runs table", overlaps)
	}
}

// checkClaimLatencies reads the replicas' records: no claim failed, every
// Migrate succeeded, and none hung.
func checkClaimLatencies(t *testing.T, children []*child) {
	t.Helper()
	var claims, slow, migrates int
	var worst time.Duration
	for _, c := range children {
		f, err := os.Open(c.out)
		if err != nil {
			t.Errorf("replica %s left no record: %v", c.owner, err)
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 {
				continue
			}
			var us int64
			switch fields[0] {
			case "M":
				us, _ = strconv.ParseInt(fields[1], 10, 64)
				migrates++
			case "C":
				if len(fields) < 4 {
					continue
				}
				us, _ = strconv.ParseInt(fields[2], 10, 64)
				claims++
				if fields[3] == "failed" {
					t.Errorf("replica %s: a claim failed: %s", c.owner, sc.Text())
				}
			default:
				continue
			}
			if fields[0] == "M" && (len(fields) < 3 || fields[2] != "<nil>") {
				t.Errorf("replica %s: Migrate failed: %s", c.owner, sc.Text())
			}
			d := time.Duration(us) * time.Microsecond
			worst = max(worst, d)
			if d > redeployLease {
				slow++
			}
			if d > wait {
				t.Errorf("replica %s: took %v, longer than any wait: %s", c.owner, d, sc.Text())
			}
		}
		f.Close()
	}
	t.Logf("%d claims and %d Migrate calls; %d took longer than a lease; the slowest took %v", claims, migrates, slow, worst)
	if claims < 500 {
		t.Errorf("only %d claims", claims)
	}
}

// lockWaits records the statements seen waiting for a lock that no claim,
// heartbeat, finish or Migrate on a current schema may wait for: a lock on
// the runs table (but for the maintenance transaction's own), or an
// advisory lock.
type lockWaits struct {
	mu    sync.Mutex // protects the fields below
	polls int
	seen  []string // one line per waiter seen, the first few
	count int
}

// lockWaitPoll is how often watch looks.
const lockWaitPoll = 20 * time.Millisecond

// watch polls pg_locks until ctx ends.
func (w *lockWaits) watch(ctx context.Context, t *testing.T, pool *pgxpool.Pool, table string) {
	tick := time.NewTicker(lockWaitPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rows, err := pool.Query(ctx, `SELECT format('%s lock (%s) by pid %s: %s', l.locktype, l.mode, l.pid, left(a.query, 120))
FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
  AND ((l.locktype = 'relation' AND l.relation = $1::regclass) OR l.locktype = 'advisory')
  AND a.application_name <> $2`, table, maintenanceApp)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("lock watcher: %v", err)
			}
			return
		}
		var lines []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Errorf("lock watcher: %v", err)
			}
			lines = append(lines, line)
		}
		if err := rows.Err(); err != nil && ctx.Err() == nil {
			t.Errorf("lock watcher: %v", err)
		}
		w.mu.Lock()
		w.polls++
		w.count += len(lines)
		for _, l := range lines {
			if len(w.seen) < 5 {
				w.seen = append(w.seen, l)
			}
		}
		w.mu.Unlock()
	}
}

// check fails the test if a waiter was seen, or if the watcher hardly
// looked.
func (w *lockWaits) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("lock watcher: %d polls of pg_locks, %d waiters seen", w.polls, w.count)
	if w.count > 0 {
		t.Errorf("G9 broken: statements waited for a lock on the runs table or an advisory lock, %d times; e.g.\n%s", w.count, strings.Join(w.seen, "\n"))
	}
	if w.polls < 100 {
		t.Errorf("the lock watcher polled only %d times", w.polls)
	}
}

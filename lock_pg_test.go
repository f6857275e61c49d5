package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// This file tests the claim protocol of lock.go: the advisory key, the
// one-batch claim under contention and under every isolation default, its
// round trips, its clock and the session state it leaves.

// ---------------------------------------------------------------------------
// Advisory keys

// goldenKeys pins AdvisoryKey. These values must never change: replicas
// running two releases of the library side by side must take the same lock
// for the same source.
var goldenKeys = []struct {
	namespace, source string
	key               int64
}{
	{"runclaim", "avito", 2771999500527823157},
	{"runclaim", "", 7606860613709361474},
	{"", "", -5808590958014384161},
	{"runclaim", "источник/ü-😀", -3024015508565409948},
	{"other", "avito", 5875865367734743410},
	{"runclaim.migrate", "", -1710031467293055329},
	// The NUL separator keeps these two apart.
	{"runclaim", "avit", 1267397478383314200},
	{"runcla", "imavito", -5783417531421295359},
}

func TestAdvisoryKeyGolden(t *testing.T) {
	t.Parallel()
	if runclaim.DefaultNamespace != "runclaim" {
		t.Errorf("DefaultNamespace = %q; changing it changes every lock key", runclaim.DefaultNamespace)
	}
	for _, g := range goldenKeys {
		if got := runclaim.AdvisoryKeyOf(g.namespace, g.source); got != g.key {
			t.Errorf("AdvisoryKey(%q, %q) = %d, want %d", g.namespace, g.source, got, g.key)
		}
	}
	if runclaim.AdvisoryKeyOf("runclaim", "avit") == runclaim.AdvisoryKeyOf("runcla", "imavito") {
		t.Error("namespace and source are not separated")
	}
}

// TestAdvisoryKeyIsFNV64a checks the documented derivation against the
// standard library's FNV-64a.
func TestAdvisoryKeyIsFNV64a(t *testing.T) {
	t.Parallel()
	pairs := [][2]string{{"runclaim", "avito"}, {"", ""}, {"ns", "\xff\xfe"}, {strings.Repeat("n", 300), strings.Repeat("s", 10000)}}
	for _, g := range goldenKeys {
		pairs = append(pairs, [2]string{g.namespace, g.source})
	}
	for _, p := range pairs {
		h := fnv.New64a()
		h.Write([]byte(p[0] + "\x00" + p[1]))
		if got, want := runclaim.AdvisoryKeyOf(p[0], p[1]), int64(h.Sum64()); got != want {
			t.Errorf("AdvisoryKey(%.20q, %.20q) = %d, want FNV-64a %d", p[0], p[1], got, want)
		}
	}
}

// TestClaimTakesTheAdvisoryKey: the claim takes exactly the lock
// AdvisoryKey names (one-bigint form, with the store's namespace). While
// another transaction holds it, a claim is skipped as "in flight": an
// ErrAlreadyRunning without a holder, that writes nothing.
func TestClaimTakesTheAdvisoryKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	other, err := runclaim.NewPostgresStore(db.Pool, runclaim.WithNamespace("other"))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", runclaim.AdvisoryKeyOf(runclaim.DefaultNamespace, "src")); err != nil {
		t.Fatal(err)
	}
	before := readState(t, db.Pool, store.Table())

	_, err = newClaimer(t, store).Claim(ctx, "src")
	var nc *runclaim.NotClaimedError
	if !errors.As(err, &nc) || !errors.Is(err, runclaim.ErrAlreadyRunning) || errors.Is(err, runclaim.ErrTooSoon) {
		t.Fatalf("Claim while the key is locked: %v, want ErrAlreadyRunning as *NotClaimedError", err)
	}
	if diff := cmp.Diff(&runclaim.NotClaimedError{Source: "src", Reason: runclaim.ErrAlreadyRunning}, nc,
		sameReason); diff != "" {
		t.Errorf("in-flight skip (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, readState(t, db.Pool, store.Table())); diff != "" {
		t.Errorf("a skipped claim changed the table (-before +after):\n%s", diff)
	}

	// Another namespace takes another key, so it is not blocked.
	run, err := newClaimer(t, other).Claim(ctx, "src")
	if err != nil {
		t.Fatalf("Claim in namespace %q while the default namespace's key is locked: %v", "other", err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// Another source takes another key too.
	if _, err := newClaimer(t, store).Claim(ctx, "src2"); err != nil {
		t.Errorf("Claim of another source: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := newClaimer(t, store).Claim(ctx, "src"); err != nil {
		t.Errorf("Claim after the lock was released: %v", err)
	}
	if n := advisoryLocks(t, db.Pool); n != 0 {
		t.Errorf("%d advisory locks held after the claims", n)
	}
}

// ---------------------------------------------------------------------------
// G1 under contention

// Each contention test runs for contentionTime, longer (up to
// contentionMaxTime) if by then fewer than contentionWins runs per source
// have been won: the machines that run these tests have two cores, shared.
// The wins, not the time, size what a test checks: each is a handover
// that a double run would show in.
const (
	contentionTime    = time.Second
	contentionMaxTime = 60 * time.Second
	contentionWins    = 80
)

// A claimer pauses a random time between two attempts, up to
// contentionPause times its last claim's latency (at most
// contentionMaxPause). On two cores at most two claims execute at once
// however many are queued, so spinning adds queueing, not interleavings:
// it slows every claim and finish until there are too few handovers for
// the test to mean anything. A pause that scales with the latency keeps
// the machine busy but not swamped, under -race and on a shared machine.
const (
	contentionPause    = 16
	contentionMaxPause = 500 * time.Millisecond
)

type contentionResult struct {
	wins, skips, inFlight, errs, overlaps atomic.Int64
	lockTimeouts                          atomic.Int64 // claims that failed with 55P03, see contend
	inFlightNow, maxInFlight              atomic.Int64 // Claim calls under way
	took                                  time.Duration

	mu        sync.Mutex // protects firstErrs
	firstErrs []string
}

func (r *contentionResult) fail(format string, args ...any) {
	r.errs.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.firstErrs) < 5 {
		r.firstErrs = append(r.firstErrs, fmt.Sprintf(format, args...))
	}
}

// contend runs perSource goroutines on each source (see contentionTime).
// Each goroutine has a Claimer of its own (a distinct owner) and claims in a
// loop, with a short random pause between attempts like a replica's
// scheduler tick (see contentionPause); a winner checks that it is its
// source's only holder, holds the run for 1–3 ms and finishes it. It
// returns once every goroutine has stopped.
func contend(t *testing.T, store runclaim.Store, sources []string, perSource int) *contentionResult {
	t.Helper()
	ctx := t.Context()
	res := &contentionResult{}
	holders := make([]atomic.Int32, len(sources))
	start := make(chan struct{})
	var began time.Time
	wantWins := int64(contentionWins * len(sources))
	more := func() bool {
		d := time.Since(began)
		return d < contentionTime || d < contentionMaxTime && res.wins.Load() < wantWins
	}
	var wg sync.WaitGroup
	for si, src := range sources {
		for w := range perSource {
			c := newClaimer(t, store, runclaim.WithOwner(fmt.Sprintf("%s/w%02d", src, w)), runclaim.WithLease(time.Minute))
			hold := time.Duration(1+w%3) * time.Millisecond
			wg.Go(func() {
				<-start
				var latency time.Duration
				for more() {
					// The workload's pacing, not synchronisation.
					time.Sleep(rand.N(min(contentionMaxPause, contentionPause*latency+time.Millisecond)))
					n := res.inFlightNow.Add(1)
					for m := res.maxInFlight.Load(); n > m && !res.maxInFlight.CompareAndSwap(m, n); m = res.maxInFlight.Load() {
					}
					sent := time.Now()
					run, err := c.Claim(ctx, src)
					latency = time.Since(sent)
					res.inFlightNow.Add(-1)
					if err != nil {
						var nc *runclaim.NotClaimedError
						switch {
						case pgCode(err) == "55P03":
							// lock_not_available: the claim waited longer
							// than its lock timeout (1 s), for a lock such
							// as the table's extension lock, whose holder a
							// machine this busy can keep off the CPU that
							// long. It changed nothing; checkContention
							// allows a few.
							res.lockTimeouts.Add(1)
							continue
						case !errors.Is(err, runclaim.ErrNotClaimed):
							res.fail("Claim: %v", err)
						case !errors.Is(err, runclaim.ErrAlreadyRunning) || !errors.As(err, &nc):
							res.fail("skip is not ErrAlreadyRunning as *NotClaimedError: %v", err)
						case nc.Holder == nil:
							res.inFlight.Add(1)
						}
						res.skips.Add(1)
						continue
					}
					if n := holders[si].Add(1); n != 1 {
						res.overlaps.Add(1)
					}
					res.wins.Add(1)
					time.Sleep(hold) // the job: the workload, not synchronisation
					holders[si].Add(-1)
					if err := run.Finish(ctx, nil); err != nil {
						res.fail("Finish run %d: %v", run.ID, err)
					}
				}
			})
		}
	}
	began = time.Now()
	close(start)
	wg.Wait()
	res.took = time.Since(began)
	return res
}

// checkContention checks a contention run in Go and in the history: no two
// runs of a source overlapped, every run finished, IDs follow start times,
// and there were enough wins for the test to mean something.
func checkContention(t *testing.T, pool *pgxpool.Pool, table string, sources []string, res *contentionResult) {
	t.Helper()
	ctx := t.Context()
	wins, skips := res.wins.Load(), res.skips.Load()
	t.Logf("%v, %d sources: %d wins, %d skips (%d of them while another claim held the lock), up to %d claims at once, %d errors, %d lock timeouts, %d overlaps seen in Go",
		res.took.Round(time.Millisecond), len(sources), wins, skips, res.inFlight.Load(), res.maxInFlight.Load(), res.errs.Load(), res.lockTimeouts.Load(), res.overlaps.Load())
	if n := res.errs.Load(); n > 0 {
		t.Errorf("%d claims or finishes failed; first: %q", n, res.firstErrs)
	}
	// A claim that times out on a lock fails safely, and on a machine busy
	// enough to keep a lock's holder off the CPU for a second a few do;
	// more than 1 in 50 attempts is not load but a lock held for too long.
	if n := res.lockTimeouts.Load(); n*50 > wins+skips+n {
		t.Errorf("%d of %d claims timed out on a lock (SQLSTATE 55P03)", n, wins+skips+n)
	}
	if n := res.overlaps.Load(); n > 0 {
		t.Errorf("G1 broken: %d wins found their source already held (Go holder counter)", n)
	}
	if wins <= 50 || skips <= 50 {
		t.Errorf("only %d wins and %d skips: too little contention for the test to mean anything", wins, skips)
	}

	// Overlapping pairs: b starts while a, which started no later, is still
	// running. The range condition lets the (source, started_at) index
	// drive the join; && states the overlap itself.
	var overlaps int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` a JOIN `+table+` b
  ON b.source = a.source AND b.id <> a.id
 AND b.started_at >= a.started_at AND (b.started_at, b.id) > (a.started_at, a.id)
 AND b.started_at < coalesce(a.finished_at, 'infinity')
 AND tstzrange(a.started_at, coalesce(a.finished_at, 'infinity')) && tstzrange(b.started_at, coalesce(b.finished_at, 'infinity'))`).Scan(&overlaps)
	if err != nil {
		t.Fatalf("overlap query: %v", err)
	}
	if overlaps > 0 {
		t.Errorf("G1 broken: %d pairs of runs of one source overlap in the history", overlaps)
	}

	var rows, notSucceeded, idOrder int64
	err = pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status <> 'succeeded' OR finished_at IS NULL),
	count(*) FILTER (WHERE started_at <= prev)
FROM (SELECT *, lag(started_at) OVER (PARTITION BY source ORDER BY id) AS prev FROM `+table+`) h`).Scan(&rows, &notSucceeded, &idOrder)
	if err != nil {
		t.Fatalf("history query: %v", err)
	}
	if rows != wins {
		t.Errorf("history has %d runs, Go counted %d wins", rows, wins)
	}
	if notSucceeded > 0 {
		t.Errorf("%d runs did not end as succeeded", notSucceeded)
	}
	if idOrder > 0 {
		t.Errorf("G4 broken: %d runs have a higher ID than an earlier run of their source but did not start later", idOrder)
	}
	perSource, err := pool.Query(ctx, `SELECT source, count(*) FROM `+table+` GROUP BY source`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for perSource.Next() {
		var s string
		var n int64
		if err := perSource.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		got[s] = n
	}
	if err := perSource.Err(); err != nil {
		t.Fatal(err)
	}
	for _, s := range sources {
		if got[s] < 10 {
			t.Errorf("source %q won only %d times", s, got[s])
		}
	}
	if n := advisoryLocks(t, pool); n != 0 {
		t.Errorf("%d advisory locks still held", n)
	}
}

// contentionPool opens a pool with a connection for every goroutine, and
// opens those connections up front so that the contention time is spent on
// claims, not on connection handshakes.
func contentionPool(t *testing.T, db *pgtest.DB, isolation string) *pgxpool.Pool {
	t.Helper()
	const conns = 68
	configure := func(c *pgxpool.Config) { c.MaxConns = conns }
	var pool *pgxpool.Pool
	if isolation == "" {
		pool = db.NewPool(t, configure)
	} else {
		pool = poolWithIsolation(t, db, isolation, configure)
	}
	held := make([]*pgxpool.Conn, conns)
	var wg sync.WaitGroup
	for i := range held {
		wg.Go(func() {
			c, err := pool.Acquire(t.Context())
			if err != nil {
				t.Errorf("open connection: %v", err)
				return
			}
			held[i] = c
		})
	}
	wg.Wait()
	for _, c := range held {
		if c != nil {
			c.Release()
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return pool
}

// TestContentionOneSource: 64 claimers on one source, each with its own
// owner, never overlap (G1), in each form of the claim. Not parallel: it
// uses the machine's CPUs.
func TestContentionOneSource(t *testing.T) {
	for _, f := range claimForms {
		t.Run(f.name, func(t *testing.T) {
			db := pgtest.New(t)
			pool := contentionPool(t, db, "")
			migratedStore(t, pool)
			store := formStore(t, pool, f)
			sources := []string{"avito"}
			res := contend(t, store, sources, 64)
			checkContention(t, db.Pool, store.Table(), sources, res)
		})
	}
}

// TestContentionFourSources: 4 sources with 16 claimers each; claims of
// different sources do not block each other and none overlap.
func TestContentionFourSources(t *testing.T) {
	db := pgtest.New(t)
	pool := contentionPool(t, db, "")
	store := migratedStore(t, pool)
	sources := []string{"a", "b", "c", "d"}
	res := contend(t, store, sources, 16)
	checkContention(t, db.Pool, store.Table(), sources, res)
}

// TestContentionIsolationDefaults: G1 (and G7) with the database's default
// transaction isolation set to repeatable read, then serializable. A claim
// that inherited the default would re-check with a snapshot taken before
// the lock and double-run.
//
// Each form of the claim is pinned before its first claim, so that the
// implicit attempt of each (its call of the claim function) is what
// refuses the default; both then go on in the explicit form.
func TestContentionIsolationDefaults(t *testing.T) {
	for _, level := range []string{"repeatable read", "serializable"} {
		for _, f := range claimForms {
			t.Run(strings.ReplaceAll(level, " ", "_")+"/"+f.name, func(t *testing.T) {
				db := migratedDB(t)
				pool := contentionPool(t, db, level)
				store := formStore(t, pool, f)
				sources := []string{"avito"}
				res := contend(t, store, sources, 64)
				checkContention(t, db.Pool, store.Table(), sources, res)
			})
		}
	}
}

// ---------------------------------------------------------------------------
// The explicit-isolation fallback

var beginReadCommitted = regexp.MustCompile(`(?is)^\s*(BEGIN|START\s+TRANSACTION)\b.*\bREAD\s+COMMITTED\b`)

// sentClaim is one claim as a pool sent it: the function's call or the
// batch, implicit or inside an explicit READ COMMITTED transaction.
type sentClaim struct {
	function, explicit bool
	sql                []string
}

// sentClaims returns the claims recorded since the last call, in order:
// single queries first, then batches (a claim is sent as one or the other).
func sentClaims(rec *sqlRecorder, store *runclaim.PostgresStore) []sentClaim {
	batches, queries := rec.take()
	var out []sentClaim
	for _, q := range queries {
		if isClaimCall(q, store) {
			out = append(out, sentClaim{function: true, sql: []string{q}})
		}
	}
	for _, b := range batches {
		all := strings.Join(b, "\n")
		if isClaimCall(all, store) || strings.Contains(all, "pg_try_advisory_xact_lock") {
			out = append(out, sentClaim{function: isClaimCall(all, store), explicit: beginReadCommitted.MatchString(b[0]), sql: b})
		}
	}
	return out
}

// TestIsolationFallback: under a read committed default a claim is one
// statement (the function) or one batch. Under another default the first
// claim's implicit attempt writes nothing (not even an identity value), the
// store re-sends the claim inside an explicit READ COMMITTED transaction,
// and keeps using that form. The session keeps its default. Both forms of
// the claim, and a new store, whose first claim calls the function.
func TestIsolationFallback(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"read committed", "repeatable read", "serializable"} {
		for _, f := range append(claimForms, claimForm{"new store", 0}) {
			t.Run(strings.ReplaceAll(level, " ", "_")+"/"+strings.ReplaceAll(f.name, " ", "_"), func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				db := migratedDB(t)
				rec := &sqlRecorder{}
				pool := poolWithIsolation(t, db, level, func(c *pgxpool.Config) {
					c.MaxConns = 1
					c.ConnConfig.Tracer = rec
				})
				rec.take()
				store, err := runclaim.NewPostgresStore(pool)
				if err != nil {
					t.Fatal(err)
				}
				if f.version != 0 {
					store = formStore(t, pool, f)
				}
				explicit := level != "read committed"
				function := f.version >= 3 || f.version == 0

				run, err := newClaimer(t, store, runclaim.WithOwner("a")).Claim(ctx, "a")
				if err != nil {
					t.Fatalf("first Claim: %v", err)
				}
				if got := readState(t, db.Pool, store.Table()); got != (tableState{Rows: 1, MaxID: 1, Running: 1}) || run.ID != 1 {
					t.Errorf("after the first claim: table %+v, run ID %d; want exactly one row, ID 1", got, run.ID)
				}
				sent := sentClaims(rec, store)
				want := []sentClaim{{function: function}}
				if explicit {
					want = append(want, sentClaim{function: function, explicit: true})
				}
				if len(sent) != len(want) {
					t.Fatalf("first claim sent %d claims, want %d: %+v", len(sent), len(want), sent)
				}
				for i := range want {
					if sent[i].function != want[i].function || sent[i].explicit != want[i].explicit {
						t.Errorf("first claim, attempt %d: function %v, explicit %v; want %v, %v: %q",
							i, sent[i].function, sent[i].explicit, want[i].function, want[i].explicit, sent[i].sql)
					}
				}

				// Later claims, won or lost, go straight to the right form.
				if _, err := newClaimer(t, store, runclaim.WithOwner("b")).Claim(ctx, "a"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
					t.Errorf("losing Claim: %v, want ErrAlreadyRunning", err)
				}
				if _, err := newClaimer(t, store).Claim(ctx, "b"); err != nil {
					t.Errorf("second winning Claim: %v", err)
				}
				sent = sentClaims(rec, store)
				if len(sent) != 2 {
					t.Fatalf("two claims sent %d claims, want 2: %+v", len(sent), sent)
				}
				for _, c := range sent {
					if c.explicit != explicit || c.function != (f.version != 2) {
						t.Errorf("claim %q: explicit READ COMMITTED %v, function %v; want %v, %v", c.sql, c.explicit, c.function, explicit, f.version != 2)
					}
				}
				if got := readState(t, db.Pool, store.Table()); got.Rows != 2 || got.MaxID != 2 {
					t.Errorf("after three claims: table %+v, want two rows with IDs 1 and 2", got)
				}
				var after string
				if err := pool.QueryRow(ctx, "SHOW transaction_isolation").Scan(&after); err != nil || after != level {
					t.Errorf("session isolation after the claims: %q (%v), want the default %q", after, err, level)
				}
			})
		}
	}
}

// ---------------------------------------------------------------------------
// Round trips

// TestClaimRoundTrips counts what goes over the wire on a pool of one
// connection: after the first claim has prepared the statements, a winning
// claim, a losing claim, a heartbeat and a finish each take exactly one
// write and one round trip, whatever the isolation default, for a store
// that knows its table's version and for a new one.
func TestClaimRoundTrips(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"read committed", "repeatable read"} {
		for _, f := range append(claimForms, claimForm{"new store", 0}) {
			t.Run(strings.ReplaceAll(level, " ", "_")+"/"+strings.ReplaceAll(f.name, " ", "_"), func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				db := migratedDB(t)
				alterDatabase(t, db, "default_transaction_isolation", level)
				pool, wire := countingPool(t, db, 1)
				var got string
				if err := pool.QueryRow(ctx, "SHOW transaction_isolation").Scan(&got); err != nil || got != level {
					t.Fatalf("SHOW transaction_isolation = %q, %v; want %q", got, err, level)
				}
				store, err := runclaim.NewPostgresStore(pool)
				if err != nil {
					t.Fatal(err)
				}
				if f.version != 0 {
					store = formStore(t, pool, f)
				}
				a := newClaimer(t, store, runclaim.WithOwner("a"))
				b := newClaimer(t, store, runclaim.WithOwner("b"))

				measure := func(what string, want int64, f func() error) {
					t.Helper()
					w0, r0 := wire.Counts()
					if err := f(); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					w1, r1 := wire.Counts()
					t.Logf("%-16s %-36s %d round trips, %d writes", level, what, r1-r0, w1-w0)
					if r1-r0 != want || w1-w0 != want {
						t.Errorf("%s: %d round trips and %d writes, want %d of each", what, r1-r0, w1-w0, want)
					}
				}
				var run *runclaim.Run
				first := int64(2) // prepare, then the claim
				if level != "read committed" {
					first += 2 // the explicit form, prepared first
				}
				measure("first claim on the connection", first, func() (err error) { run, err = a.Claim(ctx, "src"); return err })
				measure("first heartbeat", 2, func() error { return run.Heartbeat(ctx) })
				measure("first finish", 2, func() error { return run.Finish(ctx, nil) })

				measure("winning claim", 1, func() (err error) { run, err = a.Claim(ctx, "src"); return err })
				measure("losing claim", 1, func() error {
					if _, err := b.Claim(ctx, "src"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
						return fmt.Errorf("got %v, want ErrAlreadyRunning", err)
					}
					return nil
				})
				measure("heartbeat", 1, func() error { return run.Heartbeat(ctx) })
				measure("finish", 1, func() error { return run.Finish(ctx, nil) })
				measure("finish again (no SQL)", 0, func() error { return run.Finish(ctx, nil) })
				measure("winning claim, other source", 1, func() (err error) { _, err = a.Claim(ctx, "src2"); return err })
			})
		}
	}
}

// ---------------------------------------------------------------------------
// G6: the database clock

// forbiddenClock matches SQL time functions that are not clock_timestamp():
// the transaction's start time (now(), current_timestamp, ...) or the
// statement's.
var forbiddenClock = regexp.MustCompile(`(?i)\b(now\s*\(|current_timestamp|current_time|current_date|localtimestamp|localtime|transaction_timestamp|statement_timestamp)`)

// TestDatabaseClock: runs carry the database's clock_timestamp(): the lease
// is exactly the configured length on the database clock, two statements
// of one claim transaction see different times (now() would give both the
// same), and the SQL uses clock_timestamp and no other time function.
// Both forms of the claim: for the function, the SQL checked is its body.
func TestDatabaseClock(t *testing.T) {
	t.Parallel()
	for _, f := range claimForms {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			testDatabaseClock(t, f)
		})
	}
}

func testDatabaseClock(t *testing.T, f claimForm) {
	ctx := t.Context()
	db := migratedDB(t)
	pool, rec := recordingPool(t, db)
	store := formStore(t, pool, f)
	var body string
	// The bodies of the functions a claim calls: the current version's,
	// and the overloads of the version before.
	if err := db.Pool.QueryRow(ctx, "SELECT string_agg(prosrc, E'\\n') FROM pg_catalog.pg_proc WHERE oid IN (pg_catalog.to_regprocedure($1), pg_catalog.to_regprocedure($2), pg_catalog.to_regprocedure($3))",
		runclaim.ClaimFuncName(store)+runclaim.StateFuncArgs, runclaim.ClaimFuncName(store)+"(bigint, text, text, bigint, bigint, bigint, timestamptz, text[], bigint[], text[], integer[])",
		runclaim.ClaimBodyName(store)+runclaim.ClaimBodyArgs).Scan(&body); err != nil {
		t.Fatal(err)
	}
	// The test compares lease ends with the database clock's own
	// arithmetic (exact intervals); the lease is long enough that a busy
	// machine cannot let it lapse between the claim, the heartbeat and the
	// finish (the expired path has a run of its own, on MinLease, below).
	const lease = 30 * time.Second
	c := newClaimer(t, store, runclaim.WithLease(lease), runclaim.WithOwner("a"))
	var sqlSeen []string
	checkSQL := func(what string, mustUseClock bool) {
		t.Helper()
		batches, queries := rec.take()
		var stmts []string
		for _, b := range batches {
			stmts = append(stmts, b...)
		}
		stmts = append(stmts, queries...)
		if len(stmts) == 0 {
			t.Fatalf("%s sent no SQL", what)
		}
		for _, s := range stmts {
			if isClaimCall(s, store) {
				// A ClaimMany's cache of a key's room names its
				// transaction by the transaction's start, now(), as an
				// identity, never as the time of anything it records.
				stmts = append(stmts, strings.ReplaceAll(body, "pg_catalog.now()::pg_catalog.text", "transaction_identity"))
				break
			}
		}
		for _, s := range stmts {
			if m := forbiddenClock.FindString(s); m != "" {
				t.Errorf("%s uses %q instead of clock_timestamp(): %s", what, m, s)
			}
		}
		if mustUseClock && !strings.Contains(strings.Join(stmts, "\n"), "clock_timestamp()") {
			t.Errorf("%s does not use clock_timestamp(): %q", what, stmts)
		}
		sqlSeen = append(sqlSeen, stmts...)
	}

	before := dbNow(t, db.Pool)
	run, err := c.Claim(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	after := dbNow(t, db.Pool)
	checkSQL("Claim", true)
	row := loadRun(t, db.Pool, store.Table(), run.ID)
	if diff := cmp.Diff(row.info(), runInfo(run)); diff != "" {
		t.Errorf("Run differs from its row (-row +run):\n%s", diff)
	}
	if run.StartedAt.Before(before) || run.StartedAt.After(after) {
		t.Errorf("StartedAt %v is outside the database clock's [%v, %v] around the claim", run.StartedAt, before, after)
	}
	if got := run.LeaseUntil.Sub(run.StartedAt); got != lease {
		t.Errorf("LeaseUntil - StartedAt = %v, want exactly %v", got, lease)
	}
	var exact bool
	if err := db.Pool.QueryRow(ctx, "SELECT lease_until - started_at = interval '30 seconds' AND heartbeat_at = started_at FROM "+store.Table()+" WHERE id = $1", run.ID).Scan(&exact); err != nil || !exact {
		t.Errorf("in SQL, lease_until - started_at is not exactly the lease or heartbeat_at is not started_at (%v)", err)
	}

	// Two claims in quick succession.
	run2, err := c.Claim(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	checkSQL("Claim", true)
	if !run2.StartedAt.After(run.StartedAt) {
		t.Errorf("a later claim started at %v, not after %v", run2.StartedAt, run.StartedAt)
	}

	// Heartbeat: the new lease is counted from the heartbeat, by the
	// database clock.
	if err := run.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	checkSQL("Heartbeat", true)
	row = loadRun(t, db.Pool, store.Table(), run.ID)
	if !row.HeartbeatAt.After(row.StartedAt) || !aboutLease(row.LeaseUntil.Sub(row.HeartbeatAt), lease) || !row.LeaseUntil.Equal(run.Deadline()) {
		t.Errorf("after Heartbeat: row %+v, Deadline %v; want heartbeat_at after started_at and lease_until = heartbeat_at + %v = Deadline", row, run.Deadline(), lease)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	checkSQL("Finish", true)
	row = loadRun(t, db.Pool, store.Table(), run.ID)
	if row.FinishedAt == nil || !row.FinishedAt.After(row.HeartbeatAt) {
		t.Errorf("finished_at %v is not after heartbeat_at %v", row.FinishedAt, row.HeartbeatAt)
	}

	// A takeover expires the old run and inserts the new one in one
	// transaction: with clock_timestamp() the new run starts after the old
	// one was marked finished; with now() both times would be equal.
	// MinLease (10 ms): a run that lapses at once, to reach the path of an
	// expired run; the test waits for its end by the database clock.
	old, err := newClaimer(t, store, runclaim.WithLease(runclaim.MinLease)).Claim(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, 5*time.Millisecond, "the short lease to end", func() bool { return dbNow(t, db.Pool).After(old.LeaseUntil) })
	rec.take()
	next, err := c.Claim(ctx, "c")
	if err != nil {
		t.Fatalf("takeover Claim: %v", err)
	}
	checkSQL("takeover Claim", true)
	oldRow := loadRun(t, db.Pool, store.Table(), old.ID)
	if oldRow.Status != "expired" || oldRow.FinishedAt == nil || !next.StartedAt.After(*oldRow.FinishedAt) {
		t.Errorf("takeover: old run %+v, new run started %v; want expired, finished before the new start", oldRow, next.StartedAt)
	}
	if t.Failed() {
		t.Logf("SQL sent:\n%s", strings.Join(sqlSeen, "\n---\n"))
	}
}

// ---------------------------------------------------------------------------
// G7: no session state

// TestNoSessionState: after claims won, lost and skipped in flight, a
// heartbeat and a finish on a one-connection pool, that session holds no
// advisory lock, has no setting changed from its default, and has not kept
// the claim's transaction-local flag.
func TestNoSessionState(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	pool := db.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	sessionSettings := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT name || '=' || setting FROM pg_catalog.pg_settings WHERE source = 'session' ORDER BY name")
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			s = append(s, v)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	var pid int32
	if err := pool.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	settings := sessionSettings()

	a, b := newClaimer(t, store, runclaim.WithOwner("a")), newClaimer(t, store, runclaim.WithOwner("b"))
	run, err := a.Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, "src"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("losing Claim: %v", err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", runclaim.AdvisoryKeyOf(runclaim.DefaultNamespace, "busy")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, "busy"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("in-flight Claim: %v", err)
	}
	if err := run.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}

	var samePID int32
	var locks int64
	var flag *string
	err = pool.QueryRow(ctx, `SELECT pg_catalog.pg_backend_pid(),
	(SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()),
	pg_catalog.current_setting('runclaim.locked', true)`).Scan(&samePID, &locks, &flag)
	if err != nil {
		t.Fatal(err)
	}
	if samePID != pid {
		t.Fatalf("the pool changed connections (pid %d, then %d); the test needs one session", pid, samePID)
	}
	if locks != 0 {
		t.Errorf("the session holds %d advisory locks after the claims", locks)
	}
	if flag != nil && *flag != "" {
		t.Errorf("the claim's flag outlived its transaction: runclaim.locked = %q", *flag)
	}
	if diff := cmp.Diff(settings, sessionSettings()); diff != "" {
		t.Errorf("session settings changed by the claims (-before +after):\n%s", diff)
	}
}

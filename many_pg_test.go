package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
	"github.com/runclaim/runclaim/internal/tcpproxy"
)

// contendMany is contend for ClaimMany: perClaimer claimers, each a
// Claimer of its own, call ClaimMany in a loop, each time with about two
// thirds of sources in a shuffled order, so that their sets overlap in
// every order; a winner checks that it is its source's only holder (a
// counter per source), holds each run 1–3 ms and finishes it. The pause
// between calls scales with the last call's latency, as in contend.
func contendMany(t *testing.T, store runclaim.Store, sources []string, claimers int) *contentionResult {
	t.Helper()
	ctx := t.Context()
	res := &contentionResult{}
	holders := make([]atomic.Int32, len(sources))
	index := make(map[string]int, len(sources))
	for i, s := range sources {
		index[s] = i
	}
	start := make(chan struct{})
	var began time.Time
	wantWins := int64(contentionWins * len(sources))
	more := func() bool {
		d := time.Since(began)
		return d < contentionTime || d < contentionMaxTime && res.wins.Load() < wantWins
	}
	var wg sync.WaitGroup
	for w := range claimers {
		// A skip without a holder is a source whose advisory lock another
		// call held: the overlapping calls met at the lock.
		inFlight := runclaim.WithHooks(runclaim.Hooks{Skipped: func(e runclaim.Event) {
			var nc *runclaim.NotClaimedError
			if errors.As(e.Err, &nc) && nc.Holder == nil {
				res.inFlight.Add(1)
			}
		}})
		c := newClaimer(t, store, runclaim.WithOwner(fmt.Sprintf("many/w%02d", w)), runclaim.WithLease(time.Minute), inFlight)
		hold := time.Duration(1+w%3) * time.Millisecond
		wg.Go(func() {
			<-start
			var latency time.Duration
			for more() {
				// The workload's pacing, not synchronisation.
				time.Sleep(rand.N(min(contentionMaxPause, contentionPause*latency+time.Millisecond)))
				picked := rand.Perm(len(sources))[:2*len(sources)/3]
				asked := make([]string, len(picked))
				for i, p := range picked {
					asked[i] = sources[p]
				}
				sent := time.Now()
				runs, err := c.ClaimMany(ctx, asked)
				latency = time.Since(sent)
				if err != nil {
					res.fail("ClaimMany: %v", err)
					continue
				}
				res.skips.Add(int64(len(asked) - len(runs)))
				last := -1
				for _, run := range runs {
					i := slices.Index(asked, run.Source)
					if i <= last {
						res.fail("ClaimMany returned run of %q out of the order asked", run.Source)
					}
					last = i
					if n := holders[index[run.Source]].Add(1); n != 1 {
						res.overlaps.Add(1)
					}
					res.wins.Add(1)
				}
				time.Sleep(hold) // the jobs: the workload, not synchronisation
				for _, run := range runs {
					holders[index[run.Source]].Add(-1)
					if err := run.Finish(ctx, nil); err != nil {
						res.fail("Finish run %d: %v", run.ID, err)
					}
				}
			}
		})
	}
	began = time.Now()
	close(start)
	wg.Wait()
	res.took = time.Since(began)
	return res
}

// TestClaimManyContention: eight claimers call ClaimMany on overlapping,
// shuffled sets of five of eight sources, in each form of the claim (the
// current version's statement and the previous version's): no two runs of a source overlap, in Go and in the history
// (G1), no call fails (none deadlocks: the advisory locks are tried, never
// waited for), and no advisory lock is left. Not parallel: it uses the
// machine's CPUs.
func TestClaimManyContention(t *testing.T) {
	for _, f := range claimForms {
		t.Run(f.name, func(t *testing.T) {
			db := pgtest.New(t)
			pool := contentionPool(t, db, "")
			migratedStore(t, pool)
			store := formStore(t, pool, f)
			sources := make([]string, 8)
			for i := range sources {
				sources[i] = fmt.Sprintf("city-%02d", i)
			}
			res := contendMany(t, store, sources, 8)
			checkContention(t, db.Pool, store.Table(), sources, res)
		})
	}
}

// TestClaimManyOneTransaction: a ClaimMany on a table with the claim
// function is one statement, whose runs are written by one transaction
// (one xmin); a ClaimMany whose sources are all held writes nothing: the
// holders' rows keep their xmin and lease, and no identity value is used
// up.
func TestClaimManyOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	pool, rec := recordingPool(t, db)
	traced, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, traced)
	sources := []string{"e", "a", "d", "b", "c"}
	// The store's one probe of the advisory locks, which its first claim
	// would make, made first.
	if ok, err := traced.ProveExclusion(ctx); !ok || err != nil {
		t.Fatalf("ProveExclusion = %v, %v", ok, err)
	}
	rec.take()
	runs, err := c.ClaimMany(ctx, sources)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != len(sources) {
		t.Fatalf("won %d runs of %d free sources", len(runs), len(sources))
	}
	batches, queries := rec.take()
	if len(batches) != 0 || len(queries) != 1 || !isClaimCall(queries[0], traced) {
		t.Errorf("ClaimMany sent batches %q and queries %q, want one query calling the claim function", batches, queries)
	}
	ids := make([]int64, len(runs))
	for i, r := range runs {
		if r.Source != sources[i] {
			t.Errorf("run %d is of %q, want %q (the order asked)", i, r.Source, sources[i])
		}
		ids[i] = r.ID
	}
	var xmins int
	if err := db.Pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM `+store.Table()+` WHERE id = ANY($1)`, ids).Scan(&xmins); err != nil {
		t.Fatal(err)
	}
	if xmins != 1 {
		t.Errorf("the %d runs were written by %d transactions, want 1", len(runs), xmins)
	}

	type rowState struct {
		xmin  string
		lease time.Time
	}
	state := func() map[int64]rowState {
		rows, err := db.Pool.Query(ctx, `SELECT id, xmin::text, lease_until FROM `+store.Table())
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[int64]rowState{}
		for rows.Next() {
			var id int64
			var s rowState
			if err := rows.Scan(&id, &s.xmin, &s.lease); err != nil {
				t.Fatal(err)
			}
			out[id] = s
		}
		return out
	}
	before := state()
	other := newClaimer(t, store, runclaim.WithOwner("other"))
	backward := slices.Clone(sources)
	slices.Reverse(backward)
	again, err := other.ClaimMany(ctx, backward)
	if err != nil || len(again) != 0 {
		t.Fatalf("ClaimMany of held sources: %d runs, %v; want none, nil", len(again), err)
	}
	if after := state(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a ClaimMany that won nothing changed the table:\nbefore %v\nafter  %v", before, after)
	}
	next, err := other.Claim(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Max(ids) + 1; next.ID != want {
		t.Errorf("the next run's ID is %d, want %d: the ClaimMany that won nothing used up identity values", next.ID, want)
	}
	if n := advisoryLocks(t, db.Pool); n != 0 {
		t.Errorf("%d advisory locks held after the calls", n)
	}
}

// TestClaimManyErrorClaimsNothing: a ClaimMany whose statement fails at
// its last source (a check constraint refuses that row) rolls back the
// runs of the sources before it, in each form of the claim; so does one
// whose table is locked, which fails within the lock bound.
func TestClaimManyErrorClaimsNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, f := range claimForms {
		t.Run(f.name, func(t *testing.T) {
			db := migratedDB(t)
			plain := storeOn(t, db.Pool)
			if _, err := db.Pool.Exec(ctx, `ALTER TABLE `+plain.Table()+` ADD CONSTRAINT poison CHECK (source <> 'poison')`); err != nil {
				t.Fatal(err)
			}
			c := newClaimer(t, formStore(t, db.Pool, f))
			runs, err := c.ClaimMany(ctx, []string{"a", "b", "poison"})
			if err == nil || errors.Is(err, runclaim.ErrNotClaimed) || pgCode(err) != "23514" {
				t.Fatalf("ClaimMany with a source the table refuses: %d runs, %v; want the check violation", len(runs), err)
			}
			var n int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+plain.Table()).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("a failed ClaimMany left %d rows", n)
			}
			if n := advisoryLocks(t, db.Pool); n != 0 {
				t.Errorf("%d advisory locks held after a failed ClaimMany", n)
			}
			// A table lock: the claim waits at most its bound.
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `LOCK TABLE `+plain.Table()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // far above the bound; only a hang reaches it
			defer cancel()
			if runs, err := c.ClaimMany(cctx, []string{"a", "b"}); pgCode(err) != "55P03" {
				t.Errorf("ClaimMany on a locked table: %d runs, %v; want lock_timeout's 55P03", len(runs), err)
			}
		})
	}
}

// TestClaimManyIsolationDefault: under a default isolation level other
// than READ COMMITTED, ClaimMany's implicit statement writes nothing and
// the store sends it again in the explicit form, which wins.
func TestClaimManyIsolationDefault(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	pool := poolWithIsolation(t, db, "serializable", nil)
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := newClaimer(t, store).ClaimMany(ctx, []string{"a", "b"})
	if err != nil || len(runs) != 2 {
		t.Fatalf("ClaimMany under serializable: %d runs, %v; want 2, nil", len(runs), err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), max(id) FROM `+store.Table()).Scan(&n, new(int64)); err != nil {
		t.Fatal(err)
	}
	if n != 2 || runs[1].ID != runs[0].ID+1 {
		t.Errorf("table has %d rows, runs %d and %d: the refused attempt wrote something", n, runs[0].ID, runs[1].ID)
	}
}

// TestDoManyPostgres: DoMany's runs on the Postgres store heartbeat in one
// statement for all of them (no heartbeat of one run is sent), their
// leases are extended, and a run released by an operator meanwhile is lost
// alone: its fn learns it, the others succeed.
func TestDoManyPostgres(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	pool, rec := recordingPool(t, db)
	traced, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	// A 2 s lease, heartbeats every 200 ms: fn waits for outcomes (an
	// extended lease, a lost run), not for a time; a loaded machine only
	// makes it wait longer, up to waitUntil's bound.
	c := newClaimer(t, traced, runclaim.WithLease(2*time.Second), runclaim.WithHeartbeat(200*time.Millisecond))
	sources := sourcesN(20)
	released := make(chan struct{})
	var once sync.Once
	err = c.DoMany(ctx, sources, func(ctx context.Context, run *runclaim.Run) error {
		waitUntil(t, time.Minute, 10*time.Millisecond, "an extended lease", func() bool { return run.Deadline().After(run.LeaseUntil) })
		if run.Source == "city-007" {
			once.Do(func() {
				if _, err := store.Release(context.WithoutCancel(ctx), run.ID, run.Source); err != nil {
					t.Errorf("Release: %v", err)
				}
				close(released)
			})
			select {
			case <-run.Lost():
				return errors.New("released")
			case <-time.After(time.Minute): // a bound, far above a heartbeat interval
				return errors.New("never told of the release")
			}
		}
		<-released
		// Two more heartbeat intervals at least: the batch after the
		// release extended this run.
		d := run.Deadline()
		waitUntil(t, time.Minute, 10*time.Millisecond, "a lease extended after the release", func() bool { return run.Deadline().After(d) })
		return context.Cause(ctx)
	})
	if !errors.Is(err, runclaim.ErrLeaseLost) || !strings.Contains(err.Error(), "city-007") || strings.Count(err.Error(), "runclaim: run ") != 1 {
		t.Errorf("DoMany: %v; want city-007's lost run alone", err)
	}
	batches, queries := rec.take()
	single, many := 0, 0
	for _, q := range append(queries, slices.Concat(batches...)...) {
		switch {
		case strings.Contains(q, "pg_catalog.unnest($4::pg_catalog.timestamptz[])) AS h"):
			many++
		case strings.Contains(q, "heartbeat_at = c.now"):
			single++
		}
	}
	if single != 0 || many < 2 {
		t.Errorf("%d heartbeats of one run and %d of many sent; want none and at least 2", single, many)
	}
	t.Logf("%d heartbeat statements for %d runs", many, len(sources))
}

// TestClaimManyCancelledInFlight: a ClaimMany whose context ends once its
// statement has reached the server (a proxy delays every byte 1 s each way,
// so the answer is still a second away) lets the statement finish, deletes
// the runs it won, and returns context.Canceled: nothing is left, though
// the runs were won (their IDs are used up).
func TestClaimManyCancelledInFlight(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	cfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := tcpproxy.Start(net2addr(cfg.ConnConfig.Host, cfg.ConnConfig.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	pool := db.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.Host = "127.0.0.1"
		c.ConnConfig.Port = uint16(proxy.Addr().Port)
		c.ConnConfig.Fallbacks = nil
		c.MaxConns = 1
		c.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	})
	delayed, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, delayed)
	// Warm the connection: the statement is prepared, so the call below
	// is one write.
	warm, err := c.ClaimMany(t.Context(), []string{"warm"})
	if err != nil || len(warm) != 1 {
		t.Fatalf("ClaimMany: %v, %v", warm, err)
	}
	proxy.Delay(time.Second)
	sent := proxy.Stats().BytesToServer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		// Once the statement has reached the server, its answer is a
		// second away: cancel then.
		if proxy.Wait(ctx, func(s tcpproxy.Stats) bool { return s.BytesToServer > sent }) == nil {
			cancel()
		}
	}()
	sources := sourcesN(5)
	runs, err := c.ClaimMany(ctx, sources)
	if runs != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("ClaimMany cancelled in flight: %v, %v; want nil and context.Canceled", runs, err)
	}
	proxy.Pass()
	var left int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM `+store.Table()+` WHERE source = ANY($1)`, sources).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("a ClaimMany cancelled in flight left %d rows", left)
	}
	next, err := c.Claim(t.Context(), "after")
	if err != nil {
		t.Fatal(err)
	}
	if min := warm[0].ID + int64(len(sources)) + 1; next.ID < min {
		t.Errorf("the next run's ID is %d, want at least %d: the cancelled call won nothing, so its deletion was not tested", next.ID, min)
	}
}

// TestClaimManySynchronousCommit: with WithSynchronousCommit the store
// sends ClaimMany and HeartbeatMany in the explicit form, with the SET
// LOCAL, and both work.
func TestClaimManySynchronousCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	pool, rec := recordingPool(t, db)
	store, err := runclaim.NewPostgresStore(pool, runclaim.WithSynchronousCommit("local"))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := newClaimer(t, store).ClaimMany(ctx, []string{"a", "b"})
	if err != nil || len(runs) != 2 {
		t.Fatalf("ClaimMany: %d runs, %v", len(runs), err)
	}
	res, err := store.HeartbeatMany(ctx, []runclaim.HeartbeatRequest{
		{ID: runs[0].ID, Source: "a", StartedAt: runs[0].StartedAt, Lease: time.Minute}, {ID: runs[1].ID, Source: "b", StartedAt: runs[1].StartedAt, Lease: time.Minute},
	})
	if err != nil || len(res) != 2 || res[0].Err != nil || res[1].Err != nil || !res[1].LeaseUntil.After(runs[1].LeaseUntil) {
		t.Fatalf("HeartbeatMany: %v, %v", res, err)
	}
	batches, _ := rec.take()
	explicit := 0
	for _, b := range batches {
		if len(b) == 4 && beginReadCommitted.MatchString(b[0]) && strings.Contains(b[1], "synchronous_commit") {
			explicit++
		}
	}
	if explicit != 2 {
		t.Errorf("%d of the batches %q are explicit with synchronous_commit, want 2", explicit, batches)
	}
}

// Rule: one ClaimMany cannot take more of the server's shared lock table
// than MaxClaimMany sources and MaxClaimManyKeys distinct keys: 1,000
// sources naming 16 keys each, all distinct, which took some 17,000
// advisory locks and made other sessions of the server fail with 53200,
// are refused before anything is sent, by both stores alike, and nothing
// is written; MaxClaimManyKeys keys are claimed.
func TestClaimManyKeysBound(t *testing.T) {
	t.Parallel()
	for _, sc := range sharedtest.Stores() {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			store := sc.Open(t).(interface {
				runclaim.Store
				runclaim.ManyStore
			})
			reqs := make([]runclaim.ClaimRequest, runclaim.MaxClaimMany)
			for i := range reqs {
				keys := make([]string, runclaim.MaxKeys)
				for j := range keys {
					keys[j] = fmt.Sprintf("site-%d-%d", i, j)
				}
				reqs[i] = runclaim.ClaimRequest{Source: fmt.Sprintf("s%d", i), Owner: "o", Lease: time.Minute, Keys: keys}
			}
			_, err := store.ClaimMany(ctx, reqs)
			if err == nil || !strings.Contains(err.Error(), "MaxClaimManyKeys") {
				t.Fatalf("ClaimMany of %d sources naming %d distinct keys: %v; want a refusal that names MaxClaimManyKeys",
					len(reqs), len(reqs)*runclaim.MaxKeys, err)
			}
			if err := runclaim.ValidateClaims(reqs); err == nil {
				t.Error("ValidateClaims accepts what ClaimMany refuses")
			}
			// Nothing was written: the first and the last source are free.
			for _, src := range []string{reqs[0].Source, reqs[len(reqs)-1].Source} {
				if _, err := store.Claim(ctx, runclaim.ClaimRequest{Source: src, Owner: "other", Lease: time.Minute}); err != nil {
					t.Errorf("after the refusal, a claim of %s: %v; want a win", src, err)
				}
			}
			// At the bound: MaxClaimManyKeys distinct keys are claimed.
			at := make([]runclaim.ClaimRequest, runclaim.MaxClaimManyKeys)
			for i := range at {
				at[i] = runclaim.ClaimRequest{Source: fmt.Sprintf("k%d", i), Owner: "o", Lease: time.Minute, Keys: []string{fmt.Sprintf("key-%d", i)}}
			}
			res, err := store.ClaimMany(ctx, at)
			if err != nil || len(res) != len(at) || res[0].Err != nil {
				t.Fatalf("ClaimMany of %d sources naming %d distinct keys: %v", len(at), len(at), err)
			}
		})
	}
}

// Rule: a claim that meets a full lock table (53200, out of shared
// memory) says what to do: the error names max_locks_per_transaction and
// keeps the server's error in its chain.
func TestLockTableFullError(t *testing.T) {
	t.Parallel()
	full := &pgconn.PgError{Severity: "ERROR", Code: "53200", Message: "out of shared memory", Hint: "You might need to increase \"max_locks_per_transaction\"."}
	store, err := runclaim.NewPostgresStore(failingQuerier{err: full})
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.Claim(t.Context(), runclaim.ClaimRequest{Source: "a", Owner: "o", Lease: time.Minute})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "53200" || !strings.Contains(err.Error(), "raise max_locks_per_transaction") {
		t.Errorf("claim on a full lock table: %v; want the server's 53200 and what to do", err)
	}
	_, err = store.ClaimMany(t.Context(), []runclaim.ClaimRequest{{Source: "a", Owner: "o", Lease: time.Minute}, {Source: "b", Owner: "o", Lease: time.Minute}})
	if !errors.As(err, &pgErr) || pgErr.Code != "53200" || !strings.Contains(err.Error(), "raise max_locks_per_transaction") {
		t.Errorf("ClaimMany on a full lock table: %v; want the server's 53200 and what to do", err)
	}
}

// failingQuerier is a Querier whose every statement fails with err.
type failingQuerier struct {
	runclaim.Querier
	err error
}

func (q failingQuerier) QueryRow(context.Context, string, ...any) pgx.Row { return errRow{q.err} }

func (q failingQuerier) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, q.err }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	"github.com/runclaim/runclaim/internal/tcpproxy"
)

// The lifecycle rules of lifecycle_test.go, on Postgres, and the ones only
// Postgres can break: Migrate's locks, isolation defaults, a hung
// connection, a single connection as the store's pool, and two stores that
// disagree on the namespace.

// TestPostgresKeepsRunAliveThroughShutdown: a lease of 2 s, heartbeats
// every 667 ms: the run is lost only if no heartbeat gets through for about
// 1.8 s, which a busy machine does not cause, while heartbeats that stop at
// the cancel lose it within the wind-down of three leases.
func TestPostgresKeepsRunAliveThroughShutdown(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	shutdownWhileWindingDown(t, storeOn(t, db.Pool), 2*time.Second)
}

func TestPostgresRunFinishConcurrent(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	var lost atomic.Int32
	c := newClaimer(t, store, runclaim.WithHooks(runclaim.Hooks{LeaseLost: func(runclaim.Event) { lost.Add(1) }}))
	finishConcurrently(t, c)
	if lost.Load() != 0 {
		t.Errorf("LeaseLost fired %d times for runs that finished", lost.Load())
	}
	// The same race one level down, between two replicas' Finish of one
	// run through the store (a retried Finish whose first answer was lost
	// racing the retry).
	for round := range 4 {
		info, err := store.Claim(t.Context(), runclaim.ClaimRequest{Source: "store-race", Owner: "a", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		req := runclaim.FinishRequest{ID: info.ID, Source: info.Source, StartedAt: info.StartedAt, Status: runclaim.StatusFailed, Error: "boom"}
		for i, err := range atOnce(8, func() error { return store.Finish(t.Context(), req) }) {
			if err != nil {
				t.Errorf("round %d: store Finish #%d: %v", round, i, err)
			}
		}
	}
}

// Rule (G2): a lease that has ended by the database clock is lost, whether
// or not a claim has expired the run. Heartbeat and Finish return
// ErrLeaseLost, and the row ends as expired either way.
func TestPostgresLapsedLease(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	table := store.Table()
	ctx := t.Context()
	for _, takeover := range []bool{false, true} {
		source := "lapsed"
		if takeover {
			source = "lapsed-taken-over"
		}
		a, err := store.Claim(ctx, runclaim.ClaimRequest{Source: source, Owner: "a", Lease: runclaim.MinLease})
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 5*time.Second, 5*time.Millisecond, "the lease to end", func() bool { return dbNow(t, db.Pool).After(a.LeaseUntil) })
		if takeover {
			if _, err := store.Claim(ctx, runclaim.ClaimRequest{Source: source, Owner: "b", Lease: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		_, hbErr := store.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: time.Minute})
		finErr := store.Finish(ctx, runclaim.FinishRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Status: runclaim.StatusSucceeded})
		if !errors.Is(hbErr, runclaim.ErrLeaseLost) || !errors.Is(finErr, runclaim.ErrLeaseLost) {
			t.Errorf("takeover=%v: Heartbeat %v, Finish %v; want ErrLeaseLost from both", takeover, hbErr, finErr)
		}
		if row := loadRun(t, db.Pool, table, a.ID); row.Status != "expired" || row.FinishedAt == nil {
			t.Errorf("takeover=%v: the lapsed run ended as %+v, want expired", takeover, row)
		}
		// Retried, Finish says the same.
		if err := store.Finish(ctx, runclaim.FinishRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Status: runclaim.StatusSucceeded}); !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("takeover=%v: retried Finish = %v, want ErrLeaseLost", takeover, err)
		}
	}
}

// Rule (G8): a claim skipped with ErrTooSoon writes nothing, even when the
// source's running run has lapsed.
func TestPostgresTooSoonWritesNothing(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()
	a, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "src", Owner: "a", Lease: runclaim.MinLease, MinInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, 5*time.Millisecond, "the lease to end", func() bool { return dbNow(t, db.Pool).After(a.LeaseUntil) })
	before := readState(t, db.Pool, store.Table())
	_, err = store.Claim(ctx, runclaim.ClaimRequest{Source: "src", Owner: "b", Lease: time.Minute, MinInterval: time.Hour})
	if !errors.Is(err, runclaim.ErrTooSoon) {
		t.Fatalf("claim within the interval = %v, want ErrTooSoon", err)
	}
	if after := readState(t, db.Pool, store.Table()); after != before {
		t.Errorf("a skipped claim changed the table from %+v to %+v", before, after)
	}
	if row := loadRun(t, db.Pool, store.Table(), a.ID); row.Status != "running" || row.FinishedAt != nil {
		t.Errorf("a skipped claim expired the lapsed run: %+v", row)
	}
}

// Rule (G9): Migrate on a current schema takes no lock on the runs table,
// so a lock held by maintenance or a long transaction does not make it
// queue, and claims do not queue behind it.
func TestMigrateCurrentSchemaTakesNoTableLock(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	unlock := lockTable(t, db.Pool, store.Table())
	defer unlock()
	done := make(chan error, 1)
	go func() { done <- store.Migrate(t.Context()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Migrate on a current schema: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Migrate on a current schema waited for a lock on the runs table")
	}
}

// Rule (G7): every write of the store answers as under READ COMMITTED, under
// every isolation default: Heartbeat and Finish that race a takeover answer
// ErrLeaseLost, a Release that races a heartbeat releases, a Prune that
// races updates prunes; never a raw serialization failure. (The claim's
// forms are tested in lock_pg_test.go.)
func TestIsolationDefaultsEveryWrite(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(level, " ", "_"), func(t *testing.T) {
			t.Parallel()
			db := migratedDB(t)
			pool := poolWithIsolation(t, db, level, nil)
			// A store whose claims have seen the session's default sends
			// every statement in the explicit READ COMMITTED form; a fresh
			// one learns it from the first serialization failure. Both must
			// answer right.
			for _, fresh := range []bool{false, true} {
				store, err := runclaim.NewPostgresStore(pool)
				if err != nil {
					t.Fatal(err)
				}
				op := func() *runclaim.PostgresStore {
					if !fresh {
						return store
					}
					s, err := runclaim.NewPostgresStore(pool)
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				for _, what := range []string{"heartbeat", "finish"} {
					raceTakeover(t, db, store, op(), what)
				}
				raceRelease(t, db, store, op())
				racePrune(t, db, op())
			}
		})
	}
}

// raceRelease has an operator's Release wait on the row lock of a
// heartbeat in flight, which then commits: the release goes through.
func raceRelease(t *testing.T, db *pgtest.DB, store, opStore *runclaim.PostgresStore) {
	t.Helper()
	ctx := t.Context()
	info, err := store.Claim(ctx, runclaim.ClaimRequest{Source: fmt.Sprintf("race-release-%p", opStore), Owner: "holder", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `UPDATE `+store.Table()+` SET heartbeat_at = clock_timestamp() WHERE id = $1`, info.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := opStore.Release(ctx, info.ID, "")
		done <- err
	}()
	waitUntil(t, 10*time.Second, 2*time.Millisecond, "Release to wait for the heartbeat's row lock", func() bool { return lockWaiters(t, db.Pool) > 0 })
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := awaitRecv(t, done, 10*time.Second, "Release"); err != nil {
		t.Errorf("Release racing a heartbeat = %v (SQLSTATE %q), want the run released", err, pgCode(err))
	}
}

// racePrune prunes while an operator's session keeps rewriting the finished
// rows Prune reads, and claims keep adding new ones: no prune fails.
func racePrune(t *testing.T, db *pgtest.DB, store *runclaim.PostgresStore) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { // new finished runs
		for i := 0; ctx.Err() == nil; i++ {
			info, err := store.Claim(ctx, runclaim.ClaimRequest{Source: fmt.Sprintf("prune-%d", i%4), Owner: "w", Lease: time.Minute})
			if err == nil {
				err = store.Finish(ctx, runclaim.FinishRequest{ID: info.ID, Source: info.Source, StartedAt: info.StartedAt, Status: runclaim.StatusSucceeded})
			}
			if err != nil && ctx.Err() == nil && !errors.Is(err, runclaim.ErrNotClaimed) {
				t.Errorf("claim or finish while pruning: %v", err)
				return
			}
		}
	})
	wg.Go(func() { // an operator's edits of finished rows
		for ctx.Err() == nil {
			_, _ = db.Pool.Exec(ctx, `UPDATE `+store.Table()+` SET error = coalesce(error, '') WHERE status <> 'running'`)
		}
	})
	var pruned int64
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 200 || pruned < 50 && time.Now().Before(deadline); i++ {
		n, err := store.Prune(ctx, 0)
		if err != nil {
			t.Errorf("Prune racing updates = %v (SQLSTATE %q)", err, pgCode(err))
			return
		}
		pruned += n
	}
	if pruned == 0 {
		t.Error("nothing was pruned: the race did not happen")
	}
}

// raceTakeover claims a run, then has op (heartbeat or finish) of it wait
// on the row lock of a takeover in flight, which then commits: op must
// return ErrLeaseLost.
func raceTakeover(t *testing.T, db *pgtest.DB, store, opStore *runclaim.PostgresStore, op string) {
	t.Helper()
	ctx := t.Context()
	info, err := store.Claim(ctx, runclaim.ClaimRequest{Source: fmt.Sprintf("race-%s-%p", op, opStore), Owner: "holder", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx) // the admin pool: read committed
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `UPDATE `+store.Table()+` SET status = 'expired', finished_at = clock_timestamp() WHERE id = $1`, info.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		switch op {
		case "heartbeat":
			_, err := opStore.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: info.ID, Source: info.Source, StartedAt: info.StartedAt, Lease: time.Minute})
			done <- err
		default:
			done <- opStore.Finish(ctx, runclaim.FinishRequest{ID: info.ID, Source: info.Source, StartedAt: info.StartedAt, Status: runclaim.StatusSucceeded})
		}
	}()
	waitUntil(t, 10*time.Second, 2*time.Millisecond, op+" to wait for the takeover's row lock", func() bool { return lockWaiters(t, db.Pool) > 0 })
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := awaitRecv(t, done, 10*time.Second, op); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("%s racing a takeover = %v (SQLSTATE %q), want ErrLeaseLost", op, err, pgCode(err))
	}
}

// Rule: one hung connection does not lose a healthy run. After the claim,
// the pool's connection is black-holed (a firewall dropped its state); the
// heartbeat on it is abandoned at its deadline, and the next one, on a new
// connection, extends the lease. The lease is derived from how long a new
// connection takes to open here (see below).
func TestPostgresHungHeartbeatConnection(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
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
		c.MaxConns = 4
		c.MinConns = 0
		c.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	})
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	// The store's probe of the advisory locks holds two sessions; made
	// first and its connections closed, so that the claim's is the one
	// connection to hang.
	if ok, err := store.ProveExclusion(t.Context()); !ok || err != nil {
		t.Fatalf("ProveExclusion = %v, %v", ok, err)
	}
	pool.Reset()
	// The heartbeat after the hung one must dial a new connection (TCP,
	// authentication, the statement) within one attempt, about a fifth of
	// the lease. Dialling is measured here, on this machine at this
	// moment, and the lease is made 40 of the slowest of three dials (at
	// least 3 s): a machine busy enough to slow dialling stretches the
	// lease, and a heartbeat path that does not retry on a new connection
	// still loses the run whatever the lease.
	dialCfg := pool.Config().ConnConfig.Copy()
	var dial time.Duration
	for range 3 {
		start := time.Now()
		conn, err := pgx.ConnectConfig(t.Context(), dialCfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(t.Context(), "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		dial = max(dial, time.Since(start))
		conn.Close(context.Background())
	}
	lease := max(3*time.Second, 40*dial)
	t.Logf("slowest of three dials through the proxy: %v; lease %v", dial, lease)
	var lost, failed atomic.Int32
	c := newClaimer(t, store, runclaim.WithLease(lease), runclaim.WithHooks(runclaim.Hooks{
		LeaseLost:       func(runclaim.Event) { lost.Add(1) },
		HeartbeatFailed: func(runclaim.Event) { failed.Add(1) },
	}))
	err = c.Do(t.Context(), "src", func(ctx context.Context, run *runclaim.Run) error {
		proxy.BlackHoleExisting()
		work := time.NewTimer(3 * lease)
		defer work.Stop()
		select {
		case <-work.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	if err != nil {
		t.Fatalf("Do with one hung connection: %v", err)
	}
	if failed.Load() == 0 {
		t.Fatal("no heartbeat failed: the connection was not black-holed")
	}
	if lost.Load() != 0 {
		t.Error("LeaseLost fired")
	}
}

// Rule: the store refuses a single connection, which a failed claim in the
// explicit BEGIN ... COMMIT form would leave in an aborted transaction.
func TestSingleConnectionRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	conn, err := pgx.Connect(t.Context(), db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := runclaim.NewPostgresStore(conn); err == nil || !strings.Contains(err.Error(), "pool") {
		t.Errorf("NewPostgresStore(*pgx.Conn) = %v, want an error that asks for a pool", err)
	}
	pc, err := db.Pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	if _, err := runclaim.NewPostgresStore(pc); err == nil || !strings.Contains(err.Error(), "pool") {
		t.Errorf("NewPostgresStore(*pgxpool.Conn) = %v, want an error that asks for a pool", err)
	}
}

// Rule: two stores on one table with different namespaces do not surface
// a raw unique violation: the error names the misconfiguration. Store a's
// claim is in flight (its row inserted, not yet committed) when store b,
// whose advisory lock is another, claims the same source.
func TestNamespaceMismatch(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	migratedStore(t, db.Pool, runclaim.WithNamespace("service-a"))
	b := migratedStore(t, db.Pool, runclaim.WithNamespace("service-b"))
	ctx := t.Context()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `INSERT INTO `+b.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at)
VALUES ('shared', 'running', 'a', clock_timestamp(), clock_timestamp() + interval '1 minute', clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.Claim(ctx, runclaim.ClaimRequest{Source: "shared", Owner: "b", Lease: time.Minute})
		done <- err
	}()
	waitUntil(t, 10*time.Second, 2*time.Millisecond, "b's claim to wait on the unique index", func() bool { return lockWaiters(t, db.Pool) > 0 })
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = awaitRecv(t, done, 10*time.Second, "b's claim")
	if err == nil || errors.Is(err, runclaim.ErrNotClaimed) || !strings.Contains(err.Error(), "WithNamespace") || pgCode(err) != "23505" {
		t.Errorf("claim by a store with another namespace = %v, want an error that names WithNamespace and wraps 23505", err)
	}
}

func net2addr(host string, port uint16) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// Rule: a claim never waits for another holder, and waits for a lock on
// the runs table (DDL, VACUUM FULL, LOCK TABLE) at most about a second: it
// then fails with a wrapped 55P03 and writes nothing, whatever the
// session's lock_timeout (none here). Every claim sets the bound before
// anything of it touches the table, on a connection that has never
// claimed too: on the current schema version and the one before it, by a
// store that has claimed before and by a new store's first claim, which
// does not know its table's version yet (runclaim exec's one claim is
// one).
func TestClaimTableLockBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		version int  // the table's schema version
		pin     bool // pin the store to the form of version; else a new store
	}{
		{"current", runclaim.LatestSchemaVersion, true},
		{"previous", runclaim.OldestClaimVersion, true},
		{"new_store_current", runclaim.LatestSchemaVersion, false},
		{"new_store_previous", runclaim.OldestClaimVersion, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			migrateTo(t, db.Pool, tc.version)
			pool := db.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			var store *runclaim.PostgresStore
			if tc.pin {
				store = formStore(t, pool, claimForm{tc.name, tc.version})
				warm, err := newClaimer(t, store).Claim(t.Context(), "warm")
				if err != nil {
					t.Fatal(err)
				}
				if err := warm.Finish(t.Context(), nil); err != nil {
					t.Fatal(err)
				}
				pool.Reset() // the claim below runs on a new connection
			} else {
				var err error
				if store, err = runclaim.NewPostgresStore(pool); err != nil {
					t.Fatal(err)
				}
			}
			c := newClaimer(t, store)
			before := readState(t, db.Pool, store.Table())
			unlock := lockTable(t, db.Pool, store.Table())
			defer unlock()
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				_, err := c.Claim(ctx, "src")
				done <- err
			}()
			// The table stays locked until the claim returns: a claim that
			// waited for the lock would not return within 30 s (slack for a
			// loaded machine; the bound is a second).
			err := awaitRecv(t, done, 30*time.Second, "the claim to give up on the table lock")
			checkRealError(t, err, "runclaim: claim")
			if pgCode(err) != "55P03" {
				t.Errorf("claim on a locked table = %v, want a wrapped 55P03", err)
			}
			unlock()
			if after := readState(t, db.Pool, store.Table()); after != before {
				t.Errorf("the claim changed the table from %+v to %+v", before, after)
			}
			if _, err := c.Claim(t.Context(), "src"); err != nil {
				t.Errorf("claim once the table is free: %v", err)
			}
		})
	}
}

// Rule: on Postgres, a run that an operator releases while fn winds down
// after a shutdown closes Run.Lost, although the shutdown cancelled fn's
// context first, and another replica can then claim the source. The lease
// is 3 s, so the heartbeat after the release comes within a second;
// doWait only bounds a wait that a working Lost ends then.
func TestPostgresLostAfterShutdown(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	const lease = 3 * time.Second
	c := newClaimer(t, store, runclaim.WithLease(lease), runclaim.WithOwner("old-replica"))
	other := newClaimer(t, store, runclaim.WithLease(lease), runclaim.WithOwner("new-replica"))
	ctx, sigterm := context.WithCancel(t.Context())
	defer sigterm()
	var sawLost bool
	err := c.Do(ctx, "released", func(ctx context.Context, run *runclaim.Run) error {
		sigterm()
		<-ctx.Done()
		if _, err := store.Release(t.Context(), run.ID, ""); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		timeout := time.NewTimer(doWait)
		defer timeout.Stop()
		select { // winding down
		case <-run.Lost():
			sawLost = true
		case <-timeout.C:
		}
		return ctx.Err()
	})
	if !sawLost {
		t.Fatal("fn never saw run.Lost() close after its run was released")
	}
	if !errors.Is(err, runclaim.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
		t.Errorf("Do = %v, want the shutdown and ErrLeaseLost", err)
	}
	next, err := other.Claim(t.Context(), "released")
	if err != nil {
		t.Fatalf("claim after the release: %v", err)
	}
	if err := next.Finish(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
}

// Rule: a heartbeat never moves a lease's end back. Heartbeats of one run
// can cross in flight (one whose caller gave up on it, and the next): the
// first reads the database clock, then waits for the row lock, while a
// later one writes a later end. This test makes that happen in order: a
// transaction holds the run's row, a heartbeat reads the clock and waits
// for it, and the transaction then writes what a later heartbeat of the
// same lease writes. The waiting heartbeat must leave the later end in
// place, and report it. Without GREATEST in the heartbeat statements it
// wrote its own, earlier end. Both Heartbeat and HeartbeatMany.
func TestPostgresHeartbeatsCrossInFlight(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	table := store.Table()
	ctx := t.Context()
	const lease = time.Minute
	beats := []struct {
		name string
		beat func(runclaim.RunInfo) (time.Time, error)
	}{
		{"Heartbeat", func(r runclaim.RunInfo) (time.Time, error) {
			return store.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: lease})
		}},
		{"HeartbeatMany", func(r runclaim.RunInfo) (time.Time, error) {
			res, err := store.HeartbeatMany(ctx, []runclaim.HeartbeatRequest{{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: lease}})
			if err != nil {
				return time.Time{}, err
			}
			return res[0].LeaseUntil, res[0].Err
		}},
	}
	for _, b := range beats {
		run, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "crossing-" + b.name, Owner: "a", Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctx, "SELECT 1 FROM "+table+" WHERE id = $1 FOR UPDATE", run.ID); err != nil {
			t.Fatal(err)
		}
		type result struct {
			until time.Time
			err   error
		}
		first := make(chan result, 1)
		go func() {
			until, err := b.beat(run)
			first <- result{until, err}
		}()
		// The heartbeat has read the clock once it waits for the row lock.
		waitUntil(t, 30*time.Second, 5*time.Millisecond, b.name+" waiting for the run's row lock", func() bool {
			var n int
			err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
WHERE datname = pg_catalog.current_database() AND wait_event_type = 'Lock' AND query LIKE '%lease_until%'`).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		})
		// What the later heartbeat writes: the same lease from its own,
		// later, clock reading.
		var later, laterBeat time.Time
		if err := tx.QueryRow(ctx, `UPDATE `+table+` SET lease_until = c.now + $2::bigint * interval '1 microsecond', heartbeat_at = c.now
FROM (SELECT pg_catalog.clock_timestamp() AS now) AS c WHERE id = $1 RETURNING lease_until, heartbeat_at`,
			run.ID, lease.Microseconds()).Scan(&later, &laterBeat); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-first
		if r.err != nil {
			t.Fatalf("%s: the heartbeat that waited: %v", b.name, r.err)
		}
		var stored, storedBeat time.Time
		if err := db.Pool.QueryRow(ctx, "SELECT lease_until, heartbeat_at FROM "+table+" WHERE id = $1", run.ID).Scan(&stored, &storedBeat); err != nil {
			t.Fatal(err)
		}
		if !stored.Equal(later) || !r.until.Equal(later) {
			t.Errorf("%s: the heartbeat that waited returned lease end %v and left %v; want the later heartbeat's %v kept (moved back by %v)",
				b.name, r.until, stored, later, later.Sub(stored))
		}
		if !storedBeat.Equal(laterBeat) {
			t.Errorf("%s: heartbeat_at is %v after the heartbeat that waited, want the later heartbeat's %v", b.name, storedBeat, laterBeat)
		}
		if err := store.Finish(ctx, runclaim.FinishRequest{ID: run.ID, Source: run.Source, StartedAt: run.StartedAt, Status: runclaim.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
}

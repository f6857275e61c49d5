package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// This file tests the versioned schema: SchemaVersion, Migrate's steps and
// their bounds, the exported Migrations, an upgrade from a table of the
// first release, and that release's replicas running beside this one's on
// an upgraded table (v1fixture_test.go holds their SQL).

// createV1Table creates the default runs table as the first release did.
func createV1Table(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	table := pgx.Identifier{runclaim.DefaultSchema, runclaim.DefaultTable}.Sanitize()
	running := pgx.Identifier{runclaim.DefaultTable + "_running"}.Sanitize()
	history := pgx.Identifier{runclaim.DefaultTable + "_history"}.Sanitize()
	if _, err := pool.Exec(t.Context(), fmt.Sprintf(v1TableSQL, table, running, table, history, table)); err != nil {
		t.Fatalf("create the version 1 table: %v", err)
	}
	return table
}

// v1Store is a replica of the first release: a Store that sends that
// release's SQL, verbatim, in the implicit READ COMMITTED form of its
// batch (the tests' sessions default to READ COMMITTED).
type v1Store struct {
	pool      *pgxpool.Pool
	namespace string
	claim     string
	expire    string
	heartbeat string
	finish    string
}

var _ runclaim.Store = (*v1Store)(nil)

func newV1Store(pool *pgxpool.Pool, table string) *v1Store {
	return &v1Store{
		pool: pool, namespace: runclaim.DefaultNamespace,
		claim:     fmt.Sprintf(v1ClaimSQL, table),
		expire:    fmt.Sprintf(v1ExpireSQL, table),
		heartbeat: fmt.Sprintf(v1HeartbeatSQL, table),
		finish:    fmt.Sprintf(v1FinishSQL, table),
	}
}

func (s *v1Store) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	b := &pgx.Batch{}
	b.Queue(v1LockSQL, runclaim.AdvisoryKeyOf(s.namespace, req.Source))
	b.Queue(s.expire, req.Source)
	b.Queue(s.claim, req.Source, req.Owner, req.Lease.Microseconds(), req.MinInterval.Microseconds())
	br := s.pool.SendBatch(ctx, b)
	var (
		locked                         bool
		isolation                      string
		insID, curID                   pgtype.Int8
		insStarted, insLease           pgtype.Timestamptz
		curOwner                       pgtype.Text
		curStarted, curLease, retryAft pgtype.Timestamptz
	)
	err := br.QueryRow().Scan(&locked, &isolation)
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&insID, &insStarted, &insLease, &curID, &curOwner, &curStarted, &curLease, &retryAft)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return runclaim.RunInfo{}, fmt.Errorf("v1 claim: %w", err)
	}
	if isolation != "read committed" {
		return runclaim.RunInfo{}, fmt.Errorf("v1 claim: isolation %q", isolation)
	}
	if insID.Valid {
		return runclaim.RunInfo{ID: insID.Int64, Source: req.Source, Owner: req.Owner, StartedAt: insStarted.Time, LeaseUntil: insLease.Time}, nil
	}
	nc := &runclaim.NotClaimedError{Source: req.Source, Reason: runclaim.ErrAlreadyRunning}
	switch {
	case curID.Valid:
		nc.Holder = &runclaim.RunInfo{ID: curID.Int64, Source: req.Source, Owner: curOwner.String, StartedAt: curStarted.Time, LeaseUntil: curLease.Time}
	case locked && retryAft.Valid:
		nc.Reason = runclaim.ErrTooSoon
	}
	return runclaim.RunInfo{}, nc
}

func (s *v1Store) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	var until time.Time
	err := s.pool.QueryRow(ctx, s.heartbeat, req.ID, req.Lease.Microseconds()).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, runclaim.ErrLeaseLost
	}
	return until, err
}

func (s *v1Store) Finish(ctx context.Context, req runclaim.FinishRequest) error {
	var errText *string
	if req.Status == runclaim.StatusFailed {
		errText = &req.Error
	}
	var updated int64
	var oldStatus, oldError *string
	if err := s.pool.QueryRow(ctx, s.finish, req.ID, string(req.Status), errText).Scan(&updated, &oldStatus, &oldError); err != nil {
		return err
	}
	if updated == 1 || oldStatus != nil && *oldStatus == string(req.Status) {
		return nil
	}
	return runclaim.ErrLeaseLost
}

// mixedStore sends its claims through its stores in turn, and each run's
// heartbeats and finish through the store that claimed it: replicas of
// several releases, or in several forms, on one table.
type mixedStore struct {
	stores []runclaim.Store
	wins   []atomic.Int64 // by store
	n      atomic.Int64
	mu     sync.Mutex
	byRun  map[int64]runclaim.Store
}

func newMixedStore(stores ...runclaim.Store) *mixedStore {
	return &mixedStore{stores: stores, wins: make([]atomic.Int64, len(stores)), byRun: map[int64]runclaim.Store{}}
}

func (m *mixedStore) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	i := int(m.n.Add(1) % int64(len(m.stores)))
	s := m.stores[i]
	info, err := s.Claim(ctx, req)
	if err == nil {
		m.wins[i].Add(1)
		m.mu.Lock()
		m.byRun[info.ID] = s
		m.mu.Unlock()
	}
	return info, err
}

func (m *mixedStore) store(id int64) runclaim.Store {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byRun[id]
}

func (m *mixedStore) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	return m.store(req.ID).Heartbeat(ctx, req)
}

func (m *mixedStore) Finish(ctx context.Context, req runclaim.FinishRequest) error {
	return m.store(req.ID).Finish(ctx, req)
}

func TestSchemaVersion(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	check := func(wantHave int) {
		t.Helper()
		have, want, err := store.SchemaVersion(ctx)
		if err != nil || have != wantHave || want != runclaim.LatestSchemaVersion {
			t.Errorf("SchemaVersion = %d, %d, %v; want %d, %d", have, want, err, wantHave, runclaim.LatestSchemaVersion)
		}
	}
	check(0)
	table := createV1Table(t, db.Pool)
	check(1) // a table of the first release, unchanged
	// SchemaVersion reads only the catalogs: an exclusive lock on the
	// table does not hold it up.
	unlock := lockTable(t, db.Pool, table)
	done := make(chan struct{})
	go func() { defer close(done); check(1) }()
	awaitRecv(t, done, 30*time.Second, "SchemaVersion while the table is locked")
	unlock()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	check(runclaim.LatestSchemaVersion)

	// A newer release's table: this release leaves it alone.
	if _, err := db.Pool.Exec(ctx, "COMMENT ON TABLE "+table+" IS 'runclaim schema version 99'"); err != nil {
		t.Fatal(err)
	}
	check(99)
	if err := store.Migrate(ctx); err != nil {
		t.Errorf("Migrate on a newer schema: %v", err)
	}
	check(99)
}

// The exported steps apply in order, with a migration tool's plain Exec,
// reach the schema Migrate creates, and undo in reverse order; every Up is
// idempotent.
func TestMigrationsSQL(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]runclaim.PostgresOption{nil, {runclaim.WithTable("Tool's schema", "runs")}} {
		db := pgtest.New(t)
		ctx := t.Context()
		store, err := runclaim.NewPostgresStore(db.Pool, opts...)
		if err != nil {
			t.Fatal(err)
		}
		steps := store.Migrations()
		if len(steps) != runclaim.LatestSchemaVersion {
			t.Fatalf("%d steps, want %d", len(steps), runclaim.LatestSchemaVersion)
		}
		for i, m := range steps {
			if m.Version != i+1 || m.Name == "" || m.Up == "" || m.Down == "" {
				t.Fatalf("step %d: %+v", i, m)
			}
			for range 2 {
				if _, err := db.Pool.Exec(ctx, m.Up); err != nil {
					t.Fatalf("apply step %d: %v", m.Version, err)
				}
			}
			if have, _, err := store.SchemaVersion(ctx); err != nil || have != m.Version {
				t.Fatalf("after step %d: SchemaVersion %d, %v", m.Version, have, err)
			}
		}
		// The store works on a table its users' tool migrated.
		c := newClaimer(t, store, runclaim.WithMinInterval(time.Hour))
		if err := c.Do(ctx, "tool", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
			t.Fatalf("Do on a table the steps built: %v", err)
		}
		for i := len(steps) - 1; i >= 0; i-- {
			if _, err := db.Pool.Exec(ctx, steps[i].Down); err != nil {
				t.Fatalf("undo step %d: %v", steps[i].Version, err)
			}
			if have, _, err := store.SchemaVersion(ctx); err != nil || have != steps[i].Version-1 {
				t.Fatalf("after undoing step %d: SchemaVersion %d, %v", steps[i].Version, have, err)
			}
		}
		if _, err := db.Pool.Exec(ctx, store.SchemaSQL()); err != nil {
			t.Fatalf("SchemaSQL: %v", err)
		}
		if have, _, err := store.SchemaVersion(ctx); err != nil || have != runclaim.LatestSchemaVersion {
			t.Fatalf("after SchemaSQL: SchemaVersion %d, %v", have, err)
		}
	}
}

// An upgrade from a table of the first release that holds running and
// finished runs: the running run keeps its source and its holder can go
// on, the history is intact, and claims work at once.
func TestUpgradeFromV1(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	table := createV1Table(t, db.Pool)
	old := newV1Store(db.Pool, table)
	for i := range 5 {
		info, err := old.Claim(ctx, runclaim.ClaimRequest{Source: "done", Owner: "v1", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		status := runclaim.StatusSucceeded
		text := ""
		if i%2 == 1 {
			status, text = runclaim.StatusFailed, fmt.Sprintf("failure %d", i)
		}
		if err := old.Finish(ctx, runclaim.FinishRequest{ID: info.ID, Source: info.Source, StartedAt: info.StartedAt, Status: status, Error: text}); err != nil {
			t.Fatal(err)
		}
	}
	held, err := old.Claim(ctx, runclaim.ClaimRequest{Source: "held", Owner: "v1", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	before, err := store.History(ctx, "done", 10)
	if err != nil {
		t.Fatal(err)
	}

	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from version 1: %v", err)
	}
	after, err := store.History(ctx, "done", 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" || len(after) != 5 {
		t.Errorf("history changed by the upgrade (-before +after):\n%s", diff)
	}
	// The running run keeps its source, for old and new claimers alike.
	_, err = store.Claim(ctx, runclaim.ClaimRequest{Source: "held", Owner: "v2", Lease: time.Minute})
	var nc *runclaim.NotClaimedError
	if !errors.As(err, &nc) || nc.Holder == nil || nc.Holder.ID != held.ID {
		t.Errorf("new claim of the held source: %v, want a skip naming run %d", err, held.ID)
	}
	// Its holder, still on the old release, goes on and finishes it; so
	// does this release's code for a run it holds.
	if _, err := old.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: held.ID, Source: held.Source, StartedAt: held.StartedAt, Lease: time.Minute}); err != nil {
		t.Errorf("the old holder's heartbeat after the upgrade: %v", err)
	}
	if _, err := store.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: held.ID, Source: held.Source, StartedAt: held.StartedAt, Lease: time.Minute}); err != nil {
		t.Errorf("a heartbeat of the old run by this release: %v", err)
	}
	if err := old.Finish(ctx, runclaim.FinishRequest{ID: held.ID, Source: held.Source, StartedAt: held.StartedAt, Status: runclaim.StatusSucceeded}); err != nil {
		t.Errorf("the old holder's finish after the upgrade: %v", err)
	}
	// Claims work at once.
	c := newClaimer(t, store)
	for _, src := range []string{"held", "done", "new"} {
		if err := c.Do(ctx, src, func(context.Context, *runclaim.Run) error { return nil }); err != nil {
			t.Errorf("Do(%q) right after the upgrade: %v", src, err)
		}
	}
	// Runs of the first release recorded no interval: 0.
	var zero int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE owner = 'v1' AND min_interval = '0'`).Scan(&zero); err != nil || zero != 6 {
		t.Errorf("%d runs of the first release with a zero interval (%v), want 6", zero, err)
	}
}

// Replicas of the first release and of this one claim the same sources on
// one upgraded table, under contention: no double runs, no errors. The
// first release's replicas send their batch; this release's, two stores,
// call the claim function.
func TestRollingUpgrade(t *testing.T) {
	db := pgtest.New(t)
	pool := contentionPool(t, db, "")
	table := createV1Table(t, pool)
	migratedStore(t, pool)
	mixed := newMixedStore(newV1Store(pool, table), formStore(t, pool, claimForms[0]), formStore(t, pool, claimForms[0]))
	sources := []string{"a", "b"}
	res := contend(t, mixed, sources, 16)
	checkContention(t, db.Pool, table, sources, res)
	t.Logf("wins: %d by first-release replicas, %d and %d by this release's", mixed.wins[0].Load(), mixed.wins[1].Load(), mixed.wins[2].Load())
	for i, what := range []string{"the first release", "this release's first store", "its second"} {
		if n := mixed.wins[i].Load(); n < 10 {
			t.Errorf("%s barely won: %d", what, n)
		}
	}
}

// Rule (G5, schema version 2): the interval a run's claimer asked for is
// recorded with the run and binds every later claimer, configured with an
// interval or not, old release or new.
func TestMinIntervalBindsEveryClaimer(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	table := createV1Table(t, db.Pool)
	store := migratedStore(t, db.Pool)
	const interval = 2 * time.Second
	run, err := newClaimer(t, store, runclaim.WithMinInterval(interval)).Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	bare := newClaimer(t, store, runclaim.WithOwner("ad-hoc"))
	_, err = bare.Claim(ctx, "src")
	var nc *runclaim.NotClaimedError
	if !errors.Is(err, runclaim.ErrTooSoon) || !errors.As(err, &nc) || !nc.RetryAfter.Equal(run.StartedAt.Add(interval)) {
		t.Fatalf("claim without an interval right after a run that asked for %v: %v, want ErrTooSoon until %v", interval, err, run.StartedAt.Add(interval))
	}
	// A shorter interval of the claimer does not shorten the recorded one;
	// a longer one lengthens it.
	_, err = newClaimer(t, store, runclaim.WithMinInterval(time.Millisecond)).Claim(ctx, "src")
	if !errors.As(err, &nc) || !nc.RetryAfter.Equal(run.StartedAt.Add(interval)) {
		t.Errorf("claim with a shorter interval: %v", err)
	}
	_, err = newClaimer(t, store, runclaim.WithMinInterval(time.Hour)).Claim(ctx, "src")
	if !errors.As(err, &nc) || !nc.RetryAfter.Equal(run.StartedAt.Add(time.Hour)) {
		t.Errorf("claim with a longer interval: %v", err)
	}
	// Once it has passed, the claimer without an interval wins.
	var won *runclaim.Run
	waitUntil(t, 10*interval, 20*time.Millisecond, "the recorded interval to pass", func() bool {
		won, err = bare.Claim(ctx, "src")
		return err == nil
	})
	if won.StartedAt.Before(run.StartedAt.Add(interval)) {
		t.Errorf("run %d started %v after run %d, less than its recorded %v", won.ID, won.StartedAt.Sub(run.StartedAt), run.ID, interval)
	}
	if err := won.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// A replica of the first release records no interval, and honours only
	// its own: the new release's interval binds it only after an upgrade of
	// its code. (What it records binds the new release: nothing.)
	old := newV1Store(db.Pool, table)
	info, err := old.Claim(ctx, runclaim.ClaimRequest{Source: "old", Owner: "v1", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Finish(ctx, runclaim.FinishRequest{ID: info.ID, Source: info.Source, StartedAt: info.StartedAt, Status: runclaim.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Claim(ctx, "old"); err != nil {
		t.Errorf("claim after a first-release run: %v", err)
	}
}

// Rule (G9): DDL that Migrate must run is bounded by a lock_timeout: when
// the table is locked (here by what autovacuum or ANALYZE holds), the step
// fails with a clear error instead of queueing for as long as the lock is
// held, and the claims that queue behind each attempt go through.
func TestMigrateDDLIsBounded(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	createV1Table(t, db.Pool)
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	old := newV1Store(db.Pool, store.Table())
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "LOCK TABLE "+store.Table()+" IN SHARE UPDATE EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	go func() { migrated <- store.Migrate(ctx) }()
	claims := 0
	var merr error
	for merr == nil {
		select {
		case merr = <-migrated:
			if merr == nil {
				t.Fatal("Migrate applied a step while the table was locked")
			}
			continue
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		info, err := old.Claim(cctx, runclaim.ClaimRequest{Source: "src", Owner: "v1", Lease: time.Minute})
		cancel()
		if err != nil {
			t.Fatalf("claim %d while Migrate tried its step: %v", claims, err)
		}
		if err := old.Finish(ctx, runclaim.FinishRequest{ID: info.ID, Source: info.Source, StartedAt: info.StartedAt, Status: runclaim.StatusSucceeded}); err != nil {
			t.Fatal(err)
		}
		claims++
	}
	if !strings.Contains(merr.Error(), "locked") || pgCode(merr) != "55P03" {
		t.Fatalf("Migrate on a locked table = %v, want a wrapped lock_timeout error (55P03) that says so", merr)
	}
	t.Logf("%d claims went through while Migrate tried; it returned: %v", claims, merr)
	if have, _, err := store.SchemaVersion(ctx); err != nil || have != 1 {
		t.Errorf("after the failed step: SchemaVersion %d, %v; want 1, unchanged", have, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate once the lock is gone: %v", err)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim"
)

// A guard decides whether this replica sweeps a source on this tick,
// scheduled at tick. try calls fn and returns true if it did, false if
// another replica has the tick; the error is fn's or the guard's own.
type guard interface {
	try(ctx context.Context, source string, tick time.Time, fn func(context.Context) error) (bool, error)
}

// naiveTable is where the naive guard records sweeps in Postgres.
const naiveTable = "runclaim_example_redeploy_naive"

// runclaim's table and advisory lock namespace for the examples: their
// own, so that an example pointed at a production database never competes
// with a real service's jobs.
const (
	exampleTable     = "runclaim_example_runs"
	exampleNamespace = "runclaim-example"
)

// newStore returns runclaim's store on the examples' table.
func newStore(pool *pgxpool.Pool) (*runclaim.PostgresStore, error) {
	return runclaim.NewPostgresStore(pool,
		runclaim.WithTable(runclaim.DefaultSchema, exampleTable),
		runclaim.WithNamespace(exampleNamespace))
}

// memoryState is the state that the replicas of one process share.
type memoryState struct {
	store *runclaim.MemoryStore
	naive *naiveMemory
}

func newMemoryState() *memoryState {
	return &memoryState{store: runclaim.NewMemoryStore(), naive: &naiveMemory{running: make(map[string]bool)}}
}

// guard returns a replica's guard of the named kind.
func (m *memoryState) guard(name, replica string) (guard, error) {
	switch name {
	case "naive":
		return m.naive, nil
	case "runclaim":
		return newClaimGuard(m.store, replica, "")
	}
	return nil, fmt.Errorf("unknown guard %q", name)
}

// naiveMemory is check-then-act on a map. Each step is under the mutex, so
// there is no data race, only the logical one: both replicas can check
// before either acts.
type naiveMemory struct {
	mu      sync.Mutex // protects running
	running map[string]bool
}

func (g *naiveMemory) try(ctx context.Context, source string, _ time.Time, fn func(context.Context) error) (bool, error) {
	g.mu.Lock()
	busy := g.running[source] // check
	g.mu.Unlock()
	if busy {
		return false, nil
	}
	time.Sleep(gap)
	g.mu.Lock()
	g.running[source] = true // act
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running[source] = false
		g.mu.Unlock()
	}()
	return true, fn(ctx)
}

// naivePostgres is check-then-act in Postgres: SELECT whether a sweep is
// running, then INSERT one. Each statement is atomic; the pair is not.
type naivePostgres struct {
	pool *pgxpool.Pool
	tag  string
}

func (g *naivePostgres) try(ctx context.Context, source string, _ time.Time, fn func(context.Context) error) (bool, error) {
	source = g.tag + "/" + source
	var busy bool
	err := g.pool.QueryRow(ctx,
		`SELECT EXISTS (SELECT FROM `+naiveTable+` WHERE source = $1 AND status = 'running')`, source).Scan(&busy)
	if err != nil || busy {
		return false, err
	}
	time.Sleep(gap)
	var id int64
	err = g.pool.QueryRow(ctx,
		`INSERT INTO `+naiveTable+` (source, status) VALUES ($1, 'running') RETURNING id`, source).Scan(&id)
	if err != nil {
		return false, err
	}
	fnErr := fn(ctx)
	_, err = g.pool.Exec(context.WithoutCancel(ctx), `UPDATE `+naiveTable+` SET status = 'done' WHERE id = $1`, id)
	return true, errors.Join(fnErr, err)
}

// claimGuard is runclaim: Claimer.Do sweeps only if the claim of the
// tick wins. ForTick names the scheduled tick, so a replica whose claim
// comes late, after the other's sweep of the tick has finished, is skipped
// (ErrTickDone) however late it is.
type claimGuard struct {
	claimer *runclaim.Claimer
	tag     string
}

func newClaimGuard(store runclaim.Store, replica, tag string) (*claimGuard, error) {
	claimer, err := runclaim.New(store,
		runclaim.WithOwner(replica),
		runclaim.WithLease(5*time.Second),
	)
	if err != nil {
		return nil, err
	}
	return &claimGuard{claimer: claimer, tag: tag}, nil
}

func (g *claimGuard) try(ctx context.Context, source string, tick time.Time, fn func(context.Context) error) (bool, error) {
	if g.tag != "" {
		source = g.tag + "/" + source
	}
	ran := false
	err := g.claimer.Do(ctx, source, func(ctx context.Context, _ *runclaim.Run) error {
		ran = true
		return fn(ctx)
	}, runclaim.ForTick(tick))
	if errors.Is(err, runclaim.ErrNotClaimed) {
		return false, nil
	}
	return ran, err
}

// postgresGuard opens a replica process's guard on the database at url.
func postgresGuard(ctx context.Context, url, name, replica, tag string) (guard, func(), error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	if err := warmUp(ctx, pool, len(sources)); err != nil {
		pool.Close()
		return nil, nil, err
	}
	switch name {
	case "naive":
		return &naivePostgres{pool: pool, tag: tag}, pool.Close, nil
	case "runclaim":
		store, err := newStore(pool)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		g, err := newClaimGuard(store, replica, "redeploy-"+tag)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return g, pool.Close, nil
	}
	pool.Close()
	return nil, nil, fmt.Errorf("unknown guard %q", name)
}

// warmUp opens n connections before the first tick, as a service that has
// been up for a while would have them. Otherwise the new replica's first
// claims wait for connections to be set up, tens of milliseconds, and the
// naive guard's race would show less. runclaim's claims name their tick,
// so a late claim is skipped whatever the delay.
func warmUp(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// setupPostgres creates runclaim's table for the examples and the naive
// guard's.
func setupPostgres(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := newStore(pool)
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+naiveTable+` (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	source text NOT NULL,
	status text NOT NULL
)`)
	return err
}

// teardownPostgres drops the naive guard's table. runclaim's runs stay, as
// history.
func teardownPostgres(url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	_, _ = conn.Exec(ctx, `DROP TABLE IF EXISTS `+naiveTable)
}

// Package sharedtest holds the test set-up that more than one package's
// tests need: a store over a migrated table, a Claimer that fails the test
// on a bad option, a connection that counts what a pool sends, and the
// scale factor of the tests that wait on real time. It is imported only by
// tests.
package sharedtest

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// migrateTimeout bounds Migrate in MigratedStore.
const migrateTimeout = time.Minute

// MigratedStore returns a store on pool whose table has been migrated, or
// fails the test.
func MigratedStore(t testing.TB, pool runclaim.Querier, opts ...runclaim.PostgresOption) *runclaim.PostgresStore {
	t.Helper()
	s := Store(t, pool, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

// migrated is a database whose default table is migrated, made once per
// test binary: copying it costs about a third of what migrating a table
// costs the server, and the suites migrate a thousand tables.
var migrated = pgtest.NewTemplate("migrated", func(ctx context.Context, dsn string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		return err
	}
	return s.Migrate(ctx)
})

// MigratedDB returns a database of its own (see pgtest.New) whose
// default table is migrated to the current schema: a copy of a database
// migrated once per test binary.
func MigratedDB(t testing.TB) *pgtest.DB {
	t.Helper()
	return migrated.New(t)
}

// Store returns a store on pool, whose table is migrated already (see
// MigratedDB), or fails the test.
func Store(t testing.TB, pool runclaim.Querier, opts ...runclaim.PostgresOption) *runclaim.PostgresStore {
	t.Helper()
	s, err := runclaim.NewPostgresStore(pool, opts...)
	if err != nil {
		t.Fatalf("NewPostgresStore: %v", err)
	}
	return s
}

// OpenPostgres returns a migrated store on a database of its own (see
// MigratedDB), or fails the test.
func OpenPostgres(t testing.TB) *runclaim.PostgresStore {
	t.Helper()
	return Store(t, MigratedDB(t).Pool)
}

// NewClaimer returns a Claimer on store, or fails the test.
func NewClaimer(t testing.TB, store runclaim.Store, opts ...runclaim.Option) *runclaim.Claimer {
	t.Helper()
	c, err := runclaim.New(store, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// A Wire counts what the connections it dials send and receive. Install
// it with cfg.ConnConfig.DialFunc = w.Dial. A turn is a write that follows
// a read (or is the first write on its connection): one request/response
// round trip.
type Wire struct {
	Writes   atomic.Int64 // calls of Write
	Turns    atomic.Int64 // round trips
	Sent     atomic.Int64 // bytes written
	Received atomic.Int64 // bytes read
}

// Dial dials addr and counts the connection's traffic in w.
func (w *Wire) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, w: w}, nil
}

// Counts returns the writes and the round trips so far.
func (w *Wire) Counts() (writes, turns int64) { return w.Writes.Load(), w.Turns.Load() }

// countingConn counts its traffic in w.
type countingConn struct {
	net.Conn
	w *Wire

	mu      sync.Mutex // protects writing
	writing bool       // the last I/O was a write
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.writing {
		c.writing = true
		c.w.Turns.Add(1)
	}
	c.mu.Unlock()
	c.w.Writes.Add(1)
	n, err := c.Conn.Write(p)
	c.w.Sent.Add(int64(n))
	return n, err
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.writing = false
		c.mu.Unlock()
		c.w.Received.Add(int64(n))
	}
	return n, err
}

// EnvTimeScale names the environment variable that multiplies the bounds
// of the tests' waits for something that should happen (through Scale),
// for a slow machine: never a lease, never what a test asserts. It is a
// positive number; the default, 1, holds on a two-core machine with every
// core busy (see .ci/load-test).
const EnvTimeScale = "RUNCLAIM_TEST_TIME_SCALE"

// Scale returns d multiplied by the time scale ($RUNCLAIM_TEST_TIME_SCALE,
// default 1). An unusable value fails the test.
func Scale(t testing.TB, d time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(EnvTimeScale)
	if s == "" {
		return d
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 0) || f > 1000 {
		t.Fatalf("%s=%q: want a positive number up to 1000", EnvTimeScale, s)
	}
	return time.Duration(float64(d) * f)
}

// A StoreCase names a kind of Store and opens a fresh one for a test.
type StoreCase struct {
	Name string
	Open func(t testing.TB) runclaim.Store
}

// Stores returns the memory store and a migrated Postgres store on a
// database of its own: the stores a test of an adapter runs over.
func Stores() []StoreCase {
	return []StoreCase{
		{"memory", func(testing.TB) runclaim.Store { return runclaim.NewMemoryStore() }},
		{"postgres", func(t testing.TB) runclaim.Store { return OpenPostgres(t) }},
	}
}

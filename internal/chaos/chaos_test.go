package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
	"github.com/runclaim/runclaim/internal/tcpproxy"
)

// The tests in this package never call t.Parallel: the restart test stops
// the server every other test uses, and the timing margins below assume
// that a test has the machine to itself among this binary's tests.

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// wait bounds every wait for something that should happen promptly. It is
// generous on purpose: a failure to happen at all is what it catches.
const wait = 20 * time.Second

// newStore returns a store on pool, whose table is migrated already.
var newStore = sharedtest.Store

var newClaimer = sharedtest.NewClaimer

// dbNow reads the database's clock.
func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatalf("read the database clock: %v", err)
	}
	return now
}

// row is one row of the runs table.
type row struct {
	ID          int64
	Source      string
	Owner       string
	Status      string
	StartedAt   time.Time
	LeaseUntil  time.Time
	HeartbeatAt time.Time
	FinishedAt  *time.Time
	Error       *string
}

func (r row) String() string {
	fin := "-"
	if r.FinishedAt != nil {
		fin = r.FinishedAt.Format("15:04:05.000000")
	}
	return fmt.Sprintf("run %d %s %s by %s [%s, lease %s, finished %s]", r.ID, r.Source, r.Status, r.Owner,
		r.StartedAt.Format("15:04:05.000000"), r.LeaseUntil.Format("15:04:05.000000"), fin)
}

// rows returns the runs of source (of every source if source is empty),
// ordered by ID.
func rows(t *testing.T, pool *pgxpool.Pool, source string) []row {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	rs, err := pool.Query(ctx, `SELECT id, source, owner, status, started_at, lease_until, heartbeat_at, finished_at, error
FROM runclaim_runs WHERE $1 = '' OR source = $1 ORDER BY id`, source)
	if err != nil {
		t.Fatalf("read runs: %v", err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.ID, &x.Source, &x.Owner, &x.Status, &x.StartedAt, &x.LeaseUntil, &x.HeartbeatAt, &x.FinishedAt, &x.Error)
		return x, err
	})
	if err != nil {
		t.Fatalf("read runs: %v", err)
	}
	return out
}

// rowByID returns the run with id, failing the test if there is none.
func rowByID(t *testing.T, pool *pgxpool.Pool, id int64) row {
	t.Helper()
	for _, r := range rows(t, pool, "") {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no run %d in the table", id)
	return row{}
}

// eventually polls cond every tick until it returns true, failing the test
// after timeout. It is for state only the server knows (its backends and
// locks), which no channel can announce.
func eventually(t *testing.T, timeout, tick time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	timeout = sharedtest.Scale(t, timeout) // a bound, not an assertion
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		select {
		case <-deadline.C:
			t.Fatalf("%s: not within %v (last error: %v)", what, timeout, lastErr)
		case <-ticker.C:
		}
	}
}

// targetOf returns host:port of a DSN.
func targetOf(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// partitionSetup returns the pool of a migrated database of its own
// (replica B's path, and the test's), a proxy to it, and a pool through the
// proxy (replica A's path).
func partitionSetup(t *testing.T) (direct *pgxpool.Pool, px *tcpproxy.Proxy, proxied *pgxpool.Pool) {
	t.Helper()
	db := sharedtest.MigratedDB(t)
	px = startProxy(t, db)
	return db.Pool, px, proxiedPool(t, db, px, nil)
}

// startProxy starts a proxy to the database's server, closed when the
// test ends.
func startProxy(t *testing.T, db *pgtest.DB) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.Start(targetOf(t, db.DSN))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// proxiedPool opens a pool to db whose connections go through p.
// ConnectTimeout bounds connection attempts that a black hole would
// otherwise leave hanging; queries are bounded by their contexts, which pgx
// enforces by setting a deadline on the connection.
//
// When the test ends the proxy cuts every connection before the pool is
// closed (cleanups run last-in first-out): Close waits for connections in
// use, and a failed test may leave one hanging in a black hole.
func proxiedPool(t *testing.T, db *pgtest.DB, p *tcpproxy.Proxy, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	pool := db.NewPool(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Host = p.Addr().IP.String()
		cfg.ConnConfig.Port = uint16(p.Addr().Port)
		cfg.ConnConfig.Fallbacks = nil
		cfg.ConnConfig.ConnectTimeout = 2 * time.Second
		if configure != nil {
			configure(cfg)
		}
	})
	t.Cleanup(p.Cut)
	return pool
}

// isConnectionError reports whether err carries, wrapped, an error of the
// connection to the server: a failed connect, a network error, an
// unexpected EOF, or the server's own "shutting down"/"connection failure"
// errors (SQLSTATE classes 57 and 08).
func isConnectionError(err error) bool {
	var (
		ce *pgconn.ConnectError
		ne net.Error
		pe *pgconn.PgError
	)
	switch {
	case errors.As(err, &ce), errors.As(err, &ne):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &pe):
		return strings.HasPrefix(pe.Code, "57") || strings.HasPrefix(pe.Code, "08")
	}
	return false
}

// advisoryLocks counts the advisory locks held in the database of pool.
func advisoryLocks(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
		t.Fatalf("read pg_locks: %v", err)
	}
	return n
}

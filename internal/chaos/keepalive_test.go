package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// packetFilter drops the packets of chosen connections inside the network
// namespace of the Postgres container, as a partition does: nothing is
// delivered and nothing is refused, and (unlike a proxy in between, whose
// kernel would answer them) the server's keepalive probes go unanswered.
type packetFilter struct {
	t     *testing.T
	pid   int        // a process in the container's network namespace
	rules [][]string // added, to delete when the test ends
}

// newPacketFilter returns a filter for the shared server's container, or
// skips the test when it cannot have one: no container (PGTEST_DSN), not
// root, or no iptables or nsenter.
func newPacketFilter(t *testing.T) *packetFilter {
	t.Helper()
	srv := pgtest.SharedServer(t)
	if srv.Container == nil {
		t.Skip("needs the server in a container of its own (not PGTEST_DSN): it drops packets in the container's network namespace")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: it enters the container's network namespace to drop packets with iptables")
	}
	for _, tool := range []string{"nsenter", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	info, err := srv.Container.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State == nil || info.State.Pid == 0 {
		t.Fatalf("the container is not running: %+v", info.State)
	}
	f := &packetFilter{t: t, pid: info.State.Pid}
	t.Cleanup(f.removeAll)
	return f
}

func (f *packetFilter) iptables(args ...string) error {
	cmd := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(f.pid), "--net", "iptables"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables %v in the container's network namespace: %v: %s", args, err, out)
	}
	return nil
}

// drop drops, both ways, the packets of the connection whose client end
// is clientPort as the server sees it. It first waits until the client has
// acknowledged everything the server sent on it: with data still
// unacknowledged, the server's kernel retransmits instead of probing, and
// keepalives do not apply (the retransmission timeout does, after about 15
// minutes).
func (f *packetFilter) drop(clientPort int) {
	f.t.Helper()
	eventually(f.t, wait, 10*time.Millisecond, fmt.Sprintf("the client on port %d to acknowledge what the server sent", clientPort),
		func() (bool, error) {
			n, err := f.unacked(clientPort)
			return err == nil && n == 0, err
		})
	port := strconv.Itoa(clientPort)
	for _, rule := range [][]string{
		{"INPUT", "-p", "tcp", "--sport", port, "-j", "DROP"},
		{"OUTPUT", "-p", "tcp", "--dport", port, "-j", "DROP"},
	} {
		if err := f.iptables(append([]string{"-I"}, rule...)...); err != nil {
			f.t.Fatal(err)
		}
		f.rules = append(f.rules, rule)
	}
}

// unacked returns how many bytes the server has sent on the connection
// from clientPort that the client has not acknowledged: the tx_queue of the
// server's socket in the container's /proc/net/tcp (and tcp6).
func (f *packetFilter) unacked(clientPort int) (int, error) {
	for _, file := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", f.pid, file))
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 5 {
				continue
			}
			// local_address rem_address st tx_queue:rx_queue, addresses as
			// hex address:port.
			local, remote := fields[1], fields[2]
			if !strings.HasSuffix(local, ":1538") || !strings.HasSuffix(remote, fmt.Sprintf(":%04X", clientPort)) {
				continue
			}
			tx, _, _ := strings.Cut(fields[4], ":")
			n, err := strconv.ParseInt(tx, 16, 64)
			return int(n), err
		}
	}
	return 0, fmt.Errorf("no connection from client port %d to 5432 in the container", clientPort)
}

func (f *packetFilter) removeAll() {
	for _, rule := range f.rules {
		if err := f.iptables(append([]string{"-D"}, rule...)...); err != nil {
			f.t.Error(err)
		}
	}
	f.rules = nil
}

// hangClaim opens a connection to db, takes source's advisory lock in an
// implicit transaction that it leaves open (the lock statement and no
// Sync: what the server holds when a claim's batch is cut after its first
// statement), and returns the connection and its client port as the server
// sees it. keepalives sets tcp_keepalives_idle, _interval and _count for the
// connection's backend, in seconds; nil keeps the system's defaults (on
// Linux, the first probe after two hours).
func hangClaim(t *testing.T, db *pgtest.DB, source string, keepalives []int) (*pgx.Conn, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "chaos-hung-" + source
	if keepalives != nil {
		cfg.RuntimeParams["tcp_keepalives_idle"] = strconv.Itoa(keepalives[0])
		cfg.RuntimeParams["tcp_keepalives_interval"] = strconv.Itoa(keepalives[1])
		cfg.RuntimeParams["tcp_keepalives_count"] = strconv.Itoa(keepalives[2])
	} else {
		cfg.RuntimeParams["tcp_keepalives_idle"] = "0" // the system's default
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The connection is left in the middle of a pipeline: close its socket.
	t.Cleanup(func() { conn.PgConn().Conn().Close() })
	var port int
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.inet_client_port()`).Scan(&port); err != nil {
		t.Fatal(err)
	}

	// A context that never ends: pgconn would cancel the query on the
	// server when the pipeline's context ended.
	key := sourceLockKey(t, source)
	pl := conn.PgConn().StartPipeline(context.Background())
	pl.SendQueryParams(`SELECT pg_catalog.pg_try_advisory_xact_lock($1::bigint)`,
		[][]byte{[]byte(strconv.FormatInt(key, 10))}, nil, nil, nil)
	pl.SendFlushRequest() // the server answers without a Sync
	if err := pl.Flush(); err != nil {
		t.Fatal(err)
	}
	res, err := pl.GetResults()
	if err != nil {
		t.Fatal(err)
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		t.Fatalf("pipeline result %T, want a result reader", res)
	}
	r := rr.Read()
	if r.Err != nil || len(r.Rows) != 1 || string(r.Rows[0][0]) != "t" {
		t.Fatalf("take the lock of %q: %+v, %v", source, r.Rows, r.Err)
	}
	return conn, port
}

// inFlight reports whether a claim of source is skipped because another
// claim of it is in flight (its advisory lock is held), and fails the test
// on any other outcome than that or a win.
func inFlight(t *testing.T, c *runclaim.Claimer, source string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	run, err := c.Claim(ctx, source)
	var nc *runclaim.NotClaimedError
	switch {
	case err == nil:
		if err := run.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		return false
	case errors.As(err, &nc) && errors.Is(err, runclaim.ErrAlreadyRunning) && nc.Holder == nil:
		return true
	}
	t.Fatalf("claim %q: %v, want a win or a skip for a claim in flight", source, err)
	return false
}

// TestHungClaimBoundedByKeepalives: a claim whose connection is cut off
// after the server has run its first statement (a partition between the
// TCP segments of its batch) leaves the server holding the source's
// advisory lock, waiting for the rest; meanwhile every other claim of the
// source skips as "another claim in flight". With the server's
// tcp_keepalives_idle, _interval and _count set, the server gives the
// connection up after about idle + interval × count, and the next claim
// wins. A second such connection with the system's defaults (on Linux, the
// first probe after two hours) still holds its lock at that point: the
// release is the keepalives' doing.
//
// The partition is made with iptables inside the container's network
// namespace, so that the keepalive probes go unanswered; through a proxy,
// the proxy's kernel would answer them. The claim is stood in for by its
// lock statement sent without a Sync, which is what the server holds of a
// batch cut after that statement.
func TestHungClaimBoundedByKeepalives(t *testing.T) {
	db := sharedtest.MigratedDB(t)
	store := newStore(t, db.Pool)
	c := newClaimer(t, store, runclaim.WithOwner("other-replica"))

	const idle, interval, count = 1, 1, 2 // gives up about 3 s after the last packet
	_, withPort := hangClaim(t, db, "with-keepalives", []int{idle, interval, count})
	_, withoutPort := hangClaim(t, db, "without-keepalives", nil)
	// After the connections, so that its cleanup lets their packets through
	// again before they are closed and the database is dropped.
	filter := newPacketFilter(t)
	for _, source := range []string{"with-keepalives", "without-keepalives"} {
		if !inFlight(t, c, source) {
			t.Fatalf("%s: a claim won while another connection held the lock", source)
		}
	}

	filter.drop(withPort)
	filter.drop(withoutPort)
	partitioned := time.Now()
	eventually(t, time.Minute, 250*time.Millisecond, "the server gives up the connection with keepalives, and a claim wins",
		func() (bool, error) { return !inFlight(t, c, "with-keepalives"), nil })
	released := time.Since(partitioned)
	t.Logf("the claim won %v after the partition (keepalives: idle %d s, interval %d s, count %d)", released.Round(time.Millisecond), idle, interval, count)

	if !inFlight(t, c, "without-keepalives") {
		t.Errorf("the connection without keepalives released its lock too, %v after the partition: the release was not the keepalives' doing", released)
	}
	var backends int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_catalog.pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'chaos-hung-%'`).Scan(&backends); err != nil {
		t.Fatal(err)
	}
	if backends != 1 {
		t.Errorf("%d hung backends left, want 1 (the one without keepalives)", backends)
	}
}

// sourceLockKey returns the advisory lock key of source in the default
// namespace, as a store computes it (no database needed).
func sourceLockKey(t *testing.T, source string) int64 {
	t.Helper()
	s, err := runclaim.NewPostgresStore(struct{ runclaim.Querier }{})
	if err != nil {
		t.Fatal(err)
	}
	return s.AdvisoryKey(source)
}

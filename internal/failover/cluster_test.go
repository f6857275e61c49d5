//go:build linux

package failover

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/runclaim/runclaim/internal/pgbin"
	"github.com/runclaim/runclaim/internal/sharedtest"
	"github.com/runclaim/runclaim/internal/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// baseWait bounds every wait for something that should happen promptly (a
// server start, a promotion, a standby catching up). It is generous on
// purpose: a failure to happen at all is what it catches. wait is it
// multiplied by RUNCLAIM_TEST_TIME_SCALE (see internal/sharedtest), set by
// newCluster; the tests of this package never run in parallel.
const baseWait = 30 * time.Second

var wait = baseWait

const howToRun = "to run the failover tests, install the PostgreSQL server binaries " +
	"(Debian: apt-get install postgresql-15) or set PGTEST_BINDIR to a directory holding postgres, initdb and pg_basebackup; " +
	"set PGTEST_REQUIRED=1 to fail instead of skipping"

// needBinaries returns the binaries' directory (pgbin.BinDir, with
// pg_basebackup), or skips (fails with PGTEST_REQUIRED=1) the test.
func needBinaries(t testing.TB) string {
	t.Helper()
	dir, err := pgbin.BinDir(0, "postgres", "initdb", "pg_basebackup")
	if err != nil {
		if os.Getenv("PGTEST_REQUIRED") == "1" {
			t.Fatalf("failover: %v (PGTEST_REQUIRED=1)", err)
		}
		t.Skipf("failover: %v; %s", err, howToRun)
	}
	return dir
}

// runAs is the user the servers run as (pgbin.ServerCredential).
func runAs(t testing.TB) *syscall.Credential {
	t.Helper()
	cred, err := pgbin.ServerCredential()
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	return cred
}

// server is one postgres process.
type server struct {
	name string
	dir  string // data directory
	port int
	cmd  *exec.Cmd
	log  string // its log file
	done chan struct{}
}

// cluster is a primary, a standby streaming from it through proxy, and
// what they need.
type cluster struct {
	t        testing.TB
	bin      string
	cred     *syscall.Credential
	root     string
	primary  *server
	standby  *server
	proxy    *tcpproxy.Proxy // between the standby's WAL receiver and the primary
	syncName string          // the standby's application_name
}

// clusterOptions says how to set the cluster up.
type clusterOptions struct {
	// sync makes the standby a synchronous one (synchronous_standby_names).
	sync bool
	// settings are further primary settings, as name=value.
	settings []string
	// direct has the standby stream from the primary without the proxy.
	direct bool
}

// newCluster starts a primary and a standby streaming from it through a
// proxy, and stops both and removes their files when the test ends.
func newCluster(t testing.TB, opts clusterOptions) *cluster {
	t.Helper()
	wait = sharedtest.Scale(t, baseWait)
	c := &cluster{t: t, bin: needBinaries(t), cred: runAs(t), syncName: "standby1"}
	root, err := os.MkdirTemp("", "runclaim-failover-")
	if err != nil {
		t.Fatal(err)
	}
	c.root = root
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range []*server{c.primary, c.standby} {
				if s != nil {
					if b, err := os.ReadFile(s.log); err == nil {
						t.Logf("%s log:\n%s", s.name, lastLines(string(b), 40))
					}
				}
			}
		}
		os.RemoveAll(root)
	})
	c.chown(root)

	c.primary = &server{name: "primary", dir: filepath.Join(root, "primary"), port: freePort(t)}
	c.run("initdb", "-D", c.primary.dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	conf := []string{
		// Lost on an immediate shutdown only if the machine crashes too,
		// which these tests do not do; spares the shared machine's disk.
		"fsync = off",
		"wal_level = replica",
		"max_wal_senders = 4",
		"wal_keep_size = '64MB'",
		"max_connections = 60",
		"shared_buffers = '16MB'",
		// A standby that has lost its connection tries again at once.
		"wal_retrieve_retry_interval = '100ms'",
		"wal_receiver_status_interval = '1s'",
		"hot_standby = on",
		"log_min_messages = warning",
	}
	if opts.sync {
		conf = append(conf, "synchronous_standby_names = '"+c.syncName+"'")
	}
	conf = append(conf, opts.settings...)
	c.appendConf(c.primary.dir, conf)
	c.start(c.primary)

	c.proxy, err = tcpproxy.Start("127.0.0.1:" + strconv.Itoa(c.primary.port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.proxy.Close() })

	c.standby = &server{name: "standby", dir: filepath.Join(root, "standby"), port: freePort(t)}
	c.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.primary.port), "-U", "postgres",
		"-D", c.standby.dir, "-X", "stream", "--no-sync", "-c", "fast")
	upstream := c.proxy.Addr().Port
	if opts.direct {
		upstream = c.primary.port
	}
	c.appendConf(c.standby.dir, []string{
		fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=%s connect_timeout=2'", upstream, c.syncName),
		// The old primary's synchronous standby setting would make the
		// promoted standby wait for a standby of its own.
		"synchronous_standby_names = ''",
	})
	signal := filepath.Join(c.standby.dir, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.chown(signal)
	c.start(c.standby)
	c.waitStreaming()
	return c
}

// dsn is the DSN of one server.
func (s *server) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", s.port)
}

// multiDSN is what a replica connects with: both servers, the one that
// takes writes.
func (c *cluster) multiDSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2&target_session_attrs=read-write",
		c.primary.port, c.standby.port)
}

// run runs one of the binaries as the servers' user, to its end.
func (c *cluster) run(name string, args ...string) {
	c.t.Helper()
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Dir = c.root
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// start starts s and waits until it accepts connections. Its port was
// free when picked, but another process may take it before the server
// binds it (a loaded machine, other tests starting servers): the server
// then exits saying so, and start tries again on another port, which no
// one has been given yet. A connection counts only if it reaches s
// itself (its data directory), not a server that took the port.
func (c *cluster) start(s *server) {
	c.t.Helper()
	for attempt := 1; !c.startOnce(s); attempt++ {
		if attempt == 3 {
			c.t.Fatalf("%s: its port was taken %d times in a row", s.name, attempt)
		}
		s.port = freePort(c.t)
	}
}

// startOnce starts s and waits until it accepts connections; it reports
// false if s could not bind its port.
func (c *cluster) startOnce(s *server) bool {
	c.t.Helper()
	s.log = filepath.Join(c.root, s.name+".log")
	logf, err := os.Create(s.log)
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close()
	s.cmd = exec.Command(filepath.Join(c.bin, "postgres"), "-D", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(s.port), "-c", "unix_socket_directories=")
	// Pdeathsig: should the test binary die (a timeout, a crash) before its
	// cleanups run, the kernel shuts the server down at once.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", s.name, err)
	}
	done := make(chan struct{})
	s.done = done
	cmd := s.cmd
	go func() {
		cmd.Wait()
		close(done)
	}()
	c.t.Cleanup(func() { c.stop(s, syscall.SIGQUIT) })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for {
		dir, err := dataDirectory(ctx, s.dsn())
		if err == nil && dir == s.dir {
			return true
		}
		if err == nil {
			err = fmt.Errorf("port %d is another server's (data directory %s)", s.port, dir)
		}
		select {
		case <-done:
			if log, rerr := os.ReadFile(s.log); rerr == nil && strings.Contains(string(log), "could not create any TCP/IP sockets") {
				return false
			}
			c.t.Fatalf("%s exited while starting: %v", s.name, err)
		case <-ctx.Done():
			c.t.Fatalf("%s did not accept connections within %v: %v", s.name, wait, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dataDirectory returns the data directory of the server at dsn.
func dataDirectory(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var dir string
	err = conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('data_directory')").Scan(&dir)
	return dir, err
}

// stop stops s with sig (SIGQUIT: an immediate shutdown) and waits for it.
func (c *cluster) stop(s *server, sig syscall.Signal) {
	c.t.Helper()
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(wait):
		// The server's whole process group: the postmaster and its children.
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// promote promotes the standby and waits until it takes writes.
func (c *cluster) promote() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.standby.dsn())
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_promote(true, 30)`).Scan(&ok); err != nil || !ok {
		c.t.Fatalf("pg_promote: %v, %v", ok, err)
	}
}

// waitStreaming waits until the standby streams from the primary.
func (c *cluster) waitStreaming() {
	c.t.Helper()
	c.waitFor("the standby streams", func(ctx context.Context, p *pgx.Conn) (bool, error) {
		var n int
		err := p.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`, c.syncName).Scan(&n)
		return n == 1, err
	})
}

// waitCaughtUp waits until the standby has replayed all the primary has
// written so far.
func (c *cluster) waitCaughtUp() {
	c.t.Helper()
	var lsn string
	c.waitFor("the primary's WAL position", func(ctx context.Context, p *pgx.Conn) (bool, error) {
		return true, p.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn)
	})
	c.waitFor("the standby replays up to "+lsn, func(ctx context.Context, p *pgx.Conn) (bool, error) {
		var ok bool
		err := p.QueryRow(ctx, `SELECT coalesce(replay_lsn >= $1::pg_lsn, false) FROM pg_stat_replication WHERE application_name = $2`, lsn, c.syncName).Scan(&ok)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		return ok, err
	})
}

// waitFor polls cond on a connection to the primary until it holds.
func (c *cluster) waitFor(what string, cond func(context.Context, *pgx.Conn) (bool, error)) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.primary.dsn())
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		ok, err := cond(ctx, conn)
		if err != nil {
			c.t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("%s: not within %v", what, wait)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// appendConf appends lines to a data directory's postgresql.conf.
func (c *cluster) appendConf(dir string, lines []string) {
	c.t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\n" + strings.Join(lines, "\n") + "\n"); err != nil {
		c.t.Fatal(err)
	}
}

// chown gives path to the servers' user.
func (c *cluster) chown(path string) {
	c.t.Helper()
	if c.cred == nil {
		return
	}
	if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		c.t.Fatal(err)
	}
}

// freePort returns a free TCP port on 127.0.0.1.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

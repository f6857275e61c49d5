// Package bouncer starts PgBouncer in transaction pooling mode in front of
// the test server of internal/pgtest, for tests that check the library
// behind a pooler that shares few server connections among many clients.
//
// It runs Debian's pgbouncer binary (found on PATH or at
// /usr/sbin/pgbouncer) on 127.0.0.1 at a free port, with its configuration
// in the test's temporary directory, and stops it by its PID when the test
// ends. Every database of the server is reachable through it under its own
// name.
//
// The pool: pool_mode = transaction, PoolSize server connections per
// database and user, up to MaxClientConn clients. A server connection is
// given to a client for one transaction and then to whichever client asks
// next, so nothing a client leaves in its session (prepared statements,
// session settings, session-level advisory locks) is safe to rely on.
//
// When pgbouncer is not installed, Start skips the test with a message, or
// fails it when PGTEST_REQUIRED=1.
package bouncer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// The pool PgBouncer runs.
const (
	// PoolSize is the number of server connections per database and user.
	PoolSize = 4
	// MaxClientConn is the number of client connections PgBouncer accepts.
	MaxClientConn = 128
)

const (
	debianPath   = "/usr/sbin/pgbouncer"
	startTimeout = 10 * time.Second
	stopTimeout  = 10 * time.Second
	envRequired  = "PGTEST_REQUIRED"
)

// Bouncer is a running PgBouncer.
type Bouncer struct {
	// Addr is the host:port PgBouncer listens on (127.0.0.1).
	Addr string
	// PID is the pgbouncer process's ID.
	PID int
	// Version is the pgbouncer version, such as "1.18.0".
	Version string

	user, password string

	mu  sync.Mutex // protects log
	log bytes.Buffer
}

// Binary returns the path of the pgbouncer binary, or an error saying that
// it is missing.
func Binary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat(debianPath); err == nil {
		return debianPath, nil
	}
	return "", errors.New("pgbouncer is not installed (apt-get install pgbouncer; Debian puts it in /usr/sbin)")
}

// Start starts PgBouncer in front of the server that upstreamDSN connects
// to, with that DSN's user and password, and stops it when the test ends.
// Its pools have PoolSize server connections.
func Start(t testing.TB, upstreamDSN string) *Bouncer {
	t.Helper()
	return StartPool(t, upstreamDSN, PoolSize)
}

// StartPool is Start with pools of poolSize server connections.
func StartPool(t testing.TB, upstreamDSN string, poolSize int) *Bouncer {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv(envRequired) == "1" {
			t.Fatalf("bouncer: %v (PGTEST_REQUIRED=1)", err)
		}
		t.Skipf("bouncer: %v; the PgBouncer tests need it", err)
	}
	up, err := pgx.ParseConfig(upstreamDSN)
	if err != nil {
		t.Fatalf("bouncer: parse the upstream DSN: %v", err)
	}
	version, err := binaryVersion(bin)
	if err != nil {
		t.Fatalf("bouncer: %v", err)
	}
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		b, err := start(t, bin, dir, up, version, poolSize)
		if err == nil {
			return b
		}
		lastErr = err
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	t.Fatalf("bouncer: start %s: %v", bin, lastErr)
	return nil
}

var plainName = regexp.MustCompile(`^\w+$`)

var versionRE = regexp.MustCompile(`(?m)^PgBouncer (\d+\.\d+(?:\.\d+)?)`)

func binaryVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", bin, err, out)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s --version: no version in %q", bin, out)
	}
	return string(m[1]), nil
}

// AtLeast reports whether the running pgbouncer is version major.minor or
// later.
func (b *Bouncer) AtLeast(major, minor int) bool {
	parts := strings.Split(b.Version, ".")
	if len(parts) < 2 {
		return false
	}
	ma, _ := strconv.Atoi(parts[0])
	mi, _ := strconv.Atoi(parts[1])
	return ma > major || ma == major && mi >= minor
}

func start(t testing.TB, bin, dir string, up *pgx.ConnConfig, version string, poolSize int) (*Bouncer, error) {
	port, err := pgtest.FreePort()
	if err != nil {
		return nil, err
	}
	b := &Bouncer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Version: version, user: up.User, password: up.Password}

	authType := "scram-sha-256"
	if up.Password == "" {
		authType = "trust" // the upstream needs no password; loopback only
	}
	ini := filepath.Join(dir, "pgbouncer.ini")
	userlist := filepath.Join(dir, "userlist.txt")
	conf := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = %s
auth_file = %s
admin_users = %s
pool_mode = transaction
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = %d
max_db_connections = %d
server_reset_query =
server_check_delay = 0
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
`, iniValue(up.Host), up.Port, port, authType, userlist, iniValue(up.User), poolSize, MaxClientConn, poolSize)
	if b.AtLeast(1, 21) {
		// 1.21 can track protocol-level prepared statements in transaction
		// mode; keep it off, as in 1.18, which cannot.
		conf += "max_prepared_statements = 0\n"
	}
	if err := os.WriteFile(ini, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	users := fmt.Sprintf("%s %s\n", userlistQuote(up.User), userlistQuote(up.Password))
	if err := os.WriteFile(userlist, []byte(users), 0o600); err != nil {
		return nil, err
	}

	args := []string{ini}
	if os.Geteuid() == 0 {
		// pgbouncer refuses to run as root; it reads its files first.
		args = []string{"-u", "nobody", ini}
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.PID = cmd.Process.Pid

	up1 := make(chan struct{})
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		s := bufio.NewScanner(stderr)
		signalled := false
		for s.Scan() {
			line := s.Text()
			b.mu.Lock()
			b.log.WriteString(line + "\n")
			b.mu.Unlock()
			if !signalled && strings.Contains(line, "process up") {
				signalled = true
				close(up1)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	exited := make(chan error, 1)
	go func() {
		<-logDone // Wait must not be called before the pipe is drained.
		exited <- cmd.Wait()
	}()

	stop := func() {
		select {
		case <-exited:
			return
		default:
		}
		_ = cmd.Process.Signal(os.Interrupt) // SIGINT: safe shutdown
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			_ = cmd.Process.Kill()
			<-exited
		}
	}

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-up1:
	case err := <-exited:
		exited <- err
		return nil, fmt.Errorf("pgbouncer exited at start (%v):\n%s", err, b.Log())
	case <-timer.C:
		stop()
		return nil, fmt.Errorf("pgbouncer did not start within %v:\n%s", startTimeout, b.Log())
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("bouncer: pgbouncer log:\n%s", b.Log())
		}
	})
	return b, nil
}

// Log returns what pgbouncer has logged so far.
func (b *Bouncer) Log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.String()
}

// DSN returns a DSN that connects to database through PgBouncer, with the
// upstream's user and password.
func (b *Bouncer) DSN(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		Host:     b.Addr,
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	if b.password != "" {
		u.User = url.UserPassword(b.user, b.password)
	} else {
		u.User = url.User(b.user)
	}
	return u.String()
}

// adminConn connects to PgBouncer's admin console.
func (b *Bouncer) adminConn(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(b.DSN("pgbouncer"))
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("admin console: %w", err)
	}
	return conn, nil
}

// ShowServers returns, from PgBouncer's admin console, the number of
// server connections PgBouncer has open to database, in any state.
func (b *Bouncer) ShowServers(ctx context.Context, database string) (int, error) {
	conn, err := b.adminConn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SHOW SERVERS")
	if err != nil {
		return 0, fmt.Errorf("SHOW SERVERS: %w", err)
	}
	defer rows.Close()
	dbCol := -1
	for i, f := range rows.FieldDescriptions() {
		if f.Name == "database" {
			dbCol = i
		}
	}
	if dbCol < 0 {
		return 0, errors.New("SHOW SERVERS has no database column")
	}
	n := 0
	for rows.Next() {
		if string(rows.RawValues()[dbCol]) == database {
			n++
		}
	}
	return n, rows.Err()
}

// Reconnect makes PgBouncer close its server connections to database (each
// once it is released), so that the next transactions get new ones: for
// example to pick up a setting changed with ALTER DATABASE. It waits until
// the old connections are gone.
func (b *Bouncer) Reconnect(ctx context.Context, database string) error {
	conn, err := b.adminConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if !plainName.MatchString(database) {
		return fmt.Errorf("RECONNECT: database name %q is not a plain word", database)
	}
	if _, err := conn.Exec(ctx, "RECONNECT "+database); err != nil {
		return fmt.Errorf("RECONNECT: %w", err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := b.ShowServers(ctx, database)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d server connections still open after RECONNECT: %w", n, ctx.Err())
		case <-tick.C:
		}
	}
}

// iniValue refuses what cannot be written as an ini value safely.
func iniValue(s string) string {
	if strings.ContainsAny(s, "\n\r;#= ") {
		panic(fmt.Sprintf("bouncer: %q cannot go into pgbouncer.ini", s))
	}
	return s
}

// userlistQuote quotes a user name or password for auth_file: in double
// quotes, with double quotes doubled.
func userlistQuote(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

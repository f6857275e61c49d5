package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim/internal/pgbin"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestNewIsolated(t *testing.T) {
	ctx := t.Context()
	a, b := New(t), New(t)
	if a.Name == b.Name {
		t.Fatalf("two databases share the name %q", a.Name)
	}
	if !strings.Contains(a.DSN, a.Name) {
		t.Errorf("DSN %q does not name database %q", a.DSN, a.Name)
	}

	if _, err := a.Pool.Exec(ctx, "CREATE TABLE only_in_a (v int); INSERT INTO only_in_a VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := a.Pool.QueryRow(ctx, "SELECT v FROM only_in_a").Scan(&v); err != nil || v != 42 {
		t.Fatalf("read back from a: v=%d err=%v", v, err)
	}
	_, err := b.Pool.Exec(ctx, "SELECT * FROM only_in_a")
	if err == nil {
		t.Fatal("table created in a is visible in b")
	}
	if !strings.Contains(err.Error(), "42P01") { // undefined_table
		t.Fatalf("unexpected error from b: %v", err)
	}

	var cur string
	if err := b.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&cur); err != nil || cur != b.Name {
		t.Fatalf("b's pool is on %q (err %v), want %q", cur, err, b.Name)
	}
}

func TestCleanupDropsDatabase(t *testing.T) {
	srv := SharedServer(t)
	ctx := t.Context()
	var name string
	var open *pgx.Conn
	t.Run("inner", func(t *testing.T) {
		db := New(t)
		name = db.Name
		_ = db.NewPool(t, nil)
		// A connection still open at cleanup must not keep the database
		// from being dropped.
		var err error
		open, err = pgx.Connect(ctx, db.DSN)
		if err != nil {
			t.Fatal(err)
		}
	})
	if name == "" || open == nil {
		t.Fatal("inner test did not run")
	}
	defer open.Close(context.Background())
	conn, err := pgx.Connect(ctx, srv.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

func TestNewPool(t *testing.T) {
	db := New(t)
	pool := db.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 2
		c.ConnConfig.RuntimeParams["application_name"] = "pgtest-newpool"
	})
	if got := pool.Config().MaxConns; got != 2 {
		t.Errorf("MaxConns = %d, want 2", got)
	}
	var app, cur string
	err := pool.QueryRow(t.Context(), "SELECT current_setting('application_name'), current_database()").Scan(&app, &cur)
	if err != nil {
		t.Fatal(err)
	}
	if app != "pgtest-newpool" || cur != db.Name {
		t.Errorf("got application_name %q on %q, want pgtest-newpool on %q", app, cur, db.Name)
	}
}

func TestParallel(t *testing.T) {
	for i := range 4 {
		t.Run(string(rune('a'+i)), func(t *testing.T) {
			t.Parallel()
			db := New(t)
			if _, err := db.Pool.Exec(t.Context(), "CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// containerAdmin returns the shared server and a superuser connection to
// it, closed when the test ends; it skips the test, saying why, when the
// server comes from PGTEST_DSN rather than a container of pgtest's.
func containerAdmin(t *testing.T, why string) (*Server, *pgx.Conn) {
	t.Helper()
	srv := SharedServer(t)
	if srv.Container == nil {
		t.Skip("server from PGTEST_DSN: " + why)
	}
	conn, err := pgx.Connect(t.Context(), srv.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return srv, conn
}

func TestServerSettings(t *testing.T) {
	_, conn := containerAdmin(t, "its settings are not ours to check")
	ctx := t.Context()
	for name, want := range map[string]string{"max_connections": "300", "fsync": "on"} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
}

func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u:p@127.0.0.1:5432/postgres?sslmode=disable", "postgres://u:p@127.0.0.1:5432/x?sslmode=disable"},
		{"postgresql://u@h/", "postgresql://u@h/x"},
		{"host=h user=u dbname=postgres", "host=h user=u dbname=postgres dbname=x"},
	} {
		got, err := withDatabase(tc.dsn, "x")
		if err != nil || got != tc.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tc.dsn, got, err, tc.want)
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil {
			t.Errorf("parse %q: %v", got, err)
		} else if cfg.Database != "x" {
			t.Errorf("%q names database %q, want x", got, cfg.Database)
		}
	}
	if _, err := withDatabase("postgres://%zz", "x"); err == nil {
		t.Error("bad URL accepted")
	}
}

// TestContainerRestart shows that a test can stop and start the shared
// container and keep using the same DSNs afterwards.
func TestContainerRestart(t *testing.T) {
	srv := SharedServer(t)
	if srv.Container == nil {
		t.Skip("server from PGTEST_DSN has no container")
	}
	if testing.Short() {
		t.Skip("restarts the server")
	}
	db := New(t)
	ctx := t.Context()
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Container.Stop(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.Ping(ctx); err == nil {
		t.Error("ping succeeded while the server was stopped")
	}
	if err := srv.Container.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitReady(ctx, srv.AdminDSN); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := db.Pool.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 7 {
		t.Fatalf("after restart: v=%d err=%v", v, err)
	}
}

// TestDataDirectory: under PGTEST_TMPFS=1 the server's data directory is
// the host directory in memory, bind-mounted; otherwise the image's own.
// (TestContainerRestart shows that the data survives a restart either way.)
func TestDataDirectory(t *testing.T) {
	srv, conn := containerAdmin(t, "its data directory is not ours")
	var dir string
	if err := conn.QueryRow(t.Context(), "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(envTmpfs) != "1" {
		if dir == containerDataDir || srv.dataDir != "" {
			t.Errorf("without %s=1: data directory %s, host directory %q; want the image's own and none", envTmpfs, dir, srv.dataDir)
		}
		return
	}
	if dir != containerDataDir {
		t.Errorf("data directory %s, want %s", dir, containerDataDir)
	}
	if !strings.HasPrefix(srv.dataDir, "/dev/shm/pgtest-data-") {
		t.Fatalf("host directory %q, want one under /dev/shm", srv.dataDir)
	}
	if _, err := os.Stat(filepath.Join(srv.dataDir, "PG_VERSION")); err != nil {
		t.Errorf("the server's files are not in the host directory: %v", err)
	}
}

func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		version   string
		num, want int
		ok        bool
	}{
		{"13.23", 130023, 0, true},
		{"18.4", 180004, 0, true},
		{"18.4", 180004, 18, true},
		{"15.18 (Debian 15.18-0+deb12u1)", 150018, 15, true},
		{"12.22", 120022, 0, false},
		{"12.22", 120022, 12, false},
		{"17.10", 170010, 18, false},
		{"18.4", 180004, 17, false},
	} {
		err := checkVersion(tc.version, tc.num, tc.want)
		var wrong *wrongServerError
		switch {
		case tc.ok && err != nil:
			t.Errorf("checkVersion(%q, %d, %d) = %v, want nil", tc.version, tc.num, tc.want, err)
		case !tc.ok && !errors.As(err, &wrong):
			t.Errorf("checkVersion(%q, %d, %d) = %v, want a wrongServerError", tc.version, tc.num, tc.want, err)
		case !tc.ok && !strings.Contains(err.Error(), tc.version):
			t.Errorf("checkVersion(%q, %d, %d) = %v, does not name the version", tc.version, tc.num, tc.want, err)
		}
	}
	for in, want := range map[string]int{"": 0, "13": 13, "18": 18} {
		if got, err := parseMajor(in); err != nil || got != want {
			t.Errorf("parseMajor(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"12", "0", "-1", "16.4", "sixteen", " 16"} {
		if _, err := parseMajor(in); err == nil || !strings.Contains(err.Error(), envMajor) {
			t.Errorf("parseMajor(%q): %v, want an error naming %s", in, err, envMajor)
		}
	}
}

// TestServerVersion: the shared server's Version and VersionNum are the
// server's, it is at least PostgreSQL 13, and of the major version that
// PGTEST_SERVER_MAJOR asks for, if set.
func TestServerVersion(t *testing.T) {
	srv := SharedServer(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, srv.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var version string
	var num int
	if err := conn.QueryRow(ctx, "SELECT version(), current_setting('server_version_num')::int").Scan(&version, &num); err != nil {
		t.Fatal(err)
	}
	t.Logf("server: %s", version)
	if srv.VersionNum != num || !strings.HasPrefix(version, "PostgreSQL "+srv.Version) {
		t.Errorf("Server says %q (%d); the server says %q (%d)", srv.Version, srv.VersionNum, version, num)
	}
	if num < minVersionNum {
		t.Errorf("server_version_num %d: older than PostgreSQL 13", num)
	}
	if s := os.Getenv(envMajor); s != "" && strconv.Itoa(num/10000) != s {
		t.Errorf("server_version_num %d, but %s=%s", num, envMajor, s)
	}
}

// TestWrongMajorFails runs this test binary again on the shared server
// with PGTEST_SERVER_MAJOR naming another version and without
// PGTEST_REQUIRED: its database tests must fail, not skip.
func TestWrongMajorFails(t *testing.T) {
	if os.Getenv("PGTEST_CHILD") == "1" {
		t.Skip("in the child")
	}
	srv := SharedServer(t)
	other := 13
	if srv.VersionNum/10000 == other {
		other = 14
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNewIsolated$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "PGTEST_CHILD=1", envDSN+"="+srv.AdminDSN, envMajor+"="+strconv.Itoa(other), envRequired+"=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child with %s=%d: %v, want a failed run; output:\n%s", envMajor, other, err, out)
	}
	want := fmt.Sprintf("%s=%d", envMajor, other)
	if !strings.Contains(string(out), "--- FAIL: TestNewIsolated") || !strings.Contains(string(out), want) {
		t.Fatalf("child with %s: want TestNewIsolated to fail naming %s; output:\n%s", want, want, out)
	}
}

// TestNoServerFailsPackage runs this test binary again, without -v, on a
// PGTEST_DSN where nothing listens and without PGTEST_REQUIRED: the
// database test skips, and the binary must still fail with a line naming
// the skips, since "go test" shows a passing package only as "ok". With
// PGTEST_OPTIONAL=1 the same run passes.
func TestNoServerFailsPackage(t *testing.T) {
	if os.Getenv("PGTEST_CHILD") == "1" {
		t.Skip("in the child")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close() // Nothing listens there now: every connection is refused.
	child := func(optional string) ([]byte, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNewIsolated$", "-test.count=1")
		cmd.Env = append(os.Environ(), "PGTEST_CHILD=1",
			envDSN+"=postgres://postgres:postgres@"+closed+"/postgres?connect_timeout=5",
			envRequired+"=", envMajor+"=", envOptional+"="+optional)
		return cmd.CombinedOutput()
	}

	out, err := child("")
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child without a server: %v, want a failed run; output:\n%s", err, out)
	}
	for _, want := range []string{"pgtest: 1 database test SKIPPED: no PostgreSQL server", envOptional + "=1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child without a server: output lacks %q:\n%s", want, out)
		}
	}

	out, err = child("1")
	if err != nil {
		t.Fatalf("child without a server, %s=1: %v, want a passing run; output:\n%s", envOptional, err, out)
	}
}

// TestDSNWithoutSSLMode runs this test binary again with PGTEST_DSN as the
// CONTRIBUTING.md shows it, without sslmode (so pgx's default "prefer": TLS first,
// then plain TCP), on the shared server, and checks that a test which
// clears pgx's Fallbacks, as the proxy and wire-counting tests do, still
// connects. The container's server has no TLS, so before pinTLS the
// child's pool tried TLS only and failed.
func TestDSNWithoutSSLMode(t *testing.T) {
	if os.Getenv("PGTEST_CHILD") == "1" {
		db := New(t)
		pool := db.NewPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Fallbacks = nil })
		if err := pool.Ping(t.Context()); err != nil {
			t.Fatalf("pool without fallbacks on %s: %v", db.Name, err)
		}
		return
	}
	srv := SharedServer(t)
	u, err := url.Parse(srv.AdminDSN)
	if err != nil {
		t.Skipf("AdminDSN is not a URL: %v", err)
	}
	q := u.Query()
	q.Del("sslmode")
	u.RawQuery = q.Encode()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDSNWithoutSSLMode$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "PGTEST_CHILD=1", envDSN+"="+u.String(), envMajor+"=", envRequired+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child with a DSN without sslmode: %v; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestDSNWithoutSSLMode") {
		t.Fatalf("child did not run the test; output:\n%s", out)
	}
}

// TestPinTLS: pinTLS leaves a DSN alone unless its sslmode tries both ways.
func TestPinTLS(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u:p@127.0.0.1:1/db?sslmode=disable",
		"postgres://u:p@127.0.0.1:1/db?sslmode=require",
		"host=127.0.0.1 port=1 sslmode=verify-full",
	} {
		got, err := pinTLS(dsn, nil)
		if err != nil || got != dsn {
			t.Errorf("pinTLS(%q) = %q, %v; want it unchanged", dsn, got, err)
		}
	}
}

// TestLocalServer runs this test binary again where no container can
// start (an image that does not exist) and no PGTEST_DSN is set: its
// database test must run on a throwaway cluster of this machine's server
// binaries, say so in its one line, and leave no data directory behind.
func TestLocalServer(t *testing.T) {
	if os.Getenv("PGTEST_CHILD") == "1" {
		t.Skip("in the child")
	}
	bin, err := pgbin.BinDir(0)
	if err != nil {
		if os.Getenv(envRequired) == "1" {
			t.Fatalf("%v (PGTEST_REQUIRED=1)", err)
		}
		t.Skipf("%v: no server binaries to start a cluster with", err)
	}
	// The child's TMPDIR, which the server's user (postgres, under root)
	// must be able to enter, as it can /tmp.
	tmp, err := os.MkdirTemp("", "pgtest-local-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^(TestNewIsolated|TestCleanupDropsDatabase)$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "PGTEST_CHILD=1", envDSN+"=", envImage+"=runclaim.local/no-such-image:0",
		envRequired+"=1", envMajor+"=", envTmpfs+"=", "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child on the local binaries: %v; output:\n%s", err, out)
	}
	for _, want := range []string{"from the local server binaries in " + bin, "--- PASS: TestNewIsolated", "--- PASS: TestCleanupDropsDatabase"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
	left, _ := filepath.Glob(filepath.Join(tmp, dataDirPrefix()+"*"))
	if len(left) > 0 {
		t.Errorf("the child left its cluster's files behind: %v", left)
	}
}

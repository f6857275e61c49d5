// Package pgtest gives tests isolated PostgreSQL databases on one server
// shared by all tests of a test binary.
//
// The server is found, in this order:
//
//   - PGTEST_DSN, if set: an existing server. The DSN must be for a
//     superuser or a role with CREATEDB, and point at a maintenance
//     database such as "postgres".
//   - Otherwise a container started through testcontainers-go from the image
//     named by PGTEST_IMAGE (default "postgres:18"), once per test
//     binary, on first use, and removed by [Main] when the tests are done.
//   - Otherwise, when no container can start (no Docker daemon, no image),
//     a throwaway cluster from this machine's server binaries (Linux):
//     PGTEST_BINDIR, or the newest /usr/lib/postgresql/N/bin (of the major
//     version PGTEST_SERVER_MAJOR names, if set), initialised in a
//     temporary directory (under /dev/shm with PGTEST_TMPFS=1), run as the
//     postgres user when the tests run as root, on a free port of
//     127.0.0.1, and removed by [Main].
//   - Otherwise the tests that need a database fail: [Main] fails the
//     package with a line "pgtest: N database tests SKIPPED: no PostgreSQL
//     server; ..." that says what to install, since "go test" shows a
//     passing package as one "ok" line and would hide the skips. With
//     PGTEST_OPTIONAL=1 the skips are accepted and the package passes;
//     with PGTEST_REQUIRED=1 each test fails at once.
//
// The server must be PostgreSQL 13 or later (the oldest release runclaim is
// tested on; DROP DATABASE ... WITH (FORCE) needs it). With
// PGTEST_SERVER_MAJOR set, say to 16, the server must also be of that major
// version, so that a run meant for one version cannot pass on another; a
// server of any other version fails every test that needs it, whatever
// PGTEST_REQUIRED says. Once the server is found, a line
// "pgtest: PostgreSQL 16.14 from ..." on standard error tells which server
// the test binary's tests run on.
//
// Every test that calls [New] gets a database of its own, created with
// CREATE DATABASE under a unique name and dropped when the test ends, so
// tests may run in parallel. A [Template] is a database prepared once
// (migrated, say) that [Template.New] copies for each test that asks,
// for about the cost of an empty one.
//
// Use it from each package's TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		db := pgtest.New(t)
//		_, err := db.Pool.Exec(t.Context(), "CREATE TABLE t (id int)")
//		...
//	}
//
// Container details:
//
//   - The container runs postgres with "-c max_connections=300"; fsync and
//     the other durability settings keep their defaults, so that benchmarks
//     see realistic WAL flushes.
//   - Under go test -fuzz, the fuzzing workers use the coordinating
//     process's container (through PGTEST_DSN, set for them) rather than
//     each starting one.
//   - With PGTEST_TMPFS=1 the data directory is kept in memory: a directory
//     under /dev/shm named pgtest-data-$PGTEST_RUN-*, bind-mounted into the
//     container (so that it survives a restart of the container) and
//     removed with it. It needs a local Docker daemon, and root to remove
//     the server's files. Tests that create many databases then run up to
//     about twice as fast on a machine whose disk writes are costly;
//     benchmark figures should come from a run without it. CI sets it.
//   - With a local Docker daemon (DOCKER_HOST unset or unix://) the
//     container's port 5432 is published on 127.0.0.1 at a host port chosen
//     up front, so the address stays the same when a test stops and starts
//     the container ([Server.Container]). TESTCONTAINERS_HOST_OVERRIDE is set
//     to 127.0.0.1 in that case unless it is already set.
//   - TESTCONTAINERS_RYUK_DISABLED is set to "true" unless it is already set:
//     the reaper container needs an image from a registry, which may not be
//     reachable, and [Main] removes the container itself. Every container
//     carries the label runclaim.pgtest=1, so leftovers of a killed test
//     binary can be removed with
//     docker rm -fv $(docker ps -aq --filter label=runclaim.pgtest=1).
//     With PGTEST_RUN set, containers also carry runclaim.pgtest.run=$PGTEST_RUN,
//     so that a CI run removes its own containers and no one else's.
//     Set TESTCONTAINERS_RYUK_DISABLED=false to use the reaper instead.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
	"go.uber.org/goleak"
)

// Environment variables read by this package.
const (
	envDSN      = "PGTEST_DSN"
	envImage    = "PGTEST_IMAGE"
	envRequired = "PGTEST_REQUIRED"
	envMajor    = "PGTEST_SERVER_MAJOR"
	envOptional = "PGTEST_OPTIONAL"
	envTmpfs    = "PGTEST_TMPFS"

	defaultImage = "postgres:18"

	// minVersionNum is the oldest server accepted, as server_version_num.
	minVersionNum = 130000

	// containerLabel marks containers started by this package.
	containerLabel = "runclaim.pgtest"

	// runTimeout bounds the whole start, including a possible image pull;
	// postgres.BasicWaitStrategies gives the server itself 60 s to start.
	runTimeout   = 5 * time.Minute
	adminTimeout = 30 * time.Second

	containerUser     = "postgres"
	containerPassword = "postgres"
	containerDB       = "postgres"

	// containerHBA is the container server's pg_hba.conf (its path is
	// containerHBAPath). The superuser the tests connect as is trusted: a
	// SCRAM exchange costs 12 ms of CPU in a -race test binary and 1.5 ms
	// in the server, and CI's suites open some ten thousand connections on
	// a machine of two cores. Every other role, among them those the
	// privilege tests create, still logs in with its password
	// (scram-sha-256), so a wrong password still fails as it would.
	containerHBA = "local all all trust\n" +
		"host all " + containerUser + " all trust\n" +
		"host all all all scram-sha-256\n"
	containerHBAPath = "/etc/pgtest-hba.conf"
)

const howToRun = "to run database tests, set PGTEST_DSN to the DSN of a PostgreSQL server " +
	"(a superuser or CREATEDB role, e.g. postgres://postgres:secret@127.0.0.1:5432/postgres), " +
	"or make a Docker daemon available (image from PGTEST_IMAGE, default " + defaultImage + "), " +
	"or install the PostgreSQL server binaries (Debian: apt-get install postgresql-15; or set PGTEST_BINDIR); " +
	"PGTEST_OPTIONAL=1 accepts the skips and passes, PGTEST_REQUIRED=1 fails each test instead of skipping"

// Server describes the PostgreSQL server shared by the tests of a test
// binary.
type Server struct {
	// AdminDSN connects as a superuser (or CREATEDB role) to the server's
	// maintenance database.
	AdminDSN string
	// Container is the testcontainers container running the server, or nil
	// when the server comes from PGTEST_DSN. Reliability tests may stop and
	// start it; with a local Docker daemon its published address (and so
	// AdminDSN and every DB.DSN) stays the same across a restart. After a
	// restart the server may take a moment before it accepts connections.
	Container *postgres.PostgresContainer
	// dataDir is the host directory, in memory, that holds the container's
	// data directory under PGTEST_TMPFS=1; removed with the container.
	dataDir string
	// local is the server started from the local binaries, when no
	// container could start; nil otherwise.
	local *localServer
	// Version is the server's version, as its server_version setting
	// says (such as "16.14").
	Version string
	// VersionNum is the server's version as a number, as its
	// server_version_num setting says (such as 160014); the major version
	// is VersionNum / 10000.
	VersionNum int
}

// DB is one isolated database created for one test.
type DB struct {
	// DSN connects to this database with the credentials of
	// Server.AdminDSN.
	DSN string
	// Name is the database's name.
	Name string
	// Pool is a connection pool to the database, closed when the test
	// ends.
	Pool *pgxpool.Pool
}

var (
	sharedMu   sync.Mutex
	sharedDone bool
	shared     *Server
	sharedErr  error

	dbCounter atomic.Int64
	// templates lists the templates' databases made on the shared
	// server, which Main drops.
	templatesMu sync.Mutex
	templates   []string
	// skipped counts the tests skipped for want of a server.
	skipped atomic.Int64
	runID   = randomHex(4)
)

// Main runs the tests of a package and then tears down the shared server
// (if this test binary started one); call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// When tests were skipped because no server could be had, it prints how
// many on standard error and, unless PGTEST_OPTIONAL=1, makes the result
// non-zero: "go test" shows a passing package as a single "ok" line, so a
// skip that passed would go unseen, and a failed package shows its output.
//
// When the tests pass, it then checks with go.uber.org/goleak that no
// goroutines were leaked, ignoring those that the Docker client and
// testcontainers-go legitimately leave behind. Leaks are printed and make
// the result non-zero. The result is the exit code to pass to os.Exit.
func Main(m *testing.M) int {
	code := m.Run()
	if n := skipped.Load(); n > 0 {
		tests := "tests"
		if n == 1 {
			tests = "test"
		}
		sharedMu.Lock()
		err := sharedErr
		sharedMu.Unlock()
		if os.Getenv(envOptional) == "1" {
			fmt.Fprintf(os.Stderr, "pgtest: %d database %s SKIPPED (%s=1): no PostgreSQL server: %v\n", n, tests, envOptional, err)
		} else {
			fmt.Fprintf(os.Stderr, "pgtest: %d database %s SKIPPED: no PostgreSQL server: %v;\n"+
				"pgtest: %s; or set %s=1 to accept the skips and pass\n", n, tests, err, howToRun, envOptional)
			if code == 0 {
				code = 1
			}
		}
	}
	if err := teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: tearing down the shared server: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(leakOptions()...); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: goroutines leaked by the tests: %v\n", err)
			code = 1
		}
	}
	return code
}

// leakOptions lists goroutines that may legitimately outlive the tests.
// With testcontainers-go v0.45 none were seen after the container is
// terminated (Terminate closes the Docker client); idle keep-alive
// connections of HTTP clients, such as the Docker client's connection to the
// daemon socket, are still ignored, since closing them is asynchronous.
func leakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	}
}

// New creates a fresh database with a unique name on the shared server and
// returns it with an open pool. When the test ends, the pool is closed and
// the database is dropped (WITH (FORCE), so open connections do not block
// it).
//
// When no server can be had, New skips the test with a message that says
// how to run it, or fails it when PGTEST_REQUIRED=1.
func New(t testing.TB) *DB {
	t.Helper()
	return newDB(t, SharedServer(t), "")
}

// newDB creates a database on srv, a copy of the database template when
// that is not empty, for the test t (see New).
func newDB(t testing.TB, srv *Server, template string) *DB {
	t.Helper()
	name := fmt.Sprintf("pgtest_%s_%d", runID, dbCounter.Add(1))
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		create += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := adminExec(ctx, srv.AdminDSN, create); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	db := &DB{Name: name}
	t.Cleanup(func() { dropDatabase(t, srv.AdminDSN, name) })

	dsn, err := withDatabase(srv.AdminDSN, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	db.DSN = dsn
	db.Pool = db.NewPool(t, nil)
	return db
}

// A Template is a database prepared once per test binary by a setup
// function (a schema's migrations, say), which tests copy with
// [Template.New] instead of each repeating the setup in a database of its
// own: CREATE DATABASE ... TEMPLATE copies it inside the server, for about
// what an empty database costs. Make one with [NewTemplate], as a
// package-level variable.
//
// What a copy does not carry over is what the setup must not rely on:
// the database's own settings (ALTER DATABASE ... SET), its grants, and
// the statistics' counters, which start at zero in each copy.
type Template struct {
	name  string
	setup func(ctx context.Context, dsn string) error

	mu  sync.Mutex
	srv *Server // the server the template was made on
	db  string  // the template's database, once made
	err error   // why it could not be made, once tried
}

// NewTemplate returns a template named name (letters, digits and
// underscores: part of its database's name) that setup prepares, on first
// use, in a database of its own, given its DSN. Setup must close every
// connection it opened before it returns: a database with a session on it
// cannot be copied.
func NewTemplate(name string, setup func(ctx context.Context, dsn string) error) *Template {
	return &Template{name: name, setup: setup}
}

// New returns a fresh database that is a copy of the template, made on
// the first call, with an open pool, as [New] does. A setup that failed
// fails every test that asks for a copy.
func (tm *Template) New(t testing.TB) *DB {
	t.Helper()
	srv := SharedServer(t)
	tm.mu.Lock()
	if tm.srv != srv {
		tm.srv = srv
		tm.db, tm.err = tm.make(srv)
	}
	db, err := tm.db, tm.err
	tm.mu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: template %s: %v", tm.name, err)
	}
	return newDB(t, srv, db)
}

// make creates the template's database on srv and runs the setup in it.
func (tm *Template) make(srv *Server) (string, error) {
	name := fmt.Sprintf("pgtest_%s_template_%s", runID, tm.name)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if err := adminExec(ctx, srv.AdminDSN, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	templatesMu.Lock()
	templates = append(templates, name)
	templatesMu.Unlock()
	dsn, err := withDatabase(srv.AdminDSN, name)
	if err != nil {
		return "", err
	}
	if err := tm.setup(ctx, dsn); err != nil {
		return "", fmt.Errorf("setup: %w", err)
	}
	return name, nil
}

// NewPool opens an extra pool to the database, for example with a custom
// DialFunc or MaxConns set by configure (which may be nil). The pool is
// closed when the test ends, before the database is dropped.
func (db *DB) NewPool(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatalf("pgtest: parse DSN: %v", err)
	}
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: open pool to %s: %v", db.Name, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// SharedServer returns the server shared by the tests of this test binary,
// starting a container on first use (see the package documentation). When
// no server can be had, it skips the test with a message that says how to
// run it, or fails it when PGTEST_REQUIRED=1. Every caller sees the same
// outcome: a failed start is not retried.
func SharedServer(t testing.TB) *Server {
	t.Helper()
	sharedMu.Lock()
	if !sharedDone {
		shared, sharedErr = startServer()
		sharedDone = true
		if sharedErr == nil && (shared.Container != nil || shared.local != nil) && fuzzCoordinator() {
			// The fuzzing workers, which this process starts later, inherit
			// its environment: they use this server instead of each starting
			// a container, which a worker killed at the end of fuzzing would
			// leave behind.
			sharedErr = os.Setenv(envDSN, shared.AdminDSN)
		}
	}
	srv, err := shared, sharedErr
	sharedMu.Unlock()

	if err != nil {
		var wrong *wrongServerError
		if errors.As(err, &wrong) {
			t.Fatalf("pgtest: %v", err)
		}
		if os.Getenv(envRequired) == "1" {
			t.Fatalf("pgtest: no PostgreSQL server (PGTEST_REQUIRED=1): %v", err)
		}
		skipped.Add(1)
		t.Skipf("pgtest: no PostgreSQL server: %v; %s", err, howToRun)
	}
	return srv
}

// fuzzCoordinator tells whether this test binary coordinates fuzzing
// (go test -fuzz): it then starts worker processes of its own binary.
func fuzzCoordinator() bool {
	fuzz, worker := flag.Lookup("test.fuzz"), flag.Lookup("test.fuzzworker")
	return fuzz != nil && fuzz.Value.String() != "" && (worker == nil || worker.Value.String() != "true")
}

// startServer finds or starts the shared server and checks its version.
func startServer() (*Server, error) {
	wantMajor, err := parseMajor(os.Getenv(envMajor))
	if err != nil {
		return nil, &wrongServerError{err}
	}
	var srv *Server
	var from string
	if dsn := os.Getenv(envDSN); dsn != "" {
		srv, from = &Server{AdminDSN: dsn}, "the server of PGTEST_DSN at "+describeDSN(dsn)
	} else if srv, err = startContainer(); err == nil {
		from = fmt.Sprintf("image %s at %s (container %.12s)", imageName(), describeDSN(srv.AdminDSN), srv.Container.GetContainerID())
		if srv.dataDir != "" {
			from += ", data directory in memory (" + envTmpfs + "=1)"
		}
	} else {
		// No container: the server binaries of this machine, if it has
		// them, as a developer's laptop or a CI image with PostgreSQL
		// installed does.
		local, lerr := startLocal(wantMajor)
		if lerr != nil {
			return nil, fmt.Errorf("%w; and no local server: %v", err, lerr)
		}
		srv = local
		from = fmt.Sprintf("the local server binaries in %s at %s (no container: %s)", local.local.bin, describeDSN(srv.AdminDSN), firstLine(err.Error()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	err = func() error {
		conn, err := pgx.Connect(ctx, srv.AdminDSN)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		if srv.AdminDSN, err = pinTLS(srv.AdminDSN, conn); err != nil {
			return err
		}
		return conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('server_version'), pg_catalog.current_setting('server_version_num')::int").
			Scan(&srv.Version, &srv.VersionNum)
	}()
	if err == nil {
		err = checkVersion(srv.Version, srv.VersionNum, wantMajor)
	}
	if err != nil {
		if srv.Container != nil || srv.local != nil {
			_ = srv.terminate(context.Background())
		}
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	fmt.Fprintf(os.Stderr, "pgtest: PostgreSQL %s from %s\n", srv.Version, from)
	return srv, nil
}

// wrongServerError is a server of a version the tests must not run on, or a
// bad PGTEST_SERVER_MAJOR: it fails the tests even without PGTEST_REQUIRED.
type wrongServerError struct{ err error }

func (e *wrongServerError) Error() string { return e.err.Error() }
func (e *wrongServerError) Unwrap() error { return e.err }

// parseMajor parses PGTEST_SERVER_MAJOR: "" for any version, or a major
// version of 13 or later.
func parseMajor(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < minVersionNum/10000 {
		return 0, fmt.Errorf("%s=%q: want a major version number, %d or later", envMajor, s, minVersionNum/10000)
	}
	return n, nil
}

// checkVersion checks a server's version (server_version and
// server_version_num) against the oldest supported one and, unless
// wantMajor is 0, against the wanted major version.
func checkVersion(version string, num, wantMajor int) error {
	switch {
	case num < minVersionNum:
		return &wrongServerError{fmt.Errorf("PostgreSQL %s is older than %d, the oldest release runclaim is tested on", version, minVersionNum/10000)}
	case wantMajor != 0 && num/10000 != wantMajor:
		return &wrongServerError{fmt.Errorf("PostgreSQL %s, but %s=%d", version, envMajor, wantMajor)}
	}
	return nil
}

// startContainer starts the shared server in a container.
func startContainer() (*Server, error) {
	img := imageName()
	setenvIfUnset("TESTCONTAINERS_RYUK_DISABLED", "true")
	// local: publish the port on 127.0.0.1 at a fixed host port, so that it
	// survives a restart of the container.
	local := localDaemon()
	if local {
		setenvIfUnset("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
		switch os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") {
		case "127.0.0.1", "localhost":
		default:
			local = false // The user knows better where ports are reachable.
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()

	// PGTEST_TMPFS=1: the data directory lives in memory, in a host
	// directory under /dev/shm bind-mounted into the container, so that it
	// survives a restart of the container (a tmpfs mount of Docker's own
	// would not).
	var dataDir string
	if os.Getenv(envTmpfs) == "1" {
		if !local {
			return nil, fmt.Errorf("%s=1 needs a local Docker daemon (it bind-mounts a directory of this machine)", envTmpfs)
		}
		var err error
		if dataDir, err = os.MkdirTemp("/dev/shm", dataDirPrefix()); err != nil {
			return nil, fmt.Errorf("%s=1: a directory in memory for the data directory: %w", envTmpfs, err)
		}
	}
	dataEnv := map[string]string{}
	if dataDir != "" {
		dataEnv["PGDATA"] = containerDataDir
	}
	removeData := func() {
		if dataDir != "" {
			removeDataDir(dataDir)
		}
	}

	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		hostPort := "0"
		var hostIP netip.Addr
		if local {
			port, err := FreePort()
			if err != nil {
				return nil, err
			}
			hostPort = strconv.Itoa(port)
			hostIP = netip.MustParseAddr("127.0.0.1")
		}
		ctr, err := postgres.Run(ctx, img,
			postgres.WithUsername(containerUser),
			postgres.WithPassword(containerPassword),
			postgres.WithDatabase(containerDB),
			// Replaces the module's default command, which turns fsync off.
			testcontainers.WithCmd("postgres", "-c", "max_connections=300", "-c", "hba_file="+containerHBAPath),
			testcontainers.WithFiles(testcontainers.ContainerFile{
				Reader:            strings.NewReader(containerHBA),
				ContainerFilePath: containerHBAPath,
				FileMode:          0o644,
			}),
			testcontainers.WithLabels(containerLabels()),
			testcontainers.WithEnv(dataEnv),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				if dataDir != "" {
					hc.Binds = append(hc.Binds, dataDir+":"+containerDataDir)
				}
				hc.PortBindings = network.PortMap{
					network.MustParsePort("5432/tcp"): {{HostIP: hostIP, HostPort: hostPort}},
				}
			}),
			postgres.BasicWaitStrategies(),
		)
		if err != nil {
			if ctr != nil {
				_ = ctr.Terminate(context.Background())
			}
			lastErr = err
			if local && isPortInUse(err) {
				continue // Someone took the port in between; pick another.
			}
			removeData()
			return nil, fmt.Errorf("start container from image %s: %w", img, err)
		}
		dsn, err := ctr.ConnectionString(ctx, "sslmode=disable")
		if err != nil {
			_ = ctr.Terminate(context.Background())
			removeData()
			return nil, fmt.Errorf("container connection string: %w", err)
		}
		if err := waitReady(ctx, dsn); err != nil {
			_ = ctr.Terminate(context.Background())
			removeData()
			return nil, fmt.Errorf("container from image %s: %w", img, err)
		}
		return &Server{AdminDSN: dsn, Container: ctr, dataDir: dataDir}, nil
	}
	removeData()
	return nil, fmt.Errorf("start container from image %s: %w", img, lastErr)
}

// imageName is the image the container is started from.
func imageName() string {
	if img := os.Getenv(envImage); img != "" {
		return img
	}
	return defaultImage
}

// teardown removes the shared container, if one was started.
func teardown() error {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil {
		return nil
	}
	if shared.Container == nil && shared.local == nil {
		// A server of PGTEST_DSN outlives the tests: drop the templates
		// made on it.
		return dropTemplates(shared.AdminDSN)
	}
	srv := shared
	shared, sharedErr = nil, errors.New("the shared server was torn down")
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	return srv.terminate(ctx)
}

// dropTemplates drops the templates' databases made on the server of
// adminDSN.
func dropTemplates(adminDSN string) error {
	templatesMu.Lock()
	defer templatesMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	var errs []error
	for _, name := range templates {
		if err := adminExec(ctx, adminDSN, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			errs = append(errs, fmt.Errorf("drop template %s: %w", name, err))
		}
	}
	templates = nil
	return errors.Join(errs...)
}

// containerDataDir is the data directory inside the container (PGDATA)
// under PGTEST_TMPFS=1: one path for every image, mounted over.
const containerDataDir = "/var/lib/postgresql/pgtest-data"

// dataDirPrefix is the name prefix of a data directory of PGTEST_TMPFS=1:
// "pgtest-data-", then PGTEST_RUN and a "-" if that is set and fit for a
// file name, so that a CI run can find what a killed test binary of its own
// left behind.
func dataDirPrefix() string {
	prefix := "pgtest-data-"
	run := os.Getenv("PGTEST_RUN")
	if run == "" || len(run) > 64 {
		return prefix
	}
	for _, r := range run {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return prefix
		}
	}
	return prefix + run + "-"
}

// terminate removes the server's container, and its data directory in
// memory if it has one.
func (srv *Server) terminate(ctx context.Context) error {
	if srv.local != nil {
		srv.local.stop()
		return nil
	}
	err := srv.Container.Terminate(ctx)
	if srv.dataDir != "" {
		removeDataDir(srv.dataDir)
	}
	return err
}

// removeDataDir removes a data directory of PGTEST_TMPFS=1, or says on
// standard error where it was left (the server's files belong to the
// container's postgres user, which a user other than root may not remove).
func removeDataDir(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: could not remove the data directory %s (in memory): %v\n", dir, err)
	}
}

// waitReady waits until the server accepts connections; the wait
// strategies only prove that the port is open.
func waitReady(ctx context.Context, dsn string) error {
	var err error
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = adminExec(attemptCtx, dsn, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server not ready: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// adminExec runs sql on a connection of its own.
func adminExec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// dropDatabase drops a test's database at cleanup. It retries for a while
// so that a test which restarted the server does not make the drop fail.
func dropDatabase(t testing.TB, adminDSN, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	sql := "DROP DATABASE IF EXISTS " + pgx.Identifier{name}.Sanitize() + " WITH (FORCE)"
	for {
		err := adminExec(ctx, adminDSN, sql)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("pgtest: drop database %s: %v", name, err)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// withDatabase returns dsn with its database replaced by name.
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse DSN: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	// Keyword/value form: a later keyword overrides an earlier one.
	return strings.TrimSpace(dsn) + " dbname=" + name, nil
}

// withParam returns dsn with the connection parameter key set to value (a
// plain word, which needs no quoting).
func withParam(dsn, key, value string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse DSN: %w", err)
		}
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return strings.TrimSpace(dsn) + " " + key + "=" + value, nil
}

// pinTLS returns dsn with the TLS choice that conn, connected with dsn,
// made: with an sslmode that tries TLS and then plain TCP or the other way
// round (pgx's default "prefer", or "allow"), it adds sslmode=disable if
// conn is plain and sslmode=require if conn is encrypted; any other dsn is
// returned as it is. Tests that dial a single way, clearing pgx's
// Fallbacks (through a proxy, or to count the bytes on the wire), then
// reach a server without TLS with the DSN CONTRIBUTING.md shows, which names no
// sslmode.
func pinTLS(dsn string, conn *pgx.Conn) (string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	if len(cfg.Fallbacks) == 0 {
		return dsn, nil
	}
	plainTried, tlsTried := cfg.TLSConfig == nil, cfg.TLSConfig != nil
	for _, fb := range cfg.Fallbacks {
		if fb.TLSConfig != nil {
			tlsTried = true
		} else {
			plainTried = true
		}
	}
	if !plainTried || !tlsTried {
		return dsn, nil // Several hosts, one TLS choice: nothing to pin.
	}
	mode := "disable"
	if _, ok := conn.PgConn().Conn().(*tls.Conn); ok {
		mode = "require"
	}
	return withParam(dsn, "sslmode", mode)
}

// describeDSN returns host:port of dsn, without credentials.
func describeDSN(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// localDaemon reports whether the Docker daemon is on this machine.
func localDaemon() bool {
	h := os.Getenv("DOCKER_HOST")
	return h == "" || strings.HasPrefix(h, "unix://")
}

func setenvIfUnset(key, value string) {
	if _, ok := os.LookupEnv(key); !ok {
		os.Setenv(key, value)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func isPortInUse(err error) bool {
	s := err.Error()
	return strings.Contains(s, "port is already allocated") || strings.Contains(s, "address already in use")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// containerLabels are the labels of a container this package starts.
func containerLabels() map[string]string {
	labels := map[string]string{containerLabel: "1"}
	if run := os.Getenv("PGTEST_RUN"); run != "" {
		labels[containerLabel+".run"] = run
	}
	return labels
}

// firstLine is s up to its first line break, cut to 200 bytes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// Most tests call run in-process with an environment of their own (runCLI),
// and run in parallel; those that set variables of the process's
// environment (t.Setenv, then runInEnv) or change the package's variables
// do not. exec_process_test.go runs the built binary.

func TestMain(m *testing.M) {
	startBuild()
	code := pgtest.Main(m)
	removeBinary()
	os.Exit(code)
}

// testTimeout bounds every command a test runs.
const testTimeout = 20 * time.Second

type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs "runclaim args..." in-process against db (none if nil), with
// stdin as standard input, in an environment of its own (see runVars).
func runCLI(t *testing.T, db *pgtest.DB, stdin io.Reader, args ...string) result {
	t.Helper()
	vars := map[string]string{}
	if db != nil {
		vars[envDatabaseURL] = db.DSN
	}
	return runVars(t, vars, stdin, args...)
}

// runVars runs "runclaim args..." in-process with the variables vars set
// and runclaim's other settings (DATABASE_URL, RUNCLAIM_TABLE,
// RUNCLAIM_NAMESPACE, RUNCLAIM_SYNCHRONOUS_COMMIT) unset, in the command's
// own environment: the caller's settings are kept out, and no variable of
// the process is set, so a test that uses it may run in parallel.
func runVars(t *testing.T, vars map[string]string, stdin io.Reader, args ...string) result {
	t.Helper()
	getenv := func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		if slices.Contains(dbEnvVars, k) {
			return ""
		}
		return os.Getenv(k)
	}
	return runWith(t, getenv, stdin, args...)
}

// runInEnv runs "runclaim args..." in-process in the environment as the
// test has set it.
func runInEnv(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	return runWith(t, os.Getenv, stdin, args...)
}

// runWith runs "runclaim args..." in-process with the environment getenv
// reads.
func runWith(t *testing.T, getenv func(string) string, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := runEnv(ctx, args, stdin, &stdout, &stderr, getenv)
	return result{code, stdout.String(), stderr.String()}
}

// clearEnv keeps the caller's environment out of a test.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{envDatabaseURL, envTable, envNamespace, envSynchronousCommit} {
		t.Setenv(k, "")
	}
}

// mustRun is runCLI that fails the test unless the exit code is want.
func mustRun(t *testing.T, db *pgtest.DB, want int, args ...string) result {
	t.Helper()
	r := runCLI(t, db, nil, args...)
	if r.code != want {
		t.Fatalf("runclaim %s: exit code %d, want %d\nstdout:\n%s\nstderr:\n%s",
			strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}

// setup gives the test a database with the runs table migrated (a copy of
// a database migrated once: the CLI's migrate has tests of its own), and a
// store on it for the test's own claims and checks.
func setup(t *testing.T) (*pgtest.DB, *runclaim.PostgresStore) {
	t.Helper()
	db := sharedtest.MigratedDB(t)
	return db, sharedtest.Store(t, db.Pool)
}

// hold claims source for the test with a long lease, as another host would.
func hold(t *testing.T, store *runclaim.PostgresStore, source, owner string) *runclaim.Run {
	t.Helper()
	c, err := runclaim.New(store, runclaim.WithLease(time.Hour), runclaim.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Claim(t.Context(), source)
	if err != nil {
		t.Fatalf("claim %q: %v", source, err)
	}
	return run
}

// history returns source's runs, newest first, read by the library.
func history(t *testing.T, store *runclaim.PostgresStore, source string) []runclaim.RunRecord {
	t.Helper()
	runs, err := store.History(t.Context(), source, 100)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// decodeObjects decodes a JSON array of objects and checks that each has
// exactly the keys want.
func decodeObjects(t *testing.T, out string, want ...string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&objs); err != nil {
		t.Fatalf("decode JSON array: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON document:\n%s", out)
	}
	if objs == nil {
		t.Fatalf("JSON is null, want an array:\n%s", out)
	}
	sort.Strings(want)
	for i, o := range objs {
		keys := make([]string, 0, len(o))
		for k := range o {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !slices.Equal(keys, want) {
			t.Errorf("object %d has keys %v, want %v", i, keys, want)
		}
	}
	return objs
}

// decodeObject decodes one JSON object and checks its keys.
func decodeObject(t *testing.T, out string, want ...string) map[string]any {
	t.Helper()
	objs := decodeObjects(t, "["+out+"]", want...)
	if len(objs) != 1 {
		t.Fatalf("want one object:\n%s", out)
	}
	return objs[0]
}

// num reads a JSON number.
func num(t *testing.T, v any) float64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v (%T) is not a number", v, v)
	}
	f, err := n.Float64()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// rfc3339 reads a JSON time.
func rfc3339(t *testing.T, v any) time.Time {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("%v (%T) is not a string", v, v)
	}
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	if tm.Location() != time.UTC {
		t.Errorf("time %q is not in UTC", s)
	}
	return tm
}

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestDatabaseURLFlag: --database-url names the database, in place of
// $DATABASE_URL and over it, and the help never prints a URL's password.
func TestDatabaseURLFlag(t *testing.T) {
	db, _ := setup(t)
	clearEnv(t)
	if r := runInEnv(t, nil, "--database-url", db.DSN, "status"); r.code != exitOK {
		t.Errorf("status with --database-url: %+v", r)
	}
	t.Setenv(envDatabaseURL, "postgres://nobody:secret-in-env@127.0.0.1:1/none")
	if r := runInEnv(t, nil, "status", "--database-url", db.DSN); r.code != exitOK {
		t.Errorf("status with --database-url over a wrong $%s: %+v", envDatabaseURL, r)
	}
	if r := runInEnv(t, nil, "--help"); r.code != exitOK || !strings.Contains(r.stdout, "--database-url") || strings.Contains(r.stdout, "secret-in-env") {
		t.Errorf("--help: exit %d; want it to list --database-url and print no password", r.code)
	}
}

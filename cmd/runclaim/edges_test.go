package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestVersion: --version prints one line with the module version and the
// Go version, and exits 0 without connecting.
func TestVersion(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, nil, "--version")
	if r.code != exitOK || r.stderr != "" || !strings.HasPrefix(r.stdout, "runclaim ") ||
		!strings.HasSuffix(r.stdout, " "+runtime.Version()+"\n") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("--version: %+v", r)
	}
}

// TestFormatVersion: the revision, its time and a modified tree are shown
// when the build info has them.
func TestFormatVersion(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/runclaim/runclaim", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-01T15:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := formatVersion(info), "runclaim v1.2.3 (revision 0123abcd, 2026-12-01T15:04:05Z, modified) go1.26.0"; got != want {
		t.Errorf("formatVersion = %q, want %q", got, want)
	}
	info = &debug.BuildInfo{GoVersion: "go1.26.0"}
	if got, want := formatVersion(info), "runclaim (devel) go1.26.0"; got != want {
		t.Errorf("formatVersion without VCS = %q, want %q", got, want)
	}
}

// TestJSONExecRefused: exec has no output of its own to print as JSON, so
// --json before its name is a usage error, as it is after it.
func TestJSONExecRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--json", "exec", "--source", "x", "--", "true"},
		{"exec", "--json", "--source", "x", "--", "true"},
	} {
		r := runCLI(t, nil, nil, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "-json") {
			t.Errorf("%q: %+v, want a usage error naming --json", args, r)
		}
	}
}

// closedDSN is a DSN on which nothing listens.
func closedDSN(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "postgres://u:p@" + l.Addr().String() + "/db?connect_timeout=5"
}

// TestJSONErrors: with --json, a usage error and a database error are
// each one JSON object on stderr, naming the command.
func TestJSONErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--json", "prune", "--older-than", "soon"}, exitUsage, "--older-than: invalid duration"},
		{[]string{"history", "--json"}, exitUsage, "give a source"},
		{[]string{"--json", "status"}, exitError, "failed to connect"},
		{[]string{"prune", "--older-than", "30d", "--json"}, exitError, "failed to connect"},
	} {
		clearEnv(t)
		t.Setenv(envDatabaseURL, closedDSN(t))
		r := runInEnv(t, nil, tc.args...)
		var obj struct{ Command, Error string }
		cmd := tc.args[0]
		if cmd == "--json" {
			cmd = tc.args[1]
		}
		if err := json.Unmarshal([]byte(r.stderr), &obj); r.code != tc.code || err != nil || obj.Command != cmd || !strings.Contains(obj.Error, tc.err) {
			t.Errorf("%q: %+v (%v), want exit %d and a JSON error with %q", tc.args, r, err, tc.code, tc.err)
		}
	}
}

// TestNoConnectionSettings: with neither DATABASE_URL nor a PG* variable
// set, a failure to connect says that nothing was set (and not only, as
// pgx does, that role "root" does not exist); with PGHOST set it does not.
func TestNoConnectionSettings(t *testing.T) {
	clearEnv(t)
	for _, k := range pgEnv {
		t.Setenv(k, "")
	}
	r := runInEnv(t, nil, "status")
	if r.code != exitError || !strings.Contains(r.stderr, "neither DATABASE_URL nor a PG* variable") {
		t.Errorf("status without settings: %+v, want exit 1 saying that neither is set", r)
	}
	u, err := url.Parse(closedDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGHOST", u.Hostname())
	t.Setenv("PGPORT", u.Port())
	t.Setenv("PGCONNECT_TIMEOUT", "5")
	r = runInEnv(t, nil, "status")
	if r.code != exitError || strings.Contains(r.stderr, "neither") || !strings.Contains(r.stderr, "failed to connect") {
		t.Errorf("status with PGHOST: %+v, want the connection error alone", r)
	}
}

// TestCauseFirst: of pgx's attempt lines, the refused TLS goes last.
func TestCauseFirst(t *testing.T) {
	t.Parallel()
	in := "claim \"x\": failed to connect to `user=u database=d`:\n" +
		"\t127.0.0.1:5432 (127.0.0.1): tls error: server refused TLS connection\n" +
		"\t127.0.0.1:5432 (127.0.0.1): failed SASL auth: FATAL: password authentication failed for user \"u\" (SQLSTATE 28P01)"
	want := "claim \"x\": failed to connect to `user=u database=d`:\n" +
		"\t127.0.0.1:5432 (127.0.0.1): failed SASL auth: FATAL: password authentication failed for user \"u\" (SQLSTATE 28P01)\n" +
		"\t127.0.0.1:5432 (127.0.0.1): tls error: server refused TLS connection"
	if got := causeFirst(in); got != want {
		t.Errorf("causeFirst:\n%s\nwant:\n%s", got, want)
	}
	for _, same := range []string{"one line", "a:\n\tb", "a:\n\tserver refused TLS connection\n\tserver refused TLS connection"} {
		if got := causeFirst(same); got != same {
			t.Errorf("causeFirst(%q) = %q, want it unchanged", same, got)
		}
	}
}

// TestWrongPasswordCauseFirst: with a wrong password and pgx's default
// sslmode (TLS first, then plain TCP) on a server without TLS, the
// password failure is the first line after the command's, before the
// refused TLS.
func TestWrongPasswordCauseFirst(t *testing.T) {
	u := wrongPassword(t, pgtest.New(t))
	q := u.Query()
	q.Del("sslmode")
	u.RawQuery = q.Encode()
	clearEnv(t)
	t.Setenv(envDatabaseURL, u.String())
	r := runInEnv(t, nil, "status")
	lines := strings.Split(r.stderr, "\n")
	if r.code != exitError || len(lines) < 2 || !strings.Contains(lines[0]+lines[1], "password authentication failed") {
		t.Errorf("status with a wrong password: %+v, want the password failure first", r)
	}
}

// TestPruneAsks: a prune under an hour asks, as release does; no answer
// or "n" deletes nothing, "y" and --yes delete, and without a terminal
// and without --yes it is refused.
func TestPruneAsks(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	for range 3 {
		mustRun(t, db, 0, "exec", "--source", "a", "--", "true")
	}
	if r := runCLI(t, db, nil, "prune", "--older-than", "0"); r.code != exitUsage || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("prune --older-than 0 without a terminal: %+v, want a usage error naming --yes", r)
	}
	for _, answer := range []string{"", "n\n", "no\n"} {
		r := runCLI(t, db, strings.NewReader(answer), "prune", "--older-than", "0")
		if r.code != exitError || !strings.Contains(r.stderr, "[y/N]") || !strings.Contains(r.stderr, "nothing deleted") {
			t.Errorf("prune answered %q: %+v, want a question and nothing deleted", answer, r)
		}
	}
	if got := history(t, store, "a"); len(got) != 3 {
		t.Fatalf("%d runs left after no answers, want 3", len(got))
	}
	r := runCLI(t, db, strings.NewReader("y\n"), "prune", "--older-than", "0")
	if r.code != exitOK || !strings.Contains(r.stdout, "deleted 2 runs") {
		t.Errorf("prune answered y: %+v", r)
	}
	mustRun(t, db, 0, "exec", "--source", "a", "--", "true")
	if r := mustRun(t, db, exitOK, "prune", "--older-than", "0", "--yes"); !strings.Contains(r.stdout, "deleted 1 runs") || strings.Contains(r.stderr, "[y/N]") {
		t.Errorf("prune --yes: %+v", r)
	}
	// An hour or more does not ask: a crontab's prune runs unattended.
	mustRun(t, db, exitOK, "prune", "--older-than", "1h")
}

// TestMigrateHelpVersion: the JSON examples of 'migrate --help' name this
// release's schema version, so that a new schema step updates them.
func TestMigrateHelpVersion(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, nil, "migrate", "--help")
	v := runclaim.LatestSchemaVersion
	for _, want := range []string{fmt.Sprintf(`"version": %d, "latest": %d}`, v, v), fmt.Sprintf(`"latest": %d, "current"`, v)} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Errorf("migrate --help lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestUsageErrorsSayRunclaimOnce: a usage error whose text comes from the
// library does not repeat its "runclaim: " prefix after the command's.
func TestUsageErrorsSayRunclaimOnce(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"status", ""},
		{"history", "bad\x00source"},
		{"release", "--source", "tab\tsource", "--yes"},
		{"exec", "--source", "s", "--lease", "1ms", "--", "true"},
	} {
		r := runCLI(t, nil, nil, args...)
		first, _, _ := strings.Cut(r.stderr, "\n")
		if r.code != exitUsage || doubledPrefix(first) != "" || strings.Contains(first, ": runclaim: ") {
			t.Errorf("%q: %+v, want a usage error that says runclaim once", args, r)
		}
	}
}

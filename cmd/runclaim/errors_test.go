package main

import (
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/runclaim/runclaim/internal/pgtest"
)

// doubledPrefix returns the first place in line where a prefix is
// repeated ("prune: prune: ...", "runclaim prune: prune: ...",
// "runclaim: runclaim: ..."), or "".
func doubledPrefix(line string) string {
	segs := strings.Split(line, ": ")
	for i := 0; i+1 < len(segs); i++ {
		a, b := segs[i], segs[i+1]
		if b != "" && (a == b || strings.HasSuffix(a, " "+b)) {
			return a + ": " + b
		}
	}
	return ""
}

func TestDoubledPrefix(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]bool{
		"runclaim prune: prune: canceled":               true,
		"runclaim: runclaim: x":                         true,
		"prune: prune: x":                               true,
		"runclaim prune: deleted 3 runs before":         false,
		`runclaim history: history of "x": boom`:        false,
		"runclaim exec: claim \"x\": failed to connect": false,
		"runclaim status: list running runs: refused":   false,
	} {
		if got := doubledPrefix(line) != ""; got != want {
			t.Errorf("doubledPrefix(%q) = %q, want found = %v", line, doubledPrefix(line), want)
		}
	}
}

// TestNoDoubledPrefixes runs every command into the errors an operator
// meets (no runs table, a server that refuses the password, nothing
// listening, a table Postgres refuses to create) and checks that no line
// of what it prints repeats a prefix, as "runclaim prune: prune: ..." did.
func TestNoDoubledPrefixes(t *testing.T) {
	db := pgtest.New(t) // no runs table
	wrongPassword := wrongPassword(t, db)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "postgres://u:p@" + l.Addr().String() + "/db?connect_timeout=5"
	l.Close()

	commandLines := [][]string{
		{"status"},
		{"status", "nightly"},
		{"history", "nightly"},
		{"release", "--source", "nightly", "--yes"},
		{"release", "42", "--yes"},
		{"prune", "--older-than", "30d"},
		{"exec", "--source", "nightly", "--", "true"},
		{"--table", "pg_reserved.runs", "migrate"},
		{"migrate"}, // last: it creates the table
	}
	for name, dsn := range map[string]string{
		"no table":        db.DSN,
		"wrong password":  wrongPassword.String(),
		"nothing listens": closed,
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			failures := 0
			for _, args := range commandLines {
				clearEnv(t)
				t.Setenv(envDatabaseURL, dsn)
				r := runInEnv(t, nil, args...)
				if r.code == exitOK {
					continue // migrate creates the table
				}
				failures++
				for _, line := range strings.Split(r.stderr, "\n") {
					if d := doubledPrefix(line); d != "" {
						t.Errorf("%q: doubled prefix %q in:\n%s", args, d, r.stderr)
					}
				}
			}
			if failures < len(commandLines)-1 {
				t.Errorf("only %d of %d commands failed: the test does not see their errors", failures, len(commandLines))
			}
		})
	}
}

// TestServerErrorsExplained: the server's errors that an operator's
// setting causes are told with what to fix, without the steps of pgx's
// own ("rewrite query failed: ...") in the way, in text and in JSON.
func TestServerErrorsExplained(t *testing.T) {
	db := pgtest.New(t) // no runs table
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	wrongPassword, wrongDB := wrongPassword(t, db), *u
	wrongDB.Path = "/no_such_database"
	for _, tc := range []struct {
		dsn  string
		args []string
		hint string
	}{
		{db.DSN, []string{"exec", "--source", "x", "--", "true"}, "run 'runclaim migrate' first"},
		{db.DSN, []string{"status"}, "run 'runclaim migrate' first"},
		{wrongPassword.String(), []string{"status"}, "check the password"},
		{wrongDB.String(), []string{"history", "x"}, "check the database name"},
		{closedDSN(t), []string{"status"}, "nothing listens there"},
	} {
		clearEnv(t)
		t.Setenv(envDatabaseURL, tc.dsn)
		r := runInEnv(t, nil, tc.args...)
		if r.code == exitOK || r.code == exitUsage || !strings.Contains(r.stderr, "(hint: "+tc.hint) || strings.Contains(r.stderr, "rewrite query failed") {
			t.Errorf("%q: exit %d, stderr %q; want a failure with the hint %q, and no pgx step", tc.args, r.code, r.stderr, tc.hint)
		}
		if tc.args[0] == "exec" {
			continue // exec prints no JSON
		}
		r = runInEnv(t, nil, append(tc.args, "--json")...)
		if _, msg, hint := jsonErrorOf(t, r.stderr); !strings.HasPrefix(hint, tc.hint) || strings.Contains(msg, "rewrite query failed") {
			t.Errorf("%q --json: error %q, hint %q; want the hint %q", tc.args, msg, hint, tc.hint)
		}
	}
}

func TestDescribeErrorDropsPgxSteps(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`claim "x": rewrite query failed: ERROR: boom (SQLSTATE 42P01)`:     `claim "x": ERROR: boom (SQLSTATE 42P01)`,
		`history of "x": failed to encode args[1]: unable to encode "\xff"`: `history of "x": unable to encode "\xff"`,
		`status: list running runs: ERROR: x (SQLSTATE 42501)`:              `list running runs: ERROR: x (SQLSTATE 42501)`,
	} {
		if got := describeError("status", errors.New(in)); got != want {
			t.Errorf("describeError(%q) = %q, want %q", in, got, want)
		}
	}
}

package main

import (
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
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatalf("DSN is not a URL: %v", err)
	}
	wrongPassword := *u
	wrongPassword.User = url.UserPassword(u.User.Username(), "wrong-password")
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

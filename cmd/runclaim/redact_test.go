package main

import (
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestNoSecretsInErrors checks that no command prints the password or the
// DSN, whether the connection string does not parse, the server refuses
// the password, or nothing listens.
func TestNoSecretsInErrors(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	db := pgtest.New(t)
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Skipf("DSN is not a URL: %v", err)
	}
	wrongPassword := *u
	wrongPassword.User = url.UserPassword(u.User.Username(), secret)

	// A port where nothing listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := l.Addr().String()
	l.Close()

	for name, dsn := range map[string]string{
		"wrong password":           wrongPassword.String(),
		"nothing listens":          "postgres://user:" + secret + "@" + closedPort + "/db?connect_timeout=5",
		"bad port":                 "postgres://user:" + secret + "@127.0.0.1:notaport/db",
		"bad URL escape":           "postgres://user:" + secret + "%zz@127.0.0.1/db",
		"bad sslmode":              "postgres://user:" + secret + "@127.0.0.1/db?sslmode=sometimes",
		"password in query":        "postgres://127.0.0.1/db?sslmode=sometimes&password=" + secret,
		"key=value":                "host=127.0.0.1 port=notaport user=u password=" + secret,
		"key=value quoted":         "host=127.0.0.1 port=x password='" + secret + " x'",
		"key=value bad sslmode":    "host=127.0.0.1 password=" + secret + " sslmode=sometimes",
		"URL with @ in password":   "postgres://user:" + secret + "@x@127.0.0.1:notaport/db",
		"URL-escaped password":     "postgres://user:" + url.PathEscape(secret+"/?#") + "@127.0.0.1:notaport/db",
		"URL, escaped, wrong pass": strings.Replace(wrongPassword.String(), secret, url.PathEscape(secret+"/"), 1),
	} {
		t.Run(name, func(t *testing.T) {
			for _, args := range [][]string{{"status"}, {"exec", "--source", "x", "--", "true"}, {"--database-url", dsn, "status"}} {
				clearEnv(t)
				if args[0] != "--database-url" {
					t.Setenv(envDatabaseURL, dsn)
				}
				r := runInEnv(t, nil, args...)
				want := exitError
				if args[0] == "exec" {
					want = exitClaimFailed // exec's own code for "nothing was run"
				}
				if r.code != want {
					t.Errorf("%v: exit code %d, want %d; stderr:\n%s", args, r.code, want, r.stderr)
				}
				if args[0] == "--database-url" {
					args = args[2:] // for the messages: the URL is the secret
				}
				if strings.Contains(r.stderr+r.stdout, secret) || strings.Contains(r.stderr, dsn) {
					t.Errorf("%v: the password is printed:\n%s", args, r.stderr)
				}
				t.Logf("%v: %s", args, r.stderr)
			}
		})
	}

	t.Run("PGPASSWORD", func(t *testing.T) {
		clearEnv(t)
		t.Setenv("PGHOST", "127.0.0.1")
		t.Setenv("PGPORT", "notaport")
		t.Setenv("PGPASSWORD", secret)
		r := runInEnv(t, nil, "status")
		if r.code != exitError || strings.Contains(r.stderr, secret) {
			t.Errorf("%+v", r)
		}
	})
}

// TestPasswordsIn: the passwords of a connection string are found in URL
// and key=value form, escaped or not, even where it does not parse.
func TestPasswordsIn(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"postgres://u:pw1@h/db":                    "pw1",
		"postgres://u:p%40ss@h:bad/db":             "p@ss",
		"postgres://u:p@ss@h/db":                   "p@ss",
		"host=h password=xyz port=1":               "xyz",
		"host=h password='a b' port=1":             "a b",
		"postgres://h/db?password=q1w2&sslmode=no": "q1w2",
	} {
		found := false
		for _, p := range passwordsIn(dsn) {
			if p == want {
				found = true
			}
		}
		if !found {
			t.Errorf("passwordsIn(%q) = %q, lacks %q", dsn, passwordsIn(dsn), want)
		}
	}
}

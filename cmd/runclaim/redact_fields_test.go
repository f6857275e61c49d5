package main

import (
	"net/url"
	"strings"
	"testing"
)

// TestRedactFields: redaction takes the password out of the places a
// connection string puts it (a URL's user info, a password= field, the
// connection string itself) and leaves every other occurrence of the same
// letters alone: a source, a user name, a word in a message.
func TestRedactFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, dsn, msg, want string
	}{
		{"a source that contains the password",
			"postgres://app:stgr@db.example:5432/prod",
			`no running run of "my stgr job"`,
			`no running run of "my stgr job"`},
		{"a password equal to the user name",
			"postgres://app:app@db.example/prod",
			`failed to connect to user=app database=prod: password authentication failed for user "app"`,
			`failed to connect to user=app database=prod: password authentication failed for user "app"`},
		{"the DSN in a message",
			"postgres://app:stgr@db.example:5432/prod",
			`cannot parse postgres://app:stgr@db.example:5432/prod: my stgr job`,
			`cannot parse postgres://app:xxxxx@db.example:5432/prod: my stgr job`},
		{"a DSN whose password the fields do not delimit",
			"postgres://app:p w@db.example/prod",
			`parse "postgres://app:p w@db.example/prod": invalid character " " in host name`,
			`parse "xxxxx": invalid character " " in host name`},
		{"another URL in a message",
			"",
			`parse "postgres://u:hunter2@h/db": bad; hunter2 stays`,
			`parse "postgres://u:xxxxx@h/db": bad; hunter2 stays`},
		{"a URL password with @ and /",
			"",
			`parse "postgres://u:p@ss/w0rd@127.0.0.1:notaport/db": invalid port`,
			`parse "postgres://u:xxxxx@127.0.0.1:notaport/db": invalid port`},
		{"a URL without a password",
			"",
			`dial postgres://app@h/db: app is the user`,
			`dial postgres://app@h/db: app is the user`},
		{"key=value fields",
			"host=h user=stgr password=stgr",
			`bad value: host=h user=stgr password=stgr sslpassword=stgr2 (stgr)`,
			`bad value: host=h user=stgr password=xxxxx sslpassword=xxxxx (stgr)`},
		{"a quoted key=value password",
			"",
			`bad: password='a b\' c' port=x`,
			`bad: password=xxxxx port=x`},
		{"a password in a URL query",
			"",
			`postgres://h/db?sslmode=x&password=q1w2 failed`,
			`postgres://h/db?sslmode=x&password=xxxxx failed`},
		{"the word password",
			"postgres://app:stgr@h/db",
			`password authentication failed`,
			`password authentication failed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cli{dsn: tc.dsn}
			if got := c.redact(tc.msg); got != tc.want {
				t.Errorf("redact(%q)\n got %q\nwant %q", tc.msg, got, tc.want)
			}
		})
	}
}

// TestRedactKeepsMessages: against a server, a source that contains the
// password, and a user name equal to the password, reach the operator
// unchanged.
func TestRedactKeepsMessages(t *testing.T) {
	db, _ := setup(t)
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatalf("DSN is not a URL: %v", err)
	}
	name := createRole(t, db, "rc_stgr_", "stgr", "GRANT SELECT ON public.runclaim_runs TO %s")

	asRole := *u
	asRole.User = url.UserPassword(name, "stgr")
	clearEnv(t)
	t.Setenv(envDatabaseURL, asRole.String())
	r := runInEnv(t, nil, "release", "--source", "my stgr job", "--yes")
	if r.code != exitError || !strings.Contains(r.stderr, `no running run of "my stgr job"`) {
		t.Errorf("release as a role whose password is stgr: %+v, want the source unchanged", r)
	}

	// A user whose password is its name: the server refuses it, and the
	// message names the user.
	same := *u
	same.User = url.UserPassword("rc_same_name", "rc_same_name")
	t.Setenv(envDatabaseURL, same.String())
	r = runInEnv(t, nil, "status")
	if r.code != exitError || !strings.Contains(r.stderr, `rc_same_name`) || strings.Contains(r.stderr, redacted) {
		t.Errorf("status as a user whose password is its name: %+v, want the user named and nothing redacted", r)
	}
}

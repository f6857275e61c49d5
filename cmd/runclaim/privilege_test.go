package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestPrivilegeHint: the hint of a refused privilege names the object the
// server named and the grant it wants.
func TestPrivilegeHint(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string][]string{
		"permission denied for schema public":                  {"schema public", "GRANT CREATE, USAGE ON SCHEMA public", "--table"},
		"permission denied for table runclaim_runs_cursors":    {"table runclaim_runs_cursors", "docs/least-privilege.md"},
		"permission denied for function runclaim_runs_claim11": {"EXECUTE on function runclaim_runs_claim11"},
		"permission denied for sequence runclaim_runs_id_seq":  {"USAGE on sequence runclaim_runs_id_seq"},
		"must be owner of table runclaim_runs":                 {"lacks a privilege", "docs/least-privilege.md"},
	} {
		got := privilegeHint(msg, false)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("privilegeHint(%q) = %q; want it to say %q", msg, got, w)
			}
		}
		if strings.Contains(got, "runs table") && !strings.Contains(msg, "runclaim_runs ") {
			t.Errorf("privilegeHint(%q) = %q: it names the runs table, which the server did not", msg, got)
		}
	}
}

// TestPrivilegeErrors: a command run as a role that lacks one grant fails
// with the object and the grant in its message or hint, said once, one
// missing grant at a time:
// migrate without CREATE on the schema, status without SELECT on the runs
// table, state without SELECT on the table of states, pause without
// INSERT on the control table.
func TestPrivilegeErrors(t *testing.T) {
	db, _ := setup(t)
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Skipf("DSN is not a URL: %v", err)
	}
	for _, tc := range []struct {
		name   string
		grants []string
		args   []string
		want   []string
	}{
		{"migrate without CREATE on the schema", []string{"REVOKE CREATE ON SCHEMA public FROM PUBLIC"},
			[]string{"migrate", "--table", "public.other_runs"}, []string{"schema public", "CREATE"}},
		{"status without SELECT on the runs table", nil,
			[]string{"status"}, []string{"table runclaim_runs"}},
		{"state without SELECT on the table of states", []string{"GRANT SELECT ON public.runclaim_runs TO %s"},
			[]string{"state", "feed"}, []string{"table runclaim_runs_cursors"}},
		{"pause without INSERT on the control table", []string{"GRANT SELECT, UPDATE ON public.runclaim_runs TO %s", "GRANT SELECT ON public.runclaim_runs_control TO %s"},
			[]string{"pause", "feed"}, []string{"table runclaim_runs_control"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			role := createRole(t, db, "rc_priv_", "priv", tc.grants...)
			asRole := *u
			asRole.User = url.UserPassword(role, "priv")
			clearEnv(t)
			r := runInEnv(t, nil, append([]string{"--database-url", asRole.String()}, tc.args...)...)
			if r.code == exitOK || !strings.Contains(r.stderr, "42501") {
				t.Fatalf("%v as %s: %+v; want a failure with SQLSTATE 42501", tc.args, role, r)
			}
			for _, w := range append(tc.want, "docs/least-privilege.md") {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("%v: stderr %q; want it to name %q", tc.args, r.stderr, w)
				}
			}
			// The grant is explained once: by the library's message when it
			// has one, the hint then giving the statement to run.
			library := strings.Contains(r.stderr, "the role needs") || strings.Contains(r.stderr, "the role lacks")
			if library && strings.Contains(r.stderr, "the role connected as") {
				t.Errorf("%v: stderr %q explains the missing grant twice", tc.args, r.stderr)
			}
		})
	}
}

// createRole creates a login role named prefix and a random suffix, with
// password, runs sqls as the test's superuser (each with %s, if it has
// one, for the role's name), and drops the role and what it owns when the
// test ends. Roles are global to the server: their names are random.
func createRole(t *testing.T, db *pgtest.DB, prefix, password string, sqls ...string) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	role := prefix + hex.EncodeToString(b)
	stmts := []string{fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, password)}
	for _, s := range sqls {
		if strings.Contains(s, "%s") {
			s = fmt.Sprintf(s, role)
		}
		stmts = append(stmts, s)
	}
	for _, sql := range stmts {
		if _, err := db.Pool.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		for _, sql := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := db.Pool.Exec(context.Background(), sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	return role
}

// wrongPassword returns db's DSN with a login role of its own (see
// createRole) and a password that is not the role's. It is not the test
// superuser's DSN with another password: pgtest's container trusts its
// superuser, as test harnesses do, so only other roles' passwords are
// checked.
func wrongPassword(t *testing.T, db *pgtest.DB) url.URL {
	t.Helper()
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatalf("DSN is not a URL: %v", err)
	}
	role := createRole(t, db, "pw_", "the-right-password")
	u.User = url.UserPassword(role, "wrong-password")
	return *u
}

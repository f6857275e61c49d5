package runclaim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestCutComment: a "--" comment is cut with the blanks before it; one
// inside a quoted string or identifier is kept.
func TestCutComment(t *testing.T) {
	for _, tc := range []struct {
		line, code string
		cut        bool
	}{
		{"SELECT 1", "SELECT 1", false},
		{"-- a comment", "", true},
		{"\t  -- indented", "", true},
		{"SELECT 1 -- why", "SELECT 1", true},
		{"SELECT '--' AS x", "SELECT '--' AS x", false},
		{`SELECT "a--b" FROM t -- c`, `SELECT "a--b" FROM t`, true},
		{"SELECT 'it''s' -- c 'x'", "SELECT 'it''s'", true},
		{"SELECT 1 - -1", "SELECT 1 - -1", false},
	} {
		code, cut := cutComment(tc.line)
		if code != tc.code || cut != tc.cut {
			t.Errorf("cutComment(%q) = %q, %v; want %q, %v", tc.line, code, cut, tc.code, tc.cut)
		}
	}
}

// TestStatementsFilled: every statement of sql/ loads, keeps no comment,
// and has every placeholder filled for a store.
func TestStatementsFilled(t *testing.T) {
	s, err := NewPostgresStore(struct{ Querier }{}, WithTable("Sch ema", `runs "x"`))
	if err != nil {
		t.Fatal(err)
	}
	if len(statements) < 20 {
		t.Fatalf("%d statements loaded from sql/", len(statements))
	}
	for name := range statements {
		q := s.statement(name)
		switch {
		case q == "" || strings.TrimSpace(q) != q:
			t.Errorf("statement %s: %q, want text without blanks around it", name, q)
		case strings.Contains(q, "{{"):
			t.Errorf("statement %s keeps a placeholder: %s", name, q)
		case strings.Contains(q, "--"):
			t.Errorf("statement %s keeps a comment: %s", name, q)
		}
	}
	for _, m := range s.Migrations() {
		if strings.Contains(m.Up+m.Down, "{{") {
			t.Errorf("step %d keeps a placeholder", m.Version)
		}
	}
}

// Rule: only the claim function's own absence (42883 naming it, or the
// cache lookup of a function dropped under way) or, in the overload of
// version 9, the table of states dropped under way, sends a claim to the
// version before; another 42883 (a function or operator the body uses) is
// an error, not an older table.
func TestMissingFuncNarrow(t *testing.T) {
	s, err := NewPostgresStore(noQuerier{}, WithTable("ops", "job runs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		code, msg      string
		missing, state bool
	}{
		{"42883", `function ops."job runs_claim"(bigint, text, text, bigint, bigint, bigint) does not exist`, true, false},
		{"42883", `function ops.job runs_claim(bigint) does not exist`, true, false},
		{"XX000", "cache lookup failed for function 16999", true, false},
		{"42883", "function pg_catalog.make_interval(text) does not exist", false, false},
		{"42883", "operator does not exist: text = integer", false, false},
		{"42883", `function ops."other runs_claim"(bigint) does not exist`, false, false},
		{"42P01", `relation "ops.job runs_cursors" does not exist`, false, true},
		{"42P01", `relation "ops.job runs_keys" does not exist`, false, false},
	} {
		err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: tc.code, Message: tc.msg})
		if got := s.missingFunc(err); got != tc.missing {
			t.Errorf("missingFunc(%s %q) = %v, want %v", tc.code, tc.msg, got, tc.missing)
		}
		if got := s.missingStates(err); got != tc.state {
			t.Errorf("missingStates(%s %q) = %v, want %v", tc.code, tc.msg, got, tc.state)
		}
	}
}

// noQuerier is a Querier for a store whose SQL is never sent.
type noQuerier struct{ Querier }

package runclaim

import (
	"strings"
	"testing"
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

package main

import (
	"strings"
	"testing"

	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestUnmigratedHint: on a database without the runs table, every command
// that reads or writes it fails with the server's undefined_table error
// (SQLSTATE 42P01, which describeError maps to a hint), on every server
// version CI runs; exec, whose claim calls the claim function, with the
// library's error that the table is missing (wrapping 42883, which maps to
// the same hint).
func TestUnmigratedHint(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for _, args := range [][]string{
		{"status"},
		{"history", "x"},
		{"release", "x", "--yes"},
		{"prune", "--older-than", "1h"},
		{"exec", "--source", "x", "--", "true"},
		{"--table", "ops.runs", "status"},
	} {
		r := runCLI(t, db, nil, args...)
		table := `"public.runclaim_runs"`
		if args[0] == "--table" {
			table = `"ops.runs"`
		}
		code := exitError
		if args[0] == "exec" {
			code = exitClaimFailed // exec's own code for "could not claim; nothing ran"
		}
		want := "relation " + table + " does not exist"
		if args[0] == "exec" {
			want = `"public"."runclaim_runs" is missing`
		}
		if r.code != code || !strings.Contains(r.stderr, "(hint: run 'runclaim migrate' first, or check --table)") ||
			!strings.Contains(r.stderr, want) {
			t.Errorf("runclaim %s on an unmigrated database: exit %d, stderr %q; want exit %d, the server's error naming %s and the hint",
				strings.Join(args, " "), r.code, r.stderr, code, table)
		}
	}
}

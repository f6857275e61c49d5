package main

import (
	"slices"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	t.Parallel()
	t.Run("no command", func(t *testing.T) {
		r := runCLI(t, nil, nil)
		if r.code != exitOK || !strings.Contains(r.stdout, "Commands:") || r.stderr != "" {
			t.Errorf("got %+v, want exit 0 and the usage on stdout, as gh and kubectl do", r)
		}
	})
	t.Run("unknown command", func(t *testing.T) {
		r := runCLI(t, nil, nil, "frobnicate")
		want := "runclaim: unknown command \"frobnicate\"\nRun 'runclaim --help' for the commands.\n"
		if r.code != exitUsage || r.stderr != want || r.stdout != "" {
			t.Errorf("got %+v, want exit 2 and stderr %q: the error and where the help is, not the usage", r, want)
		}
	})
	t.Run("unknown global flag", func(t *testing.T) {
		if r := runCLI(t, nil, nil, "--frob", "status"); r.code != exitUsage {
			t.Errorf("got %+v, want exit 2", r)
		}
	})
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runCLI(t, nil, nil, args...)
			if r.code != exitOK || r.stderr != "" {
				t.Fatalf("got %+v, want exit 0 and nothing on stderr", r)
			}
			for name := range surface {
				if !strings.Contains(r.stdout, "\n  "+name+" ") {
					t.Errorf("usage does not list %q:\n%s", name, r.stdout)
				}
			}
			for _, want := range []string{"DATABASE_URL", "PGHOST", "--table", "--namespace", "--json"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("usage does not mention %s", want)
				}
			}
		})
	}
	names := []string{"migrate", "status", "history", "ticks", "release", "replace", "pause", "resume", "trigger", "prune", "exec", "check", "limit", "limits", "cooldown", "state", "ui"}
	if len(commands) != len(names) {
		t.Errorf("%d commands, want %v", len(commands), names)
	}
	for _, name := range names {
		t.Run(name+" --help", func(t *testing.T) {
			for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}} {
				r := runCLI(t, nil, nil, args...)
				if r.code != exitOK || r.stderr != "" {
					t.Fatalf("%v: got %+v, want exit 0 and nothing on stderr", args, r)
				}
				for _, want := range []string{"usage: runclaim " + name, "Examples:", "runclaim " + name, "--table"} {
					if !strings.Contains(r.stdout, want) {
						t.Errorf("%v: help does not contain %q:\n%s", args, want, r.stdout)
					}
				}
			}
		})
		t.Run(name+" bad flag", func(t *testing.T) {
			r := runCLI(t, nil, nil, name, "--no-such-flag")
			if r.code != exitUsage || !strings.Contains(r.stderr, "runclaim "+name+" --help") {
				t.Errorf("got %+v, want exit 2 and a pointer to --help", r)
			}
		})
	}
	t.Run("exec documents its exit codes", func(t *testing.T) {
		r := runCLI(t, nil, nil, "exec", "--help")
		for _, code := range []string{"75", "70", "126", "127", "128+N", "137", "--skip-exit-code", "--kill-grace", "SIGTERM", "SIGKILL"} {
			if !strings.Contains(r.stdout, code) {
				t.Errorf("exec --help does not mention %s", code)
			}
		}
	})
	t.Run("bad table", func(t *testing.T) {
		r := runCLI(t, nil, nil, "--table", "a.", "status")
		if r.code != exitUsage || !strings.Contains(r.stderr, "--table a.") {
			t.Errorf("got %+v, want exit 2 naming the table", r)
		}
		r = runCLI(t, nil, nil, "--table", strings.Repeat("t", 64), "status") // refused by WithTable
		if r.code != exitUsage || !strings.Contains(r.stderr, "WithTable") {
			t.Errorf("got %+v, want exit 2 naming the table", r)
		}
	})
	t.Run("too many arguments", func(t *testing.T) {
		if r := runCLI(t, nil, nil, "status", "a", "b"); r.code != exitUsage || !strings.Contains(r.stderr, `unexpected argument "b"`) {
			t.Errorf("got %+v, want exit 2", r)
		}
	})
}

// TestInterspersedFlags: flags may come before or after the positional
// arguments, and everything after "--" is positional.
func TestInterspersedFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args      []string
		wantPos   []string
		wantLimit int
	}{
		{[]string{"src"}, []string{"src"}, 20},
		{[]string{"src", "--limit", "5"}, []string{"src"}, 5},
		{[]string{"--limit=5", "src"}, []string{"src"}, 5},
		{[]string{"--limit", "5", "--", "-src"}, []string{"-src"}, 5},
		{[]string{"a", "--", "--limit", "7"}, []string{"a", "--limit", "7"}, 20},
	} {
		cmd := testCommand(t, "history")
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		limit, err := cmd.Flags().GetInt("limit")
		if err != nil {
			t.Fatal(err)
		}
		if pos := cmd.Flags().Args(); !slices.Equal(pos, tc.wantPos) || limit != tc.wantLimit {
			t.Errorf("%v: positional %q, limit %d; want %q, %d", tc.args, pos, limit, tc.wantPos, tc.wantLimit)
		}
	}
}

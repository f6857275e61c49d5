package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// testCommand returns the command called name, as run makes it, with
// an environment that sets nothing.
func testCommand(t *testing.T, name string) *cobra.Command {
	t.Helper()
	c := &cli{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	cmd, _, err := c.newRoot().Find([]string{name})
	if err != nil || cmd.Name() != name {
		t.Fatalf("no command %q: %v", name, err)
	}
	return cmd
}

// TestCommandList checks the list of commands: unique names, a summary,
// usage and help each.
func TestCommandList(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	c := &cli{getenv: func(string) string { return "" }}
	for _, newCmd := range commands {
		cmd := newCmd(c)
		if seen[cmd.Name()] {
			t.Errorf("command %q is listed twice", cmd.Name())
		}
		seen[cmd.Name()] = true
		if cmd.Short == "" || cmd.Use == "" || cmd.Long == "" || cmd.RunE == nil {
			t.Errorf("command %q lacks its summary, usage, help or run", cmd.Name())
		}
	}
	if len(seen) != len(surface) {
		t.Errorf("%d commands, want %d", len(seen), len(surface))
	}
}

// TestOptionsValidate runs each command's Validate on options parsed from
// a command line, as main does, without running the command.
func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd  string
		args []string
		err  string // "" if valid
	}{
		{"status", nil, ""},
		{"status", []string{"nightly"}, ""},
		{"status", []string{""}, "source"},
		{"history", nil, "give a source"},
		{"history", []string{"nightly", "--limit", "0"}, "--limit must be positive, got 0"},
		{"history", []string{"nightly"}, ""},
		{"release", nil, "give exactly one of"},
		{"release", []string{"nightly", "--id", "3"}, "give exactly one of"},
		{"release", []string{"--id", "-5"}, "a run ID must be positive, got -5"},
		{"release", []string{"--", "0"}, "a run ID must be positive, got 0"},
		{"release", []string{"42", "--yes"}, ""},
		{"prune", nil, "give --older-than, --keep-last or both"},
		{"prune", []string{"--older-than", "1x"}, "--older-than: invalid duration"},
		{"prune", []string{"--older-than", "1d12h"}, ""},
		{"migrate", []string{"--sql", "--print"}, "--sql, --print and --status exclude each other"},
		{"migrate", []string{"--down"}, "--down goes with --print"},
		{"migrate", []string{"--print", "--down"}, ""},
		{"exec", []string{"--", "true"}, "--source is required"},
		{"exec", []string{"--source", "s"}, "give the command to run after --"},
		{"exec", []string{"--source", "s", "--kill-grace", "-1s", "--", "true"}, "--kill-grace must not be negative"},
		{"exec", []string{"--source", "s", "--lost-exit-code", "256", "--", "true"}, "--lost-exit-code must be between 0 and 255"},
		{"exec", []string{"--source", "s", "--", "true"}, ""},
		// The claimer's checks, in the words of the flags.
		{"exec", []string{"--source", "s", "--lease", "1ms", "--", "true"}, "--lease: lease must be between"},
		{"exec", []string{"--source", "s", "--lease", "1s", "--heartbeat", "1s", "--", "true"}, "--heartbeat: interval 1s must be shorter"},
		{"exec", []string{"--source", "s", "--min-interval", "-1s", "--", "true"}, "--min-interval: interval must be"},
		{"exec", []string{"--source", "s", "--owner", "a\tb", "--", "true"}, "--owner: control character"},
		{"exec", []string{"--source", "bad\x00", "--", "true"}, "--source: "},
		// The floor that leaves a heartbeat room: 500ms per attempt,
		// which the default heartbeat gives from a lease of 2.6s on.
		{"exec", []string{"--source", "s", "--lease", "100ms", "--", "true"}, "--lease 100ms with --heartbeat 33ms leaves a heartbeat attempt 19ms, under the 500ms"},
		{"exec", []string{"--source", "s", "--lease", "2500ms", "--", "true"}, "lengthen --lease (at least 2.6s with the default --heartbeat)"},
		{"exec", []string{"--source", "s", "--lease", "2600ms", "--", "true"}, ""},
		{"exec", []string{"--source", "s", "--lease", "3s", "--heartbeat", "100ms", "--", "true"}, ""},
	} {
		name := tc.cmd + " " + strings.Join(tc.args, " ")
		// Without DATABASE_URL, valid options go on to fail to connect
		// (exit 1, or exec's 69), never with a usage error.
		r := runCLI(t, nil, nil, append([]string{tc.cmd}, tc.args...)...)
		switch {
		case tc.err == "" && r.code == exitUsage:
			t.Errorf("%s: %s, want valid", name, r.stderr)
		case tc.err != "" && (r.code != exitUsage || !strings.Contains(r.stderr, tc.err)):
			t.Errorf("%s: exit %d, %s, want a usage error with %q", name, r.code, r.stderr, tc.err)
		case tc.cmd == "exec" && r.code == exitUsage && (strings.Contains(r.stderr, "runclaim:") || strings.Contains(r.stderr, "With")):
			t.Errorf("%s: %v names the library or its options, not the flags", name, r.stderr)
		}
	}
	// Validate parses what it checks.
	opts := &pruneOptions{olderThanArg: "1d12h"}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := opts.opts.OlderThan; got != 36*time.Hour {
		t.Errorf("prune --older-than 1d12h: %v, want 36h", got)
	}
}

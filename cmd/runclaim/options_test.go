package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// TestCommandList checks the list of commands: unique names, a summary,
// usage and help each, and options whose flags register.
func TestCommandList(t *testing.T) {
	seen := map[string]bool{}
	for _, cmd := range commands {
		if seen[cmd.name] {
			t.Errorf("command %q is listed twice", cmd.name)
		}
		seen[cmd.name] = true
		if cmd.summary == "" || cmd.usage == "" || cmd.help == "" || cmd.bind == nil {
			t.Errorf("command %q lacks its summary, usage, help or options", cmd.name)
		}
		if lookup(cmd.name) != cmd {
			t.Errorf("lookup(%q) does not find it", cmd.name)
		}
	}
	if lookup("nosuch") != nil {
		t.Error("lookup finds a command that does not exist")
	}
}

// TestOptionsValidate runs each command's Validate on options parsed from
// a command line, as main does, without running the command.
func TestOptionsValidate(t *testing.T) {
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
		{"release", []string{"42"}, ""},
		{"prune", nil, "--older-than is required"},
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
		cmd := lookup(tc.cmd)
		fs := flag.NewFlagSet(tc.cmd, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		opts, _ := cmd.bind(fs)
		var pos []string
		var err error
		if cmd.positional < 0 {
			err = fs.Parse(tc.args)
			pos = fs.Args()
		} else {
			pos, err = parseInterspersed(fs, tc.args)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		opts.args(pos)
		err = opts.Validate()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v, want valid", name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want an error with %q", name, err, tc.err)
		case tc.cmd == "exec" && err != nil && (strings.Contains(err.Error(), "runclaim:") || strings.Contains(err.Error(), "With")):
			t.Errorf("%s: %v names the library or its options, not the flags", name, err)
		}
	}
	// Validate parses what it checks.
	fs := flag.NewFlagSet("prune", flag.ContinueOnError)
	opts, _ := lookup("prune").bind(fs)
	if err := fs.Parse([]string{"--older-than", "1d12h"}); err != nil {
		t.Fatal(err)
	}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := opts.(*pruneOptions).olderThan; got != 36*time.Hour {
		t.Errorf("prune --older-than 1d12h: %v, want 36h", got)
	}
}

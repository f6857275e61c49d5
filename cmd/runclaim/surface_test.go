package main

import (
	"slices"
	"strings"
	"testing"
)

// surface is every command of runclaim with every flag of its own; each
// command also takes the global flags --table, --namespace and --json
// (exec refuses --json), and the commands that write
// --synchronous-commit.
var surface = map[string][]string{
	"migrate": {"sql", "print", "down", "status"},
	"status":  {"overdue"},
	"history": {"limit"},
	"ticks":   {"schedule", "since"},
	"release": {"yes", "source", "id"},
	"pause":   {"until", "note"},
	"resume":  {},
	"trigger": {},
	"replace": {},
	"prune":   {"older-than", "keep-last", "yes"},
	"exec": {"source", "lease", "min-interval", "tick", "every", "heartbeat", "max-run-time", "owner", "kill-grace",
		"skip-exit-code", "error-exit-code", "lost-exit-code", "unrecorded-exit-code", "timeout-exit-code", "replaced-exit-code",
		"no-db-env", "pass-db-env", "quiet", "verbose", "wait", "replace", "key"},
	"check":    {"max-age", "schedule", "max-late", "max-run"},
	"limit":    {"running", "starts", "per", "min-gap"},
	"limits":   {},
	"cooldown": {"for", "note", "end"},
	"state":    {"set-file", "clear", "force"},
	"ui":       {"addr", "actions", "identity", "max-age"},
}

// writers are the commands that take --synchronous-commit.
var writers = []string{"exec", "release", "prune", "pause", "resume", "trigger", "limit", "cooldown", "ui"}

// noJSON are the commands whose output is not the tool's: they refuse
// --json.
var noJSON = []string{"exec", "ui"}

// TestSurface pins the commands and their flags: each command's help
// lists every flag it takes, and every flag is accepted (a flag the
// command does not know is a usage error, exit 2, which these are not).
func TestSurface(t *testing.T) {
	t.Parallel()
	top := runCLI(t, nil, nil, "--help")
	for name, flags := range surface {
		if !strings.Contains(top.stdout, "\n  "+name+" ") {
			t.Errorf("the top-level help does not list %s", name)
		}
		help := runCLI(t, nil, nil, name, "--help")
		if help.code != exitOK {
			t.Fatalf("%s --help: %+v", name, help)
		}
		global := []string{"table", "namespace"}
		if !slices.Contains(noJSON, name) {
			global = append(global, "json")
		}
		if slices.Contains(writers, name) {
			global = append(global, "synchronous-commit")
		} else if strings.Contains(help.stdout, "\n  --synchronous-commit") {
			t.Errorf("%s --help lists --synchronous-commit, which %s refuses", name, name)
		}
		for _, f := range append(global, flags...) {
			if !strings.Contains(help.stdout, "--"+f) {
				t.Errorf("%s --help does not list --%s:\n%s", name, f, help.stdout)
			}
		}
	}
	// Each flag is known: what it reports is about its value or the
	// database, never an unknown flag.
	for _, args := range [][]string{
		{"migrate", "--sql"}, {"migrate", "--print"}, {"migrate", "--print", "--down"},
		{"migrate", "--sql", "--table", "a.b", "--namespace", "n", "--json"},
		{"--table", "a.b", "--namespace", "n", "--json", "migrate", "--sql"},
	} {
		if r := runCLI(t, nil, nil, args...); r.code != exitOK {
			t.Errorf("%q: %+v, want exit 0", args, r)
		}
	}
	for _, args := range [][]string{
		{"status", "--overdue", "bogus"},
		{"history", "x", "--limit", "-1"},
		{"release", "--yes", "--source", "x", "--id", "1"},
		{"release", "-y", "--source", "x", "--id", "1"},
		{"pause", "x", "--until", "bogus", "--note", "n"},
		{"prune", "--older-than", "bogus", "--keep-last", "1", "--yes"},
		{"check", "x", "--max-age", "bogus"},
		{"exec", "--source", "x", "--lease", "1s", "--min-interval", "1s", "--tick", "bogus", "--every", "1s", "--heartbeat", "1s",
			"--max-run-time", "1s", "--owner", "o", "--kill-grace", "1s", "--skip-exit-code", "1", "--error-exit-code", "1",
			"--lost-exit-code", "1", "--unrecorded-exit-code", "1", "--timeout-exit-code", "1", "--no-db-env", "--quiet", "--verbose", "--wait", "--key", "site:a", "--", "true"},
		{"limit", "set", "site:a", "--running", "1", "--starts", "1", "--per", "bogus"},
		{"cooldown", "site:a", "--for", "bogus", "--note", "n"},
		{"cooldown", "site:a", "--end", "--for", "1h"},
		{"resume", "x", "--synchronous-commit", "bogus"},
		{"trigger", "x", "--synchronous-commit", "bogus"},
	} {
		r := runCLI(t, nil, nil, args...)
		if r.code != exitUsage || strings.Contains(r.stderr, "not defined") || strings.Contains(r.stderr, "unknown flag") {
			t.Errorf("%q: %+v, want a usage error about a value", args, r)
		}
	}
}

// TestExitCodesDocumented pins the exit codes each command documents in
// its help.
func TestExitCodesDocumented(t *testing.T) {
	t.Parallel()
	for name, codes := range map[string][]string{
		"check":   {"0 ", "1 ", "2 ", "3 "},
		"migrate": {"exit 0", "3 when", "1 on"},
		"exec":    {"75", "69", "70", "74", "79", "124", "126", "127"},
	} {
		r := runCLI(t, nil, nil, name, "--help")
		for _, c := range codes {
			if !strings.Contains(r.stdout, c) {
				t.Errorf("%s --help does not document exit code %q", name, c)
			}
		}
	}
}

// TestHelpUnknownTopic: help for a command that does not exist is a usage
// error.
func TestHelpUnknownTopic(t *testing.T) {
	t.Parallel()
	if r := runCLI(t, nil, nil, "help", "frobnicate"); r.code != exitUsage || !strings.Contains(r.stderr, `"frobnicate"`) {
		t.Errorf("help frobnicate: %+v, want exit 2 naming it", r)
	}
}

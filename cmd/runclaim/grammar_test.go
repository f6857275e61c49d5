package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// jsonErrorOf decodes an error printed with --json: one object with
// command, error and hint.
func jsonErrorOf(t *testing.T, stderr string) (command, msg, hint string) {
	t.Helper()
	var e struct{ Command, Error, Hint string }
	dec := json.NewDecoder(strings.NewReader(stderr))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || dec.More() {
		t.Fatalf("stderr is not one JSON error (%v):\n%s", err, stderr)
	}
	return e.Command, e.Error, e.Hint
}

// TestDidYouMean: a mistyped command is refused with the commands it was
// probably meant to be (status and state are both one edit from stauts
// when letters may swap), in text and in JSON.
func TestDidYouMean(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, nil, "stauts")
	if r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "stauts"`) || !strings.Contains(r.stderr, "did you mean status or state?") {
		t.Errorf("stauts: %+v", r)
	}
	r = runCLI(t, nil, nil, "--json", "stauts")
	if r.code != exitUsage || r.stdout != "" {
		t.Fatalf("--json stauts: %+v", r)
	}
	if _, msg, hint := jsonErrorOf(t, r.stderr); msg != `unknown command "stauts"` || hint != "did you mean status or state?" {
		t.Errorf("--json stauts: error %q, hint %q", msg, hint)
	}
	// Nothing close: no suggestion.
	if r := runCLI(t, nil, nil, "frobnicate"); r.code != exitUsage || strings.Contains(r.stderr, "did you mean") {
		t.Errorf("frobnicate: %+v", r)
	}
}

// TestGNUFlags: flags are GNU-style: an unknown flag is reported as it was
// typed, a long flag given one dash says to use two, and -y is --yes.
func TestGNUFlags(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, nil, "status", "--bogus")
	if r.code != exitUsage || !strings.Contains(r.stderr, "unknown flag: --bogus") {
		t.Errorf("status --bogus: %+v", r)
	}
	r = runCLI(t, nil, nil, "history", "x", "-limit", "5")
	if r.code != exitUsage || !strings.Contains(r.stderr, "-limit: a long flag takes two dashes: --limit") {
		t.Errorf("history x -limit 5: %+v", r)
	}
	r = runCLI(t, nil, nil, "history", "x", "--limit=-1")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--limit") {
		t.Errorf("history x --limit=-1: %+v", r)
	}
}

// TestJSONErrorsAnywhere: with --json anywhere on the command line, before
// or after the command, every usage error is one JSON object on stderr,
// even when the error comes before --json is parsed.
func TestJSONErrorsAnywhere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		command string
		err     string
	}{
		{[]string{"status", "--bogus", "--json"}, "status", "unknown flag: --bogus"},
		{[]string{"--json", "status", "--bogus"}, "status", "unknown flag: --bogus"},
		{[]string{"status", "a", "b", "--json"}, "status", `unexpected argument "b"`},
		{[]string{"--json", "--bogus", "status"}, "", "unknown flag: --bogus"},
		{[]string{"history", "--limit", "x", "--json"}, "history", `--limit: "x" is not a whole number`},
		{[]string{"--json"}, "", "no command"},
		{[]string{"help", "stauts", "--json"}, "", `unknown command "stauts"`},
		{[]string{"check", "x", "--json"}, "check", "give an alarm: --max-age D"},
		{[]string{"history", "exec", "--bogus", "--json"}, "history", "unknown flag: --bogus"},  // a source called exec
		{[]string{"--table", "--json", "status", "--bogus"}, "status", "unknown flag: --bogus"}, // --json is --table's value: no JSON ...
	} {
		r := runCLI(t, nil, nil, tc.args...)
		if r.code != exitUsage || r.stdout != "" {
			t.Errorf("%q: %+v, want exit 2 and nothing on stdout", tc.args, r)
			continue
		}
		if tc.args[0] == "--table" { // ... and the error in text
			if !strings.HasPrefix(r.stderr, "runclaim status: unknown flag: --bogus\n") {
				t.Errorf("%q: stderr %q, want the error in text", tc.args, r.stderr)
			}
			continue
		}
		if cmd, msg, hint := jsonErrorOf(t, r.stderr); cmd != tc.command || !strings.Contains(msg, tc.err) || hint == "" {
			t.Errorf("%q: command %q, error %q, hint %q; want %q, %q and a hint", tc.args, cmd, msg, hint, tc.command, tc.err)
		}
	}
	// After "--", --json is exec's command's, not runclaim's.
	r := runCLI(t, nil, nil, "exec", "--bogus", "--", "jq", "--json")
	if r.code != exitUsage || !strings.HasPrefix(r.stderr, "runclaim exec: unknown flag: --bogus\n") {
		t.Errorf("exec --bogus -- jq --json: %+v", r)
	}
}

// TestCompletion: 'runclaim completion bash|zsh|fish' prints a script
// for that shell that completes runclaim, and an unknown shell is a usage
// error.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{
		"bash": "complete -o default -F __start_runclaim runclaim",
		"zsh":  "#compdef runclaim",
		"fish": "complete -c runclaim",
	} {
		r := runCLI(t, nil, nil, "completion", shell)
		if r.code != exitOK || !strings.Contains(r.stdout, want) || r.stderr != "" {
			t.Errorf("completion %s: exit %d, stderr %q, stdout without %q", shell, r.code, r.stderr, want)
		}
	}
	if r := runCLI(t, nil, nil, "completion", "tcsh"); r.code != exitUsage {
		t.Errorf("completion tcsh: %+v, want exit 2", r)
	}
	// The shell asks runclaim for the candidates: the commands, and a
	// command's flags.
	r := runCLI(t, nil, nil, "__complete", "sta")
	if r.code != exitOK || !strings.Contains(r.stdout, "status\t") {
		t.Errorf("__complete sta: %+v", r)
	}
	r = runCLI(t, nil, nil, "__complete", "history", "x", "--li")
	if r.code != exitOK || !strings.Contains(r.stdout, "--limit\t") {
		t.Errorf("__complete history x --li: %+v", r)
	}
}

// TestTopHelpExitCodes: the top-level help lists every exit code the
// commands share, 3 included, and points to exec's.
func TestTopHelpExitCodes(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, nil, "--help")
	_, codes, ok := strings.Cut(r.stdout, "\nExit codes:\n")
	if !ok {
		t.Fatalf("no exit codes in the help:\n%s", r.stdout)
	}
	for _, want := range []string{"  0  ", "  1  ", "  2  ", "  3  ", "status --overdue", "migrate --status", "75", "69", "70", "74", "124", "126", "127", "runclaim exec --help"} {
		if !strings.Contains(codes, want) {
			t.Errorf("the help's exit codes lack %q:\n%s", want, codes)
		}
	}
}

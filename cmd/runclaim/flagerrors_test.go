package main

import (
	"strings"
	"testing"
)

// TestFlagErrorsNameTheFlag: a bad flag value is a usage error (exit 2)
// that names the flag as it is typed and gives an example, never Go's
// names for it (Limit.Per, strconv.ParseInt), and nothing is sent.
func TestFlagErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"limit", "set", "k", "--starts", "5", "--per", "0s"}, []string{"--per must be positive", "--starts 20 --per 1h"}},
		{[]string{"limit", "set", "k", "--running", "-1"}, []string{"--running must be between"}},
		{[]string{"limit", "set", "k", "--starts", "abc", "--per", "1h"}, []string{`--starts: "abc" is not a whole number`, "e.g. --starts 20"}},
		{[]string{"history", "src", "--limit", "abc"}, []string{`--limit: "abc" is not a whole number`}},
		{[]string{"pause", "src", "--until", "tomorrow"}, []string{"--until", `"tomorrow"`, "e.g."}},
	} {
		r := runCLI(t, nil, nil, tc.args...) // no database: nothing may be sent
		if r.code != exitUsage {
			t.Errorf("%q: exit %d, want %d (usage); stderr %q", tc.args, r.code, exitUsage, r.stderr)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%q: stderr %q; want it to say %q", tc.args, r.stderr, w)
			}
		}
		for _, internal := range []string{"strconv", "Limit.", "MaxStarts", "MaxRunning", "zero time"} {
			if strings.Contains(r.stderr, internal) {
				t.Errorf("%q: stderr %q names Go's %q", tc.args, r.stderr, internal)
			}
		}
	}
}

// TestJSONEverywhere: --json is honoured or refused, never ignored:
// --version --json prints one JSON object; completion, whose output is a
// shell script, refuses it as a usage error.
func TestJSONEverywhere(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, nil, "--version", "--json")
	if o := decodeObject(t, r.stdout, "version", "revision", "time", "modified", "go"); r.code != exitOK || o["go"] == "" {
		t.Errorf("--version --json: %+v", r)
	}
	r = runCLI(t, nil, nil, "completion", "bash", "--json")
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "runclaim completion bash: --json does not apply") {
		t.Errorf("completion bash --json: %+v; want exit 2 and a refusal that names the command", r)
	}
}

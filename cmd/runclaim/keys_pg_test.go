package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// TestLimitCommands: 'limit set' sets a key's limit, which binds claims
// naming the key; 'limits' lists it with its running runs and starts, in
// text and JSON; 'cooldown --for' skips every claim naming the key, with
// its note, and status and limits show it; 'cooldown --end' and
// 'limit rm' lift them; 'exec --key' names the key.
func TestLimitCommands(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	ctx := t.Context()
	r := mustRun(t, db, exitOK, "limit", "set", "site:avito", "--running", "1", "--starts", "10", "--per", "1h")
	if !strings.Contains(r.stdout, `key "site:avito": at most 1 running, at most 10 starts per 1h00m`) {
		t.Errorf("limit set: stdout %q", r.stdout)
	}
	c, err := runclaim.New(store, runclaim.WithLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Claim(ctx, "avito/moscow", runclaim.WithKeys("site:avito"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "avito/kazan", runclaim.WithKeys("site:avito")); !errors.Is(err, runclaim.ErrLimited) {
		t.Errorf("claim over the limit set by the CLI: %v, want ErrLimited", err)
	}
	r = mustRun(t, db, exitOK, "limits")
	if got := lines(r.stdout); len(got) != 2 || !matches(`^site:avito +1/1 +1/10 per 1h00m +- +- +- *$`, got[1]) {
		t.Errorf("limits:\n%s", r.stdout)
	}
	r = mustRun(t, db, exitSkipped, "exec", "--source", "avito/kazan", "--key", "site:avito", "--", "true")
	if !strings.Contains(r.stderr, "site:avito") {
		t.Errorf("exec --key of a full key: stderr %q, want the key named", r.stderr)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	mustRun(t, db, exitOK, "exec", "--source", "avito/kazan", "--key", "site:avito", "--", "true")

	r = mustRun(t, db, exitOK, "cooldown", "site:avito", "--for", "1h", "--note", "HTTP 429", "--json")
	until := rfc3339(t, decodeObject(t, r.stdout, "key", "cooling_until", "note")["cooling_until"])
	var nc *runclaim.NotClaimedError
	if _, err := c.Claim(ctx, "avito/kazan", runclaim.WithKeys("site:avito")); !errors.As(err, &nc) || nc.Note != "HTTP 429" || !nc.RetryAfter.Equal(until) {
		t.Errorf("claim during the cooldown: %v, want ErrLimited until %v with the note", err, until)
	}
	// A shorter cooldown keeps the one in force, and says so: the end and
	// the note printed are those in force, not those asked.
	r = mustRun(t, db, exitOK, "cooldown", "site:avito", "--for", "1m", "--note", "shorter", "--json")
	kept := decodeObject(t, r.stdout, "key", "cooling_until", "note")
	if got := rfc3339(t, kept["cooling_until"]); !got.Equal(until) || kept["note"] != "HTTP 429" {
		t.Errorf("cooldown --json shorter than the one in force: %v; want the end in force, %v, and its note", kept, until)
	}
	r = mustRun(t, db, exitOK, "cooldown", "site:avito", "--for", "1m")
	if !strings.Contains(r.stdout, "already cools down until") || !strings.Contains(r.stdout, "HTTP 429") {
		t.Errorf("cooldown shorter than the one in force: %q; want the one in force named", r.stdout)
	}
	r = mustRun(t, db, exitOK, "status")
	if !strings.Contains(r.stdout, "site:avito") || !strings.Contains(r.stdout, "HTTP 429") {
		t.Errorf("status does not show the cooldown:\n%s", r.stdout)
	}
	objs := statusCooling(t, mustRun(t, db, exitOK, "status", "--json").stdout)
	if len(objs) != 1 || objs[0]["status"] != "cooling" || objs[0]["note"] != "HTTP 429" {
		t.Errorf("status --json: %v", objs)
	}
	objs = decodeObjects(t, mustRun(t, db, exitOK, "limits", "--json").stdout,
		"key", "max_running", "max_starts", "per_seconds", "min_gap_seconds", "running", "starts", "next_start", "cooling_until", "note", "checked_at")
	if len(objs) != 1 || fmt.Sprint(objs[0]["max_running"]) != "1" || fmt.Sprint(objs[0]["per_seconds"]) != "3600" || fmt.Sprint(objs[0]["starts"]) != "2" || objs[0]["note"] != "HTTP 429" {
		t.Errorf("limits --json: %v", objs)
	}
	if r := mustRun(t, db, exitOK, "cooldown", "site:avito", "--end"); !strings.HasPrefix(r.stdout, "ended the cooldown") {
		t.Errorf("cooldown --end of a key cooling down: %q", r.stdout)
	}
	if r := mustRun(t, db, exitOK, "cooldown", "site:avito", "--end"); !strings.Contains(r.stdout, "was not cooling down: nothing to end") {
		t.Errorf("cooldown --end of a key not cooling down: %q", r.stdout)
	}
	if r := mustRun(t, db, exitOK, "limit", "rm", "site:avito"); !strings.HasPrefix(r.stdout, "removed the limit") {
		t.Errorf("limit rm of a key with a limit: %q", r.stdout)
	}
	// A key with no limit: said so, not "removed"; in JSON, removed false.
	if r := mustRun(t, db, exitOK, "limit", "rm", "site:avito"); !strings.Contains(r.stdout, "had no limit: nothing to remove") {
		t.Errorf("limit rm of a key without a limit: %q", r.stdout)
	}
	if o := decodeObject(t, mustRun(t, db, exitOK, "limit", "rm", "nosuch", "--json").stdout, "key", "removed"); o["removed"] != false {
		t.Errorf("limit rm nosuch --json: %v", o)
	}
	if err := claimErrKeys(t, c, "avito/kazan", "site:avito"); err != nil {
		t.Errorf("claim once the cooldown ended and the limit was removed: %v", err)
	}
	if r := mustRun(t, db, exitOK, "limits"); !strings.Contains(r.stdout, "no key has a limit or a cooldown") {
		t.Errorf("limits with none: %q", r.stdout)
	}

	// Bad input: exit 2, nothing changed.
	for _, args := range [][]string{
		{"limit", "set", "site:avito"},
		{"limit", "set", "site:avito", "--running", "-1"},
		{"limit", "set", "site:avito", "--starts", "5"},
		{"limit", "set", "", "--running", "1"},
		{"limit", "frob", "site:avito"},
		{"limit", "rm", "site:avito", "--running", "1"},
		{"cooldown", "site:avito"},
		{"cooldown", "site:avito", "--for", "0s"},
		{"cooldown", "site:avito", "--for", "1h", "--end"},
		{"cooldown", "bad\x00key", "--for", "1h"},
		{"exec", "--source", "s", "--key", "", "--", "true"},
		{"exec", "--source", "s", "--key", "k", "--key", "k", "--", "true"},
	} {
		mustRun(t, db, exitUsage, args...)
	}
	if r := mustRun(t, db, exitOK, "limits"); !strings.Contains(r.stdout, "no key has a limit or a cooldown") {
		t.Errorf("limits after bad input: %q", r.stdout)
	}
}

// claimErrKeys claims source naming keys with c, finishes a run it won,
// and returns the claim's error.
func claimErrKeys(t *testing.T, c *runclaim.Claimer, source string, keys ...string) error {
	t.Helper()
	run, err := c.Claim(t.Context(), source, runclaim.WithKeys(keys...))
	if err == nil {
		if err := run.Finish(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
	}
	return err
}

// TestLimitMinGap: 'limit set --min-gap' paces a key's starts: the next
// claim naming it within the gap is skipped, 'exec --key' exits as
// skipped naming the key, and 'limits' shows the gap and when the next
// start may come, in text and JSON; a bad --min-gap is a usage error
// naming the flag.
func TestLimitMinGap(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	r := mustRun(t, db, exitOK, "limit", "set", "site:olx", "--min-gap", "1h")
	if !strings.Contains(r.stdout, `key "site:olx": no bound on running runs, no bound on starts, at least 1h00m between starts`) {
		t.Errorf("limit set --min-gap: stdout %q", r.stdout)
	}
	mustRun(t, db, exitOK, "exec", "--source", "olx/a", "--key", "site:olx", "--", "true")
	r = mustRun(t, db, exitSkipped, "exec", "--source", "olx/b", "--key", "site:olx", "--", "true")
	if !strings.Contains(r.stderr, "site:olx") {
		t.Errorf("exec --key of a paced key: stderr %q, want the key named", r.stderr)
	}
	r = mustRun(t, db, exitOK, "limits")
	if got := lines(r.stdout); len(got) != 2 || !matches(`^site:olx +0 +- +1h00m \(next in (59m|1h00m)[0-9]*s?\) +- +- *$`, got[1]) {
		t.Errorf("limits:\n%s", r.stdout)
	}
	objs := decodeObjects(t, mustRun(t, db, exitOK, "limits", "--json").stdout,
		"key", "max_running", "max_starts", "per_seconds", "min_gap_seconds", "running", "starts", "next_start", "cooling_until", "note", "checked_at")
	if len(objs) != 1 || fmt.Sprint(objs[0]["min_gap_seconds"]) != "3600" || objs[0]["next_start"] == nil {
		t.Errorf("limits --json: %v", objs)
	}
	r = mustRun(t, db, exitUsage, "limit", "set", "site:olx", "--min-gap", "-5s")
	if !strings.Contains(r.stderr, "--min-gap") {
		t.Errorf("limit set --min-gap -5s: stderr %q, want the flag named", r.stderr)
	}
	mustRun(t, db, exitOK, "limit", "rm", "site:olx")
	mustRun(t, db, exitOK, "exec", "--source", "olx/b", "--key", "site:olx", "--", "true")
}

// TestKeysTruncated: with more than MaxKeyStates keys that have a limit
// or a cooldown, status still prints the runs, and status and limits print
// the first MaxKeyStates keys by name with a warning on stderr; status
// --json says so in cooling_truncated. With MaxKeyStates keys, all are
// printed, without a warning.
func TestKeysTruncated(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	if _, err := db.Pool.Exec(t.Context(), `INSERT INTO public.runclaim_runs_keys (key, cooling_until, cooling_note)
SELECT 'k:' || lpad(i::text, 5, '0'), pg_catalog.now() + interval '1 hour', 'HTTP 429'
FROM generate_series(1, $1) AS i`, runclaim.MaxKeyStates+1); err != nil {
		t.Fatal(err)
	}
	run := hold(t, store, "alpha", "host-a")
	last := fmt.Sprintf("k:%05d", runclaim.MaxKeyStates) // the last key printed
	warning := fmt.Sprintf("more than %d keys have a limit or a cooldown; only the first %d by name are listed", runclaim.MaxKeyStates, runclaim.MaxKeyStates)
	keyLines := func(out string) (n int, lastKey string) {
		for _, l := range lines(out) {
			if strings.HasPrefix(l, "k:") {
				n++
				lastKey, _, _ = strings.Cut(l, " ")
			}
		}
		return n, lastKey
	}
	for _, truncated := range []bool{true, false} {
		if !truncated {
			if _, err := db.Pool.Exec(t.Context(), `DELETE FROM public.runclaim_runs_keys WHERE key = $1`, fmt.Sprintf("k:%05d", runclaim.MaxKeyStates+1)); err != nil {
				t.Fatal(err)
			}
		}
		checkStderr := func(cmd string, r result) {
			t.Helper()
			if got := strings.Contains(r.stderr, warning); got != truncated {
				t.Errorf("%s with %d keys: stderr %q; want the warning: %v", cmd, runclaim.MaxKeyStates+map[bool]int{true: 1}[truncated], r.stderr, truncated)
			}
		}

		r := mustRun(t, db, exitOK, "status")
		if !matches(fmt.Sprintf(`(?m)^alpha +%d +host-a `, run.ID), r.stdout) {
			t.Errorf("status does not print the run:\n%.500s", r.stdout)
		}
		if n, k := keyLines(r.stdout); n != runclaim.MaxKeyStates || k != last {
			t.Errorf("status: %d keys cooling down, the last %q; want %d, the last %q", n, k, runclaim.MaxKeyStates, last)
		}
		checkStderr("status", r)

		r = mustRun(t, db, exitOK, "status", "--json")
		running := statusRunning(t, r.stdout)
		cooling := statusCooling(t, r.stdout)
		if len(running) != 1 || running[0]["source"] != "alpha" {
			t.Errorf("status --json: running %v, want alpha's run", running)
		}
		if len(cooling) != runclaim.MaxKeyStates || cooling[len(cooling)-1]["key"] != last {
			t.Errorf("status --json: %d keys cooling down; want %d, the last %q", len(cooling), runclaim.MaxKeyStates, last)
		}
		if got := statusObject(t, r.stdout)["cooling_truncated"]; string(got) != fmt.Sprint(truncated) {
			t.Errorf("status --json: cooling_truncated %s, want %v", got, truncated)
		}
		checkStderr("status --json", r)

		r = mustRun(t, db, exitOK, "limits")
		if n, k := keyLines(r.stdout); n != runclaim.MaxKeyStates || k != last {
			t.Errorf("limits: %d keys, the last %q; want %d, the last %q", n, k, runclaim.MaxKeyStates, last)
		}
		checkStderr("limits", r)

		r = mustRun(t, db, exitOK, "limits", "--json")
		objs := decodeObjects(t, r.stdout, "key", "max_running", "max_starts", "per_seconds", "min_gap_seconds", "running", "starts", "next_start", "cooling_until", "note", "checked_at")
		if len(objs) != runclaim.MaxKeyStates || objs[len(objs)-1]["key"] != last {
			t.Errorf("limits --json: %d keys; want %d, the last %q", len(objs), runclaim.MaxKeyStates, last)
		}
		checkStderr("limits --json", r)
	}
}

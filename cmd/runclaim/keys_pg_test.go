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
	if got := lines(r.stdout); len(got) != 2 || !matches(`^site:avito +1/1 +1/10 per 1h00m +- +- *$`, got[1]) {
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
	r = mustRun(t, db, exitOK, "status")
	if !strings.Contains(r.stdout, "site:avito") || !strings.Contains(r.stdout, "HTTP 429") {
		t.Errorf("status does not show the cooldown:\n%s", r.stdout)
	}
	objs := statusCooling(t, mustRun(t, db, exitOK, "status", "--json").stdout)
	if len(objs) != 1 || objs[0]["status"] != "cooling" || objs[0]["note"] != "HTTP 429" {
		t.Errorf("status --json: %v", objs)
	}
	objs = decodeObjects(t, mustRun(t, db, exitOK, "limits", "--json").stdout,
		"key", "max_running", "max_starts", "per_seconds", "running", "starts", "cooling_until", "note", "checked_at")
	if len(objs) != 1 || fmt.Sprint(objs[0]["max_running"]) != "1" || fmt.Sprint(objs[0]["per_seconds"]) != "3600" || fmt.Sprint(objs[0]["starts"]) != "2" || objs[0]["note"] != "HTTP 429" {
		t.Errorf("limits --json: %v", objs)
	}
	mustRun(t, db, exitOK, "cooldown", "site:avito", "--end")
	mustRun(t, db, exitOK, "limit", "rm", "site:avito")
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

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// TestStateCommand: state shows a source's state as text or base64, sets
// it from a file or standard input and clears it, refusing both while a
// run holds the source unless --force; the next run gets what it left.
func TestStateCommand(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	ctx := t.Context()
	c, err := runclaim.New(store, runclaim.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, db, exitOK, "state", "feed")
	if !strings.Contains(r.stdout, `"feed" has no state`) {
		t.Errorf("state of a source without one: %q", r.stdout)
	}
	run, err := c.Claim(ctx, "feed")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.SaveState(ctx, []byte("page=7")); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, db, exitOK, "state", "feed")
	if !strings.Contains(r.stdout, "6 bytes, saved by run") || !strings.Contains(r.stdout, "(text):\npage=7\n") {
		t.Errorf("state as text: %q", r.stdout)
	}
	obj := decodeObject(t, mustRun(t, db, exitOK, "state", "feed", "--json").stdout, "source", "has_state", "text", "base64", "bytes", "saved_at", "run_id")
	if obj["text"] != "page=7" || obj["base64"] != "cGFnZT03" || fmt.Sprint(obj["run_id"]) != fmt.Sprint(run.ID) {
		t.Errorf("state --json: %v", obj)
	}
	file := filepath.Join(t.TempDir(), "cursor")
	if err := os.WriteFile(file, []byte{0xff, 0x00, 0x01}, 0o600); err != nil {
		t.Fatal(err)
	}
	// Refused while the run holds the source.
	r = mustRun(t, db, exitError, "state", "feed", "--set-file", file)
	if !strings.Contains(r.stderr, "running") {
		t.Errorf("set while held: stderr %q", r.stderr)
	}
	mustRun(t, db, exitError, "state", "feed", "--clear")
	r = mustRun(t, db, exitOK, "state", "feed", "--set-file", file, "--force")
	if !strings.Contains(r.stdout, "set by an operator") || !strings.Contains(r.stdout, "(base64):\n/wAB\n") {
		t.Errorf("state after --set-file of bytes: %q", r.stdout)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	next, err := c.Claim(ctx, "feed")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(next.State()); got != "\xff\x00\x01" {
		t.Errorf("next run's state %q, want the file's bytes", got)
	}
	if err := next.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, db, strings.NewReader("since=2026-12-01"), "state", "feed", "--set-file", "-")
	if r.code != exitOK || !strings.Contains(r.stdout, "since=2026-12-01") {
		t.Errorf("--set-file -: %+v", r)
	}
	r = mustRun(t, db, exitOK, "state", "feed", "--clear")
	if !strings.Contains(r.stdout, "cleared") {
		t.Errorf("--clear: %q", r.stdout)
	}
	last, err := c.Claim(context.Background(), "feed")
	if err != nil {
		t.Fatal(err)
	}
	if last.State() != nil {
		t.Errorf("state after --clear: %q", last.State())
	}
	_ = last.Finish(ctx, nil)
	mustRun(t, db, exitUsage, "state", "feed", "--clear", "--set-file", file)
	mustRun(t, db, exitUsage, "state", "feed", "--force")
}

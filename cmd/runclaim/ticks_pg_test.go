package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// TestTicksCommand: 'ticks' lists the ticks of a schedule in the range,
// in text and JSON, with the run that served each (its status and how
// late it started) and "not run" for the others; a bad --schedule or
// --since is a usage error naming the flag.
func TestTicksCommand(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	ctx := t.Context()
	const source = "sweep"
	fields := []string{"tick", "outcome", "run_id", "status", "late_seconds", "overlapped_by"}
	objs := decodeObjects(t, mustRun(t, db, exitOK, "ticks", source, "--schedule", "@every 1m", "--since", "5m", "--json").stdout, fields...)
	if len(objs) < 4 {
		t.Fatalf("ticks of @every 1m over 5m: %v", objs)
	}
	tickAt := func(i int) time.Time {
		tick, err := time.Parse(time.RFC3339Nano, objs[i]["tick"].(string))
		if err != nil {
			t.Fatal(err)
		}
		return tick
	}
	for i := range objs {
		if objs[i]["outcome"] != tickNotRun || objs[i]["run_id"] != nil {
			t.Errorf("tick %v of a source that never ran: %v", objs[i]["tick"], objs[i])
		}
	}
	c, err := runclaim.New(store, runclaim.WithLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.Claim(ctx, source, runclaim.ForTick(tickAt(1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	running, err := c.Claim(ctx, source, runclaim.ForTick(tickAt(3)))
	if err != nil {
		t.Fatal(err)
	}
	// A longer range: the ticks claimed stay in it if a minute turns
	// meanwhile.
	objs = decodeObjects(t, mustRun(t, db, exitOK, "ticks", source, "--schedule", "@every 1m", "--since", "10m", "--json").stdout, fields...)
	seen := 0
	for i, o := range objs {
		tick := tickAt(i)
		switch {
		case tick.Equal(done.Tick):
			seen++
			if o["outcome"] != tickRan || o["status"] != "succeeded" || fmt.Sprint(o["run_id"]) != fmt.Sprint(done.ID) {
				t.Errorf("tick %v, served by run %d: %v", tick, done.ID, o)
			}
		case tick.Equal(running.Tick):
			seen++
			if o["outcome"] != tickRan || o["status"] != "running" || o["late_seconds"] == nil {
				t.Errorf("tick %v, served by the running run %d: %v", tick, running.ID, o)
			}
		case o["outcome"] != tickNotRun:
			t.Errorf("tick %v: %v, want not run", tick, o)
		}
	}
	if seen != 2 {
		t.Errorf("ticks listed %d of the two ticks claimed: %v", seen, objs)
	}
	r := mustRun(t, db, exitOK, "ticks", source, "--schedule", "@every 1m", "--since", "10m")
	if !strings.HasPrefix(r.stdout, "TICK") || !strings.Contains(r.stdout, "succeeded") || !strings.Contains(r.stdout, tickNotRun) {
		t.Errorf("ticks:\n%s", r.stdout)
	}
	for _, bad := range [][]string{
		{"ticks", source},
		{"ticks", source, "--schedule", "every minute"},
		{"ticks", source, "--schedule", "@every 0s"},
		{"ticks", source, "--schedule", "@every 1m", "--since", "-1h"},
	} {
		r := mustRun(t, db, exitUsage, bad...)
		if !strings.Contains(r.stderr, "--schedule") && !strings.Contains(r.stderr, "--since") {
			t.Errorf("runclaim %s: stderr %q, want the flag named", strings.Join(bad, " "), r.stderr)
		}
	}
}

package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// TestExecReplace: exec --replace takes a source over from a service's
// run, which learns at its heartbeat, stops, and is recorded replaced;
// then exec runs its command. And an exec whose run a claim with Replace
// asks to stop stops its command (SIGTERM) and exits with
// --replaced-exit-code, 79, the run recorded replaced.
func TestExecReplace(t *testing.T) {
	t.Parallel()
	db, store := setupProcess(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	// A service's run, replaced by exec --replace.
	c, err := runclaim.New(store, runclaim.WithOwner("service"), runclaim.WithHeartbeat(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	started, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- c.Do(ctx, "worker", func(ctx context.Context, _ *runclaim.Run) error {
			close(started)
			<-ctx.Done()
			return nil
		})
	}()
	<-started
	p := startProcess(t, db, "exec", "--source", "worker", "--replace", "--", "true")
	if code := <-p.done; code != exitOK {
		t.Fatalf("exec --replace: exit %d, want 0; stderr:\n%s", code, p.stderr.String())
	}
	if err := <-done; !errors.Is(err, runclaim.ErrReplaced) {
		t.Errorf("the service's Do: %v, want ErrReplaced", err)
	}
	runs := history(t, store, "worker")
	if len(runs) != 2 || runs[1].Status != runclaim.StatusReplaced || runs[0].Status != runclaim.StatusSucceeded {
		t.Fatalf("history %+v; want the service's run replaced and exec's succeeded", runs)
	}

	// An exec's run, replaced by a service's claim with Replace.
	p = startProcess(t, db, "exec", "--source", "job", "--heartbeat", "100ms", "--kill-grace", "2s", "--", "sleep", "60")
	for deadline := time.Now().Add(testTimeout); len(history(t, store, "job")) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("exec made no run; stderr:\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	run, err := c.Claim(ctx, "job", runclaim.Replace())
	if err != nil {
		t.Fatalf("claim with Replace of exec's run: %v", err)
	}
	defer run.Finish(ctx, nil)
	if code := <-p.done; code != exitReplaced || !strings.Contains(p.stderr.String(), "asked the run") {
		t.Errorf("exec whose run was replaced: exit %d, want %d; stderr:\n%s", code, exitReplaced, p.stderr.String())
	}
	if runs := history(t, store, "job"); len(runs) != 2 || runs[1].Status != runclaim.StatusReplaced {
		t.Errorf("history %+v; want exec's run replaced", runs)
	}
}

// TestReplaceCommand: 'runclaim replace' asks the running run to stop and
// returns at once; the holder learns at its heartbeat, and its run is
// recorded replaced; the next claim wins. With no running run it says so
// and exits 1.
func TestReplaceCommand(t *testing.T) {
	db, store := setup(t)
	ctx := t.Context()
	run := hold(t, store, "job", "host-a")
	r := mustRun(t, db, exitOK, "replace", "job")
	if !strings.Contains(r.stdout, "asked run") || !strings.Contains(r.stdout, "host-a") {
		t.Errorf("replace: stdout %q", r.stdout)
	}
	if err := run.Heartbeat(ctx); !errors.Is(err, runclaim.ErrReplaced) {
		t.Errorf("the holder's heartbeat after 'replace': %v, want ErrReplaced", err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if runs := history(t, store, "job"); len(runs) != 1 || runs[0].Status != runclaim.StatusReplaced {
		t.Errorf("history %+v; want the run replaced", runs)
	}
	hold(t, store, "job", "host-b") // the next claim wins: no reservation
	r = mustRun(t, db, exitError, "replace", "idle")
	if !strings.Contains(r.stderr, "no running run") {
		t.Errorf("replace of a source with no run: stderr %q", r.stderr)
	}
}

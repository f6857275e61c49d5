package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// TestExecWait: with --wait, exec run while another host holds the
// source waits, here for the holder's lease to lapse (the holder died),
// and then runs the command; a pause still skips at once.
func TestExecWait(t *testing.T) {
	db, store := setup(t)
	c, err := runclaim.New(store, runclaim.WithLease(3*time.Second), runclaim.WithOwner("dead-host"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := c.Claim(t.Context(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	called := time.Now()
	mustRun(t, db, exitOK, "exec", "--source", "busy", "--wait", "--", "touch", marker)
	if !called.Before(held.LeaseUntil) {
		t.Fatalf("exec was called at %v, after the holder's lease ended at %v: nothing was waited for (a machine too slow for a 3 s lease?)", called, held.LeaseUntil)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the command did not run: %v", err)
	}
	runs := history(t, store, "busy")
	if len(runs) != 2 || runs[1].ID != held.ID || runs[1].Status != runclaim.StatusExpired || runs[0].Status != runclaim.StatusSucceeded {
		t.Fatalf("history %+v; want the holder's run expired and exec's succeeded", runs)
	}
	if runs[0].StartedAt.Before(held.LeaseUntil) {
		t.Errorf("exec's run started at %v, before the holder's lease ended at %v", runs[0].StartedAt, held.LeaseUntil)
	}

	// A pause is not waited for.
	if err := store.Pause(t.Context(), "paused", time.Time{}, "ticket 42"); err != nil {
		t.Fatal(err)
	}
	mustRun(t, db, exitSkipped, "exec", "--source", "paused", "--wait", "--", "touch", marker+"2")
	if _, err := os.Stat(marker + "2"); err == nil {
		t.Error("the command ran while the source was paused")
	}
}

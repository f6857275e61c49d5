package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
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

// TestExecProcessWaitSignal: the built binary with --wait, signalled while
// it waits for a held source, stops without running the command and
// exits 128+N, as when a signal comes before any claim.
func TestExecProcessWaitSignal(t *testing.T) {
	t.Parallel()
	db, store := setupProcess(t)
	hold(t, store, "busy", "other-host")
	dsn := db.DSN + "&application_name=exec-wait"
	if !strings.Contains(db.DSN, "?") {
		dsn = db.DSN + "?application_name=exec-wait"
	}
	p := startProcess(t, &pgtest.DB{DSN: dsn}, "exec", "--source", "busy", "--wait", "--", "echo", "ran")
	// Until its connection has sent a claim (and been skipped: the source
	// is held).
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(testTimeout)
	for claimed := false; !claimed; {
		select {
		case <-tick.C:
		case code := <-p.done:
			t.Fatalf("exec exited with %d while the source was held; stderr:\n%s", code, p.stderr.String())
		case <-timeout:
			t.Fatal("exec sent no claim")
		}
		if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'exec-wait' AND query ILIKE '%claim%'`).Scan(&claimed); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code %d, want 143; stderr:\n%s", code, p.stderr.String())
	}
	if out := p.drain(t); len(out) != 0 {
		t.Errorf("the command ran: %q", out)
	}
	if want := "runclaim exec: interrupted by SIGTERM before the command started"; !strings.Contains(p.stderr.String(), want) {
		t.Errorf("stderr %q lacks %q", p.stderr.String(), want)
	}
}

package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/runclaim/runclaim"
)

var historyKeys = []string{"run_id", "source", "status", "owner", "started_at", "lease_until", "heartbeat_at",
	"finished_at", "tick", "duration_seconds", "error"}

func TestHistory(t *testing.T) {
	t.Parallel()
	db, store := setup(t)

	r := mustRun(t, db, exitOK, "history", "nightly")
	if strings.TrimSpace(r.stdout) != `no runs of "nightly"` {
		t.Errorf("empty history: %q", r.stdout)
	}
	if r := mustRun(t, db, exitOK, "history", "nightly", "--json"); len(decodeObjects(t, r.stdout, historyKeys...)) != 0 {
		t.Errorf("empty history JSON: %s", r.stdout)
	}

	// Oldest first: succeeded, failed, killed, then one still running.
	mustRun(t, db, 0, "exec", "--source", "nightly", "--owner", "host-1", "--", "true")
	mustRun(t, db, 3, "exec", "--source", "nightly", "--owner", "host-2", "--", "sh", "-c", "exit 3")
	mustRun(t, db, 137, "exec", "--source", "nightly", "--owner", "host-3", "--", "sh", "-c", "kill -9 $$")
	running := hold(t, store, "nightly", "host-4")

	t.Run("table", func(t *testing.T) {
		r := mustRun(t, db, exitOK, "history", "nightly")
		got := lines(r.stdout)
		if len(got) != 5 {
			t.Fatalf("want a header and 4 rows:\n%s", r.stdout)
		}
		for _, col := range []string{"RUN", "SOURCE", "STATUS", "OWNER", "STARTED", "TICK", "DURATION", "ERROR"} {
			if !strings.Contains(got[0], col) {
				t.Errorf("header %q lacks %s", got[0], col)
			}
		}
		rows := []*regexp.Regexp{
			regexp.MustCompile(fmt.Sprintf(`^%d +nightly +running +host-4 +\S+ +- +running +-$`, running.ID)),
			regexp.MustCompile(`^\d+ +nightly +failed +host-3 +\S+ +- +\S+ +signal: killed$`),
			regexp.MustCompile(`^\d+ +nightly +failed +host-2 +\S+ +- +\S+ +exit status 3$`),
			regexp.MustCompile(`^\d+ +nightly +succeeded +host-1 +\S+ +- +\S+ +-$`),
		}
		for i, re := range rows {
			if !re.MatchString(got[i+1]) {
				t.Errorf("row %d %q does not match %v", i+1, got[i+1], re)
			}
		}
	})

	t.Run("JSON", func(t *testing.T) {
		r := mustRun(t, db, exitOK, "history", "--json", "nightly")
		objs := decodeObjects(t, r.stdout, historyKeys...)
		if len(objs) != 4 {
			t.Fatalf("want 4 runs:\n%s", r.stdout)
		}
		want := []struct {
			status, owner, err string
		}{
			{"running", "host-4", ""},
			{"failed", "host-3", "signal: killed"},
			{"failed", "host-2", "exit status 3"},
			{"succeeded", "host-1", ""},
		}
		prevID := float64(1 << 62)
		for i, w := range want {
			o := objs[i]
			if o["source"] != "nightly" || o["status"] != w.status || o["owner"] != w.owner || o["error"] != w.err {
				t.Errorf("run %d: %v, want %+v", i, o, w)
			}
			id := num(t, o["run_id"])
			if id >= prevID {
				t.Errorf("run IDs not newest first: %v after %v", id, prevID)
			}
			prevID = id
			started := rfc3339(t, o["started_at"])
			rfc3339(t, o["lease_until"])
			rfc3339(t, o["heartbeat_at"])
			if w.status == "running" {
				if o["finished_at"] != nil || o["duration_seconds"] != nil {
					t.Errorf("running run has finished_at %v, duration %v; want null", o["finished_at"], o["duration_seconds"])
				}
				continue
			}
			finished := rfc3339(t, o["finished_at"])
			if d := num(t, o["duration_seconds"]); d < 0 || d-finished.Sub(started).Seconds() > 1e-6 {
				t.Errorf("duration %v, want %v", d, finished.Sub(started).Seconds())
			}
		}
		if num(t, objs[0]["run_id"]) != float64(running.ID) {
			t.Errorf("newest run %v, want %d", objs[0]["run_id"], running.ID)
		}
	})

	t.Run("limit", func(t *testing.T) {
		r := mustRun(t, db, exitOK, "history", "nightly", "--limit", "2", "--json")
		objs := decodeObjects(t, r.stdout, historyKeys...)
		if len(objs) != 2 || objs[0]["status"] != "running" || objs[1]["error"] != "signal: killed" {
			t.Errorf("--limit 2: %s", r.stdout)
		}
		if r := runCLI(t, db, nil, "history", "nightly", "--limit", "0"); r.code != exitUsage {
			t.Errorf("--limit 0: %+v", r)
		}
		if r := runCLI(t, db, nil, "history"); r.code != exitUsage {
			t.Errorf("no source: %+v", r)
		}
	})

	// The library agrees.
	if runs := history(t, store, "nightly"); len(runs) != 4 || runs[3].Status != runclaim.StatusSucceeded {
		t.Errorf("library history: %+v", runs)
	}
}

// TestHistoryExpiredDuration: an expired run's duration runs from its
// start to its last heartbeat, not to the claim that expired it an hour
// later; the table marks it as a lower bound.
func TestHistoryExpiredDuration(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	ctx := t.Context()
	old := hold(t, store, "lapsed", "host-1")
	// Started 2h ago, last heartbeat 1h59m ago, lease over since 1h58m.
	if _, err := db.Pool.Exec(ctx, "UPDATE "+store.Table()+` SET started_at = now() - interval '2 hours',
		heartbeat_at = now() - interval '119 minutes', lease_until = now() - interval '118 minutes' WHERE id = $1`, old.ID); err != nil {
		t.Fatal(err)
	}
	hold(t, store, "lapsed", "host-2") // expires the old run now
	r := mustRun(t, db, exitOK, "history", "lapsed", "--json")
	objs := decodeObjects(t, r.stdout, historyKeys...)
	if len(objs) != 2 || objs[1]["status"] != "expired" {
		t.Fatalf("want the new run and the expired one:\n%s", r.stdout)
	}
	if d := num(t, objs[1]["duration_seconds"]); d < 59 || d > 61 {
		t.Errorf("expired run's duration %vs, want 60s, to its last heartbeat", d)
	}
	r = mustRun(t, db, exitOK, "history", "lapsed")
	if got := lines(r.stdout); len(got) != 3 || !regexp.MustCompile(`^\d+ +lapsed +expired +host-1 +\S+ +- +≥1m00s +-$`).MatchString(got[2]) {
		t.Errorf("table:\n%s\nwant the expired run's duration as ≥1m00s", r.stdout)
	}
}

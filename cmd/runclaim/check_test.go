package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

var checkKeys = []string{"source", "healthy", "max_age_seconds", "checked_at", "last_success_at",
	"last_success_run_id", "last_success_age_seconds", "success_unread", "running", "running_run_id",
	"running_since", "failing", "last_finished_status", "last_finished_error", "alarms", "late_tick", "late_run_id",
	"late_seconds", "max_late_seconds", "overrun_run_id", "overrun_seconds", "max_run_seconds", "message", "error"}

// backdate moves run id's start (and its other times) ago into the past,
// by the database clock.
func backdate(t *testing.T, db *pgtest.DB, id int64, ago time.Duration) {
	t.Helper()
	if _, err := db.Pool.Exec(t.Context(), `UPDATE runclaim_runs SET
	started_at = started_at - $2::bigint * interval '1 microsecond',
	heartbeat_at = heartbeat_at - $2::bigint * interval '1 microsecond',
	finished_at = finished_at - $2::bigint * interval '1 microsecond'
WHERE id = $1`, id, ago.Microseconds()); err != nil {
		t.Fatal(err)
	}
}

// finished runs source to completion with jobErr and returns the run.
func finished(t *testing.T, store *runclaim.PostgresStore, source string, jobErr error) *runclaim.Run {
	t.Helper()
	run := hold(t, store, source, "host-a")
	if err := run.Finish(t.Context(), jobErr); err != nil {
		t.Fatal(err)
	}
	return run
}

// TestCheckExitCodes: every exit code of check, against a real database.
func TestCheckExitCodes(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	fresh := finished(t, store, "fresh", nil)
	old := finished(t, store, "stale", nil)
	backdate(t, db, old.ID, 3*time.Hour)
	failed := finished(t, store, "stale", fmt.Errorf("upstream answered 503"))
	backdate(t, db, failed.ID, 2*time.Hour)
	running := hold(t, store, "stale", "host-b")
	finished(t, store, "never", fmt.Errorf("boom"))

	t.Run("0 healthy", func(t *testing.T) {
		r := mustRun(t, db, exitOK, "check", "fresh", "--max-age", "1h")
		want := regexp.MustCompile(fmt.Sprintf(`^ok: "fresh": last success \S+ \(run %d\), [0-9.]+m?s ago, within 1h0m0s\n$`, fresh.ID))
		if !want.MatchString(r.stdout) || r.stderr != "" {
			t.Errorf("stdout %q does not match %v; stderr %q", r.stdout, want, r.stderr)
		}
		r = mustRun(t, db, exitOK, "check", "--max-age", "1d", "--json", "fresh")
		o := decodeObject(t, r.stdout, checkKeys...)
		if o["source"] != "fresh" || o["healthy"] != true || num(t, o["max_age_seconds"]) != 86400 ||
			num(t, o["last_success_run_id"]) != float64(fresh.ID) || o["running"] != false || o["failing"] != false ||
			o["running_run_id"] != nil || o["error"] != nil || o["last_finished_status"] != "succeeded" || o["success_unread"] != false {
			t.Errorf("JSON: %v", o)
		}
		if age := num(t, o["last_success_age_seconds"]); age < 0 || age > 60 {
			t.Errorf("last_success_age_seconds %v", age)
		}
		if !rfc3339(t, o["last_success_at"]).Equal(fresh.StartedAt) || rfc3339(t, o["checked_at"]).Before(fresh.StartedAt) {
			t.Errorf("times: %v", o)
		}
		if !strings.HasPrefix(o["message"].(string), `ok: "fresh": last success`) {
			t.Errorf("message %q", o["message"])
		}
	})

	t.Run("1 overdue", func(t *testing.T) {
		r := mustRun(t, db, exitOverdue, "check", "stale", "--max-age", "1h")
		for _, part := range []string{`overdue: "stale": last success `, fmt.Sprintf("(run %d), 3h0m", old.ID), "more than 1h0m0s",
			fmt.Sprintf("; run %d running for ", running.ID), fmt.Sprintf("; failing: run %d failed: upstream answered 503", failed.ID)} {
			if !strings.Contains(r.stdout, part) {
				t.Errorf("stdout %q lacks %q", r.stdout, part)
			}
		}
		if strings.Count(r.stdout, "\n") != 1 {
			t.Errorf("want one line: %q", r.stdout)
		}
		o := decodeObject(t, mustRun(t, db, exitOverdue, "check", "stale", "--max-age", "1h", "--json").stdout, checkKeys...)
		if o["healthy"] != false || o["running"] != true || num(t, o["running_run_id"]) != float64(running.ID) ||
			o["failing"] != true || o["last_finished_status"] != "failed" || o["last_finished_error"] != "upstream answered 503" ||
			num(t, o["last_success_run_id"]) != float64(old.ID) {
			t.Errorf("JSON: %v", o)
		}
		if age := num(t, o["last_success_age_seconds"]); age < 3*3600 || age > 3*3600+60 {
			t.Errorf("last_success_age_seconds %v, want 3h", age)
		}
		// Healthy with a longer age.
		mustRun(t, db, exitOK, "check", "stale", "--max-age", "4h")

		r = mustRun(t, db, exitOverdue, "check", "never", "--max-age", "1h")
		if !strings.HasPrefix(r.stdout, `overdue: "never": never succeeded; failing: run`) {
			t.Errorf("never: %q", r.stdout)
		}
		r = mustRun(t, db, exitOverdue, "check", "nobody", "--max-age", "1h")
		if r.stdout != "overdue: \"nobody\": never ran\n" {
			t.Errorf("nobody: %q", r.stdout)
		}
		o = decodeObject(t, mustRun(t, db, exitOverdue, "check", "nobody", "--max-age", "1h", "--json").stdout, checkKeys...)
		if o["last_success_at"] != nil || o["last_success_age_seconds"] != nil || o["last_finished_status"] != nil || o["checked_at"] == nil {
			t.Errorf("nobody JSON: %v", o)
		}
	})

	t.Run("2 usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"check", "fresh"},
			{"check", "--max-age", "1h"},
			{"check", "fresh", "--max-age", "0"},
			{"check", "fresh", "--max-age", "0s"},
			{"check", "fresh", "--max-age", "-1h"},
			{"check", "fresh", "--max-age", "soon"},
			{"check", "fresh", "--max-age", "1h", "--bogus"},
			{"check", "fresh", "--max-late", "1h"},
			{"check", "fresh", "--schedule", "@hourly"},
			{"check", "fresh", "--schedule", "every hour", "--max-late", "1h"},
			{"check", "fresh", "--max-run", "0"},
			{"check", "fresh", "other", "--max-age", "1h"},
			{"check", "bad\x00source", "--max-age", "1h"},
			{"check", "\xff", "--max-age", "1h"},
			{"check", strings.Repeat("x", runclaim.MaxSourceLen+1), "--max-age", "1h"},
			{"status", "--overdue", "0"},
			{"status", "--overdue", "-5m"},
			{"status", "--overdue", "1h", "fresh"},
		} {
			r := runCLI(t, db, nil, args...)
			if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "usage: runclaim") {
				t.Errorf("runclaim %q: exit %d, stdout %q, stderr %q; want a usage error", args, r.code, r.stdout, r.stderr)
			}
		}
	})

	t.Run("3 cannot tell", func(t *testing.T) {
		// No table.
		r := mustRun(t, db, exitCannotTell, "check", "fresh", "--max-age", "1h", "--table", "nowhere")
		if !strings.HasPrefix(r.stderr, "runclaim check: cannot tell: ") || !strings.Contains(r.stderr, "does not exist") ||
			!strings.Contains(r.stderr, "hint: run 'runclaim migrate'") || r.stdout != "" {
			t.Errorf("missing table: stdout %q, stderr %q", r.stdout, r.stderr)
		}
		r = mustRun(t, db, exitCannotTell, "check", "fresh", "--max-age", "1h", "--table", "nowhere", "--json")
		o := decodeObject(t, r.stdout, checkKeys...)
		if o["healthy"] != false || o["error"] == nil || !strings.Contains(o["error"].(string), "does not exist") {
			t.Errorf("missing table JSON: %v", o)
		}
		// No database.
		r = runVars(t, map[string]string{envDatabaseURL: "postgres://nobody:secret-pw@127.0.0.1:1/none?connect_timeout=5"}, nil, "check", "fresh", "--max-age", "1h")
		if r.code != exitCannotTell || !strings.HasPrefix(r.stderr, "runclaim check: cannot tell: ") || strings.Contains(r.stderr, "secret-pw") {
			t.Errorf("unreachable: exit %d, stderr %q; want %d, no password", r.code, r.stderr, exitCannotTell)
		}
	})
}

// TestCheckAlarms: --max-late judges the latest tick of the schedule
// that has a run or is old enough: late when its run started more than D
// after it, or none started D after it; --max-run fires for a run running
// longer than D. Each alarm exits 1, alone or with others, says which in
// its line and in the JSON's "alarms", and exits 0 when it does not fire.
func TestCheckAlarms(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	ctx := t.Context()
	c, err := runclaim.New(store, runclaim.WithLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// An hourly source whose run of the latest tick started within it.
	tick := runclaim.LatestTick(runclaim.Every(time.Hour), time.Now())
	run, err := c.Claim(ctx, "hourly", runclaim.ForTick(tick))
	if err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, db, exitOK, "check", "hourly", "--schedule", "@every 1h", "--max-late", "2h")
	if !strings.HasPrefix(r.stdout, fmt.Sprintf(`ok: "hourly": tick %s: run %d started `, tick.UTC().Format(time.RFC3339), run.ID)) {
		t.Errorf("on time: %q", r.stdout)
	}
	r = mustRun(t, db, exitOverdue, "check", "hourly", "--schedule", "@every 1h", "--max-late", "1ms", "--json")
	o := decodeObject(t, r.stdout, checkKeys...)
	if o["healthy"] != false || fmt.Sprint(o["alarms"]) != "[late]" || num(t, o["late_run_id"]) != float64(run.ID) ||
		!rfc3339(t, o["late_tick"]).Equal(tick) || o["max_age_seconds"] != nil || num(t, o["max_late_seconds"]) != 0.001 {
		t.Errorf("late run JSON: %v", o)
	}
	// A source with no run: the latest tick old enough to judge had none.
	r = mustRun(t, db, exitOverdue, "check", "nobody", "--schedule", "@every 1m", "--max-late", "1s")
	if !strings.HasPrefix(r.stdout, `late: "nobody": tick `) || !strings.Contains(r.stdout, "no run started within 1.0s of it") {
		t.Errorf("no run: %q", r.stdout)
	}
	// A run running for two hours.
	backdate(t, db, run.ID, 2*time.Hour)
	r = mustRun(t, db, exitOverdue, "check", "hourly", "--max-run", "1h")
	if !strings.HasPrefix(r.stdout, fmt.Sprintf(`overrun: "hourly": run %d (`, run.ID)) || !strings.Contains(r.stdout, "more than 1h00m") {
		t.Errorf("overrun: %q", r.stdout)
	}
	mustRun(t, db, exitOK, "check", "hourly", "--max-run", "3h")
	// Every alarm at once: one line each, and the alarms that fired.
	r = mustRun(t, db, exitOverdue, "check", "hourly", "--max-age", "1h", "--schedule", "@every 1h", "--max-late", "2h", "--max-run", "1h", "--json")
	o = decodeObject(t, r.stdout, checkKeys...)
	if fmt.Sprint(o["alarms"]) != "[overdue overrun]" || num(t, o["overrun_run_id"]) != float64(run.ID) || strings.Count(o["message"].(string), "\n") != 2 {
		t.Errorf("all alarms JSON: %v", o)
	}
}

// TestStatusOverdue: status --overdue lists the sources without a success
// within the age, and nothing else.
func TestStatusOverdue(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	r := mustRun(t, db, exitOK, "status", "--overdue", "1h")
	if r.stdout != "no source overdue: each of the 0 sources succeeded within 1h\n" {
		t.Errorf("empty: %q", r.stdout)
	}
	finished(t, store, "fresh", nil)
	if r := mustRun(t, db, exitOK, "status", "--overdue", "1h", "--json"); strings.TrimSpace(r.stdout) != "[]" { // none overdue: exit 0
		t.Errorf("status --overdue 1h --json with none overdue: %q", r.stdout)
	}
	old := finished(t, store, "stale", nil)
	backdate(t, db, old.ID, 3*time.Hour)
	finished(t, store, "never", fmt.Errorf("boom"))

	r = mustRun(t, db, exitOverdue, "status", "--overdue", "1h") // an alarm, as check is
	got := lines(r.stdout)
	if len(got) != 3 || !strings.HasPrefix(got[0], "SOURCE") || !strings.HasPrefix(got[1], "never ") || !strings.HasPrefix(got[2], "stale ") {
		t.Fatalf("want a header, never and stale:\n%s", r.stdout)
	}
	if !strings.Contains(got[1], " failed ") || !strings.Contains(got[2], " 3h0") {
		t.Errorf("rows:\n%s", r.stdout)
	}
	objs := decodeObjects(t, mustRun(t, db, exitOverdue, "status", "--overdue", "1h", "--json").stdout, checkKeys...)
	if len(objs) != 2 || objs[0]["source"] != "never" || objs[1]["source"] != "stale" || objs[1]["healthy"] != false ||
		num(t, objs[1]["last_success_run_id"]) != float64(old.ID) {
		t.Errorf("JSON: %v", objs)
	}
	r = mustRun(t, db, exitOverdue, "status", "--overdue", "4h")
	if got := lines(r.stdout); len(got) != 2 || !strings.HasPrefix(got[1], "never ") {
		t.Errorf("4h: %q", r.stdout)
	}
	// Without --overdue, status still lists running runs.
	if r := mustRun(t, db, exitOK, "status"); strings.TrimSpace(r.stdout) != "no running runs" {
		t.Errorf("status: %q", r.stdout)
	}
}

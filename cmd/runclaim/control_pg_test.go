package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestControlOnPostgres: pause, resume and trigger act on the runs table's
// store, and status lists the pauses with their notes and ends, and the
// pending triggers, in its table and in JSON.
func TestControlOnPostgres(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	ctx := t.Context()

	r := mustRun(t, db, exitOK, "pause", "avito", "--note", "banned; ticket 42")
	if want := `paused "avito" until 'runclaim resume' (note: banned; ticket 42)`; !strings.Contains(r.stdout, want) {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	err := claimErr(t, store, "avito", 0)
	var nc *runclaim.NotClaimedError
	if !errors.Is(err, runclaim.ErrPaused) || !errors.As(err, &nc) || nc.Note != "banned; ticket 42" || !nc.RetryAfter.IsZero() {
		t.Fatalf("claim after pause: %v, want ErrPaused with the note and no end", err)
	}

	// --until as a duration counts from the database's clock.
	var before time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&before); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, db, exitOK, "pause", "sync", "--until", "2h", "--note", "maintenance", "--json")
	end := rfc3339(t, decodeObject(t, r.stdout, "source", "paused_until", "note")["paused_until"])
	if end.Before(before.Add(2*time.Hour)) || end.After(before.Add(2*time.Hour+time.Minute)) {
		t.Errorf("--until 2h ended the pause at %v, want 2 h after the database's clock, %v", end, before)
	}
	if err := claimErr(t, store, "sync", 0); !errors.As(err, &nc) || !errors.Is(err, runclaim.ErrPaused) || !nc.RetryAfter.Equal(end) {
		t.Errorf("claim during the timed pause: %v, want ErrPaused until %v", err, end)
	}
	r = mustRun(t, db, exitUsage, "pause", "sync", "--until", before.Add(-time.Hour).Format(time.RFC3339))
	if !strings.Contains(r.stderr, "is in the past (the database's clock reads") {
		t.Errorf("pause until a time that has passed: stderr %q", r.stderr)
	}

	// A trigger: pending in status until a claim uses it.
	if err := claimErr(t, store, "report", time.Hour); err != nil {
		t.Fatal(err)
	}
	if r := mustRun(t, db, exitOK, "trigger", "report"); strings.Contains(r.stderr, "never run") {
		t.Errorf("trigger of a source that ran: stderr %q", r.stderr)
	}
	mustRun(t, db, exitOK, "trigger", "avito") // waits for the pause

	r = mustRun(t, db, exitOK, "status")
	got := lines(r.stdout)
	if len(got) != 5 || got[0] != "no running runs" {
		t.Fatalf("status: want no runs, then a header and 3 rows:\n%s", r.stdout)
	}
	for i, want := range []string{
		`^SOURCE +PAUSED +TRIGGER +NOTE$`,
		`^avito +until resumed +pending since \S+ +banned; ticket 42$`,
		`^report +- +pending since \S+ +-$`,
		`^sync +until \S+ \((1h59m[0-9]{2}s|2h00m) left\) +- +maintenance$`,
	} {
		if !matches(want, got[i+1]) {
			t.Errorf("status line %d %q does not match %s", i+1, got[i+1], want)
		}
	}
	// The runs, the pauses and the triggers, each in a list of its own.
	busy := hold(t, store, "busy", "host-b")
	running, paused, triggered := statusLists(t, mustRun(t, db, exitOK, "status", "--json").stdout)
	if len(running) != 1 || running[0]["source"] != "busy" || running[0]["status"] != "running" {
		t.Errorf("status --json: running %v", running)
	}
	if len(paused) != 2 || paused[0]["source"] != "avito" || paused[0]["status"] != "paused" || paused[0]["note"] != "banned; ticket 42" ||
		paused[0]["paused_until"] != nil || paused[0]["triggered_at"] == nil ||
		paused[1]["source"] != "sync" || !rfc3339(t, paused[1]["paused_until"]).Equal(end) || paused[1]["triggered_at"] != nil {
		t.Errorf("status --json: paused %v", paused)
	}
	// avito is paused with a pending trigger: in both lists.
	if len(triggered) != 2 || triggered[0]["source"] != "avito" || triggered[0]["status"] != "triggered" ||
		triggered[1]["source"] != "report" || triggered[1]["status"] != "triggered" || triggered[1]["paused_at"] != nil {
		t.Errorf("status --json: triggered %v", triggered)
	}
	if err := busy.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, db, exitOK, "status", "report")
	if got := lines(r.stdout); len(got) != 3 || !strings.HasPrefix(got[2], "report ") {
		t.Errorf("status report: %q", r.stdout)
	}

	if err := claimErr(t, store, "report", time.Hour); err != nil {
		t.Errorf("triggered claim: %v", err)
	}
	if r := mustRun(t, db, exitOK, "resume", "avito", "--json"); decodeObject(t, r.stdout, "source", "was_paused")["was_paused"] != true {
		t.Errorf("resume of a paused source: %s, want was_paused true", r.stdout)
	}
	// Resuming again, or a source never paused (a typo), says so.
	for _, source := range []string{"avito", "avitoo"} {
		if r := mustRun(t, db, exitOK, "resume", source); r.stdout != fmt.Sprintf("%q was not paused: nothing to resume\n", source) {
			t.Errorf("resume %s, not paused: %q", source, r.stdout)
		}
		if r := mustRun(t, db, exitOK, "resume", source, "--json"); decodeObject(t, r.stdout, "source", "was_paused")["was_paused"] != false {
			t.Errorf("resume %s --json, not paused: %s, want was_paused false", source, r.stdout)
		}
	}
	if err := claimErr(t, store, "avito", 0); err != nil {
		t.Errorf("claim after resume: %v", err)
	}
	r = mustRun(t, db, exitOK, "status")
	if got := lines(r.stdout); len(got) != 3 || !strings.HasPrefix(got[2], "sync ") {
		t.Errorf("status once the triggers are used and avito resumed: %q", r.stdout)
	}
}

// TestControlOnOlderSchema: on a table at schema version 4 the commands
// fail with exit 1 and a line that says to migrate; status lists the runs
// as before; migrate --status names the missing step.
func TestControlOnOlderSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range store.Migrations()[:4] {
		if _, err := db.Pool.Exec(t.Context(), m.Up); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"pause", "avito"}, {"resume", "avito"}, {"trigger", "avito"}} {
		r := mustRun(t, db, exitError, args...)
		if !strings.Contains(r.stderr, "need schema version 5: run Migrate") {
			t.Errorf("%s on a version 4 table: stderr %q", args[0], r.stderr)
		}
	}
	// A run a replica of a release of then recorded.
	if _, err := db.Pool.Exec(t.Context(), `INSERT INTO `+store.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at)
VALUES ('alpha', 'running', 'host-a', clock_timestamp(), clock_timestamp() + interval '1 hour', clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	if got := lines(mustRun(t, db, exitOK, "status").stdout); len(got) != 2 || !strings.HasPrefix(got[1], "alpha ") {
		t.Errorf("status on a version 4 table: %q", got)
	}
	r := runCLI(t, db, nil, "migrate", "--status")
	if r.code != 3 || !strings.Contains(r.stdout, "add pauses and triggers") {
		t.Errorf("migrate --status on a version 4 table: exit %d, %q", r.code, r.stdout)
	}
	mustRun(t, db, exitOK, "migrate")
	mustRun(t, db, exitOK, "pause", "avito")
}

// matches reports whether s matches the regular expression re.
func matches(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// TestTriggerUnknownSource: a trigger of a name the table does not know
// (no run, no pause, no trigger) is set, with a note to check the name,
// and "seen": false in JSON; a source that ran gets no note.
func TestTriggerUnknownSource(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	if err := claimErr(t, store, "report", 0); err != nil {
		t.Fatal(err)
	}
	if r := mustRun(t, db, exitOK, "trigger", "report"); strings.Contains(r.stderr, "never run") {
		t.Errorf("trigger of a source that ran: stderr %q", r.stderr)
	}
	if r := mustRun(t, db, exitOK, "trigger", "reprot"); !strings.Contains(r.stderr, `"reprot" has never run here`) {
		t.Errorf("trigger of a source that never ran: stderr %q, want a note", r.stderr)
	}
	if o := decodeObject(t, mustRun(t, db, exitOK, "trigger", "reprot2", "--json").stdout, "source", "seen"); o["seen"] != false {
		t.Errorf("trigger --json of a source that never ran: %v", o)
	}
	// Once triggered, the name is known.
	if o := decodeObject(t, mustRun(t, db, exitOK, "trigger", "reprot2", "--json").stdout, "source", "seen"); o["seen"] != true {
		t.Errorf("trigger --json of a source triggered before: %v", o)
	}
}

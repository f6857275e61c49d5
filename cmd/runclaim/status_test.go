package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

var statusKeys = []string{"source", "run_id", "owner", "status", "started_at", "lease_until", "heartbeat_at", "tick",
	"checked_at", "age_seconds", "heartbeat_age_seconds", "lease_left_seconds", "expired"}

// controlKeys are the keys of a pause or a pending trigger in status --json.
var controlKeys = []string{"source", "status", "paused_at", "paused_until", "note", "triggered_at", "checked_at"}

// coolingJSONKeys are the keys of a key cooling down in status --json.
var coolingJSONKeys = []string{"key", "status", "cooling_until", "note", "checked_at"}

// statusLists decodes status --json: an object with exactly the lists
// running, paused, triggered and cooling, whose objects have the keys they
// should.
func statusLists(t *testing.T, out string) (running, paused, triggered []map[string]any) {
	t.Helper()
	lists := statusObject(t, out)
	return decodeObjects(t, string(lists["running"]), statusKeys...),
		decodeObjects(t, string(lists["paused"]), controlKeys...),
		decodeObjects(t, string(lists["triggered"]), controlKeys...)
}

// statusCooling is the cooling list of status --json.
func statusCooling(t *testing.T, out string) []map[string]any {
	t.Helper()
	return decodeObjects(t, string(statusObject(t, out)["cooling"]), coolingJSONKeys...)
}

// statusObject decodes status --json into its four lists and
// cooling_truncated, undecoded.
func statusObject(t *testing.T, out string) map[string]json.RawMessage {
	t.Helper()
	var lists map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &lists); err != nil {
		t.Fatalf("status --json is not an object: %v\n%s", err, out)
	}
	if len(lists) != 5 || lists["running"] == nil || lists["paused"] == nil || lists["triggered"] == nil || lists["cooling"] == nil {
		t.Fatalf("status --json has keys other than running, paused, triggered, cooling and cooling_truncated:\n%s", out)
	}
	if b := string(lists["cooling_truncated"]); b != "true" && b != "false" {
		t.Fatalf("status --json: cooling_truncated is %q, want true or false:\n%s", b, out)
	}
	return lists
}

// statusRunning is the running list of status --json.
func statusRunning(t *testing.T, out string) []map[string]any {
	t.Helper()
	running, _, _ := statusLists(t, out)
	return running
}

func TestStatus(t *testing.T) {
	t.Parallel()
	db, store := setup(t)

	r := mustRun(t, db, exitOK, "status")
	if strings.TrimSpace(r.stdout) != "no running runs" {
		t.Errorf("empty status: %q", r.stdout)
	}
	r = mustRun(t, db, exitOK, "status", "--json")
	if got := statusRunning(t, r.stdout); len(got) != 0 {
		t.Errorf("empty status JSON: %s", r.stdout)
	}
	r = mustRun(t, db, exitOK, "status", "alpha")
	if strings.TrimSpace(r.stdout) != `no running run of "alpha"` {
		t.Errorf("empty status of alpha: %q", r.stdout)
	}

	alpha := hold(t, store, "alpha", "host-a")
	beta := hold(t, store, "beta", "host-b")
	// beta's holder died: its lease passed a minute ago.
	if _, err := db.Pool.Exec(t.Context(),
		`UPDATE runclaim_runs SET lease_until = pg_catalog.clock_timestamp() - interval '1 minute' WHERE id = $1`, beta.ID); err != nil {
		t.Fatal(err)
	}

	t.Run("table", func(t *testing.T) {
		r := mustRun(t, db, exitOK, "status")
		got := lines(r.stdout)
		if len(got) != 3 {
			t.Fatalf("want a header and 2 rows:\n%s", r.stdout)
		}
		for _, col := range []string{"SOURCE", "RUN", "OWNER", "STARTED", "AGE", "HEARTBEAT", "LEASE LEFT"} {
			if !strings.Contains(got[0], col) {
				t.Errorf("header %q lacks %s", got[0], col)
			}
		}
		rowA := regexp.MustCompile(fmt.Sprintf(`^alpha +%d +host-a +\S+ +- +[0-9.]+m?s +[0-9.]+m?s ago +(59m[0-9]{2}s|1h00m)$`, alpha.ID))
		if !rowA.MatchString(got[1]) {
			t.Errorf("alpha row %q does not match %v", got[1], rowA)
		}
		rowB := regexp.MustCompile(fmt.Sprintf(`^beta +%d +host-b .* EXPIRED \(-1m0[0-9]s\)$`, beta.ID))
		if !rowB.MatchString(got[2]) {
			t.Errorf("beta row %q does not match %v", got[2], rowB)
		}
	})

	t.Run("JSON", func(t *testing.T) {
		r := mustRun(t, db, exitOK, "--json", "status") // the global flag before the command
		objs := statusRunning(t, r.stdout)
		if len(objs) != 2 {
			t.Fatalf("want 2 runs:\n%s", r.stdout)
		}
		a, b := objs[0], objs[1]
		if a["source"] != "alpha" || num(t, a["run_id"]) != float64(alpha.ID) || a["owner"] != "host-a" ||
			a["status"] != "running" || a["expired"] != false {
			t.Errorf("alpha: %v", a)
		}
		if !rfc3339(t, a["started_at"]).Equal(alpha.StartedAt) || !rfc3339(t, a["lease_until"]).Equal(alpha.LeaseUntil) {
			t.Errorf("alpha times: %v, want started %v, lease until %v", a, alpha.StartedAt, alpha.LeaseUntil)
		}
		checked := rfc3339(t, a["checked_at"])
		age := num(t, a["age_seconds"])
		if want := checked.Sub(alpha.StartedAt).Seconds(); age < 0 || age-want > 1e-6 || want-age > 1e-6 {
			t.Errorf("alpha age %v, want %v (database clock)", age, want)
		}
		if left := num(t, a["lease_left_seconds"]); left <= 3500 || left > 3600 {
			t.Errorf("alpha lease left %v, want just under an hour", left)
		}
		if num(t, a["heartbeat_age_seconds"]) < 0 {
			t.Errorf("alpha heartbeat age %v", a["heartbeat_age_seconds"])
		}
		if b["source"] != "beta" || b["expired"] != true {
			t.Errorf("beta: %v", b)
		}
		if left := num(t, b["lease_left_seconds"]); left > -60 || left < -120 {
			t.Errorf("beta lease left %v, want about -60", left)
		}
	})

	t.Run("one source", func(t *testing.T) {
		r := mustRun(t, db, exitOK, "status", "beta", "--json")
		objs := statusRunning(t, r.stdout)
		if len(objs) != 1 || objs[0]["source"] != "beta" {
			t.Errorf("status beta: %s", r.stdout)
		}
		if r := runCLI(t, db, nil, "status", "bad\nsource"); r.code != exitUsage || !strings.Contains(r.stderr, "invalid source") {
			t.Errorf("invalid source: %+v", r)
		}
	})

	t.Run("finished runs are not running", func(t *testing.T) {
		if err := alpha.Finish(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
		r := mustRun(t, db, exitOK, "status", "--json")
		if objs := statusRunning(t, r.stdout); len(objs) != 1 || objs[0]["source"] != "beta" {
			t.Errorf("status after alpha finished: %s", r.stdout)
		}
	})
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                                 "0s",
		850 * time.Millisecond:            "850ms",
		12340 * time.Millisecond:          "12.3s",
		-12340 * time.Millisecond:         "-12.3s",
		4*time.Minute + 5*time.Second:     "4m05s",
		3*time.Hour + 12*time.Minute:      "3h12m",
		52 * time.Hour:                    "2d04h",
		59*time.Minute + 59*time.Second:   "59m59s",
		-(time.Minute + 2*time.Second):    "-1m02s",
		time.Hour - 200*time.Millisecond:  "1h00m",
		24*time.Hour - 10*time.Second:     "1d00h",
		59950 * time.Millisecond:          "1m00s",
		365 * 24 * time.Hour:              "365d00h",
		1500 * time.Microsecond:           "2ms",
		time.Second + 40*time.Millisecond: "1.0s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

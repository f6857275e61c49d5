package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseTick(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 2, 500_000_000, time.UTC) // cron started the job 2.5 s late
	for _, tc := range []struct {
		tick  string
		every time.Duration
		want  time.Time
		bad   bool
	}{
		{"", 0, time.Time{}, false},
		{"now", 5 * time.Minute, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), false},
		{"now", time.Second, time.Date(2026, 3, 1, 12, 0, 3, 0, time.UTC), false},
		{"2026-03-01T11:55:00Z", 0, time.Date(2026, 3, 1, 11, 55, 0, 0, time.UTC), false},
		{"2026-03-01T14:55:00+03:00", 0, time.Date(2026, 3, 1, 11, 55, 0, 0, time.UTC), false},
		{"now", 0, time.Time{}, true},
		{"now", -time.Minute, time.Time{}, true},
		{"", time.Minute, time.Time{}, true},
		{"2026-03-01T11:55:00Z", time.Minute, time.Time{}, true},
		{"yesterday", 0, time.Time{}, true},
		{"0001-01-01T00:00:00Z", 0, time.Time{}, true},
		// Ticks the store keeps as they are: from the second microsecond
		// of year 1 to the end of year 9999, in UTC.
		{"0001-01-01T00:00:00.000001Z", 0, time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC), false},
		{"9999-12-31T23:59:59.999999Z", 0, time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC), false},
		// The first microsecond of year 1 is cut down to the zero time,
		// which means no tick; a time zone can move a tick out of the
		// years 1 to 9999.
		{"0001-01-01T00:00:00.0000005Z", 0, time.Time{}, true},
		{"0001-01-01T00:00:00.000000999Z", 0, time.Time{}, true},
		{"0001-01-01T00:30:00+01:00", 0, time.Time{}, true},
		{"9999-12-31T23:30:00-01:00", 0, time.Time{}, true},
	} {
		got, err := parseTick(tc.tick, tc.every, now)
		if (err != nil) != tc.bad || !got.Equal(tc.want) {
			t.Errorf("parseTick(%q, %v) = %v, %v; want %v, error %v", tc.tick, tc.every, got, err, tc.want, tc.bad)
		}
		if err != nil && (strings.HasPrefix(tc.tick, "0001-") || strings.HasPrefix(tc.tick, "9999-")) && !strings.Contains(err.Error(), "--tick "+tc.tick) {
			t.Errorf("parseTick(%q): %v does not name the tick given", tc.tick, err)
		}
	}
}

// TestExecTick: exec --tick runs the command once for a tick, on any host
// and however late; a second exec of the same tick, or of an older one, is
// skipped with --skip-exit-code and says why; history and status show the
// tick; bad --tick and --every values are usage errors that run nothing.
func TestExecTick(t *testing.T) {
	db, store := setup(t)
	const tick = "2026-03-01T12:00:00Z"
	if r := runCLI(t, db, nil, "exec", "--source", "ticked", "--tick", tick, "--", "true"); r.code != 0 {
		t.Fatalf("first exec of the tick: %+v", r)
	}
	for _, tk := range []string{tick, "2026-03-01T11:55:00Z"} {
		r := runCLI(t, db, nil, "exec", "--source", "ticked", "--tick", tk, "--", "sh", "-c", "echo ran")
		if r.code != exitSkipped || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, "was run already") {
			t.Errorf("exec of tick %s after it was run: %+v; want exit %d, nothing run, and why", tk, r, exitSkipped)
		}
	}
	runs := history(t, store, "ticked")
	if len(runs) != 1 || !runs[0].Tick.Equal(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("history: %+v, want one run of the tick", runs)
	}
	r := mustRun(t, db, exitOK, "history", "ticked")
	if !strings.Contains(r.stdout, "TICK") || !strings.Contains(r.stdout, tick) {
		t.Errorf("history table does not show the tick:\n%s", r.stdout)
	}
	r = mustRun(t, db, exitOK, "history", "ticked", "--json")
	if objs := decodeObjects(t, r.stdout, historyKeys...); len(objs) != 1 || objs[0]["tick"] != tick {
		t.Errorf("history --json: %v, want the tick %s", objs, tick)
	}
	for _, args := range [][]string{
		{"--tick", "now"},
		{"--tick", "noon"},
		{"--every", "5m"},
		{"--tick", tick, "--every", "5m"},
		{"--tick", "0001-01-01T00:00:00.0000005Z"},
		{"--tick", "9999-12-31T23:30:00-01:00"},
	} {
		r := runCLI(t, db, nil, append(append([]string{"exec", "--source", "bad-tick"}, args...), "--", "sh", "-c", "echo ran")...)
		if r.code != exitUsage || strings.Contains(r.stdout, "ran") {
			t.Errorf("exec %v: %+v; want a usage error", args, r)
		}
	}
	// A tick in the first microsecond of year 1 is refused as the zero
	// time is, before anything connects, and says why.
	r = runCLI(t, db, nil, "exec", "--source", "bad-tick", "--tick", "0001-01-01T00:00:00.0000005Z", "--", "sh", "-c", "echo ran")
	if r.code != exitUsage || !strings.Contains(r.stderr, "first microsecond of year 1") {
		t.Errorf("exec --tick in the first microsecond of year 1: %+v; want a usage error that says why", r)
	}
	if runs := history(t, store, "bad-tick"); len(runs) != 0 {
		t.Errorf("bad --tick values wrote runs: %+v", runs)
	}
}

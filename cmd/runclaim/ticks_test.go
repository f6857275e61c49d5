package main

import (
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// TestDescribeTicks: each tick of a schedule is told as ran (by the run
// that named it, else by the first run that started before the next
// tick, with its lateness), overlapped by a run that held the source at
// it (an expired run holds it until its lease's end, not until a later
// claim expired it; a live run, to now), paused by the current pause, or
// not run.
func TestDescribeTicks(t *testing.T) {
	t.Parallel()
	sched, err := parseSchedule("@every 10m")
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	at := func(min int, d time.Duration) time.Time { return base.Add(time.Duration(min)*time.Minute + d) }
	now := at(70, 30*time.Second)
	ticks, err := ticksOf(sched, at(0, 0), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(ticks) != 8 || !ticks[0].Equal(at(0, 0)) || !ticks[7].Equal(at(70, 0)) {
		t.Fatalf("ticks %v, want 10:00 to 11:10 every 10m", ticks)
	}
	run := func(id int64, status runclaim.Status, start, end, lease time.Time, tick time.Time) runclaim.RunRecord {
		return runclaim.RunRecord{RunInfo: runclaim.RunInfo{ID: id, StartedAt: start, LeaseUntil: lease, Tick: tick}, Status: status, FinishedAt: end}
	}
	runs := []runclaim.RunRecord{
		// Newest first, as history reads them.
		run(5, runclaim.StatusRunning, at(60, 4*time.Second), time.Time{}, now.Add(time.Minute), time.Time{}),
		run(4, runclaim.StatusSucceeded, at(50, 9*time.Minute), at(50, 9*time.Minute+time.Second), at(60, 0), at(40, 0)), // named tick 10:40, late
		run(3, runclaim.StatusExpired, at(30, time.Second), at(55, 0), at(31, 0), time.Time{}),                           // expired by a later claim: held until 10:31
		run(2, runclaim.StatusFailed, at(10, 5*time.Second), at(23, 0), at(24, 0), time.Time{}),                          // ran past 10:20
		run(1, runclaim.StatusSucceeded, at(0, 2*time.Second), at(1, 0), at(1, 0), at(0, 0)),
	}
	ctl := &runclaim.SourceControl{Paused: false, PausedAt: at(45, 0), PausedUntil: at(52, 0)}
	got := describeTicks(sched, ticks, runs, ctl, now)
	want := []struct {
		outcome string
		run     int64
		late    time.Duration
	}{
		{tickRan, 1, 2 * time.Second},  // 10:00
		{tickRan, 2, 5 * time.Second},  // 10:10
		{tickOverlapped, 2, 0},         // 10:20: run 2 ran until 10:23
		{tickRan, 3, time.Second},      // 10:30
		{tickRan, 4, 19 * time.Minute}, // 10:40, named by run 4
		{tickPaused, 0, 0},             // 10:50: the pause of 10:45-10:52
		{tickRan, 5, 4 * time.Second},  // 11:00
		{tickOverlapped, 5, 0},         // 11:10: run 5 is live
	}
	for i, w := range want {
		g := got[i]
		var id int64
		if g.Run != nil {
			id = g.Run.ID
		}
		if g.Outcome != w.outcome || (w.run != 0 && id != w.run) || (w.outcome == tickRan && g.Late != w.late) ||
			(w.outcome == tickOverlapped && g.OverlappedBy != w.run) {
			t.Errorf("tick %s: %s by run %d, late %v; want %s by run %d, late %v", g.Tick.Format("15:04"), g.Outcome, id, g.Late, w.outcome, w.run, w.late)
		}
	}
	// Without the pause, 10:50 was not run: nothing held the source.
	if got := describeTicks(sched, ticks, runs, nil, now); got[5].Outcome != tickNotRun {
		t.Errorf("tick 10:50 without a pause: %s, want %s", got[5].Outcome, tickNotRun)
	}
	// A second of ticks over a week is refused, not listed.
	every, _ := parseSchedule("@every 1s")
	if _, err := ticksOf(every, now.Add(-7*24*time.Hour), now); err == nil {
		t.Error("ticksOf of 604800 ticks: nil error")
	}
}

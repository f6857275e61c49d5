package gocronlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/gocronlock"
	"github.com/runclaim/runclaim/internal/testclock"
)

// readmeLocker is a Locker configured as the README's gocron snippet
// configures one, for a job named name with the CronJob spec spec, naming
// ticks by now. Keep it in step with the README.
func readmeLocker(t *testing.T, c *runclaim.Claimer, name, spec string, now func() time.Time) *gocronlock.Locker {
	t.Helper()
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		t.Fatal(err)
	}
	return newLocker(t, c, gocronlock.WithSchedule(name, sched), gocronlock.WithClock(now))
}

// TestLateLockRunsFiringOnce is a replica whose Lock comes late (a GC
// pause, a throttled container, a job queued behind gocron's limit mode):
// two replicas configured as the README shows serve a job on a schedule of
// a minute or more, and the second one's Lock comes from 600 ms to 5 s
// after the first one's, after the first one's run has finished. Each
// firing must run once: the late Lock must name the firing the early one
// ran, and be skipped with ErrTickDone.
func TestLateLockRunsFiringOnce(t *testing.T) {
	for _, spec := range []string{"* * * * *", "*/5 * * * *"} {
		for _, lateness := range []time.Duration{600 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second} {
			t.Run(fmt.Sprintf("%s/%v", spec, lateness), func(t *testing.T) {
				start := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
				clk := testclock.New(start)
				store := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
				early := readmeLocker(t, newClaimer(t, store, runclaim.WithOwner("early")), "sweep", spec, clk.Now)
				late := readmeLocker(t, newClaimer(t, store, runclaim.WithOwner("late")), "sweep", spec, clk.Now)
				period := time.Minute
				if spec == "*/5 * * * *" {
					period = 5 * time.Minute
				}
				ran := map[time.Time][]string{}
				for i := range 3 {
					firing := start.Add(time.Duration(i+1) * period)
					clk.Advance(firing.Add(3 * time.Millisecond).Sub(clk.Now()))
					if err := lockUnlock(t, early, "sweep"); err != nil {
						t.Fatalf("firing %s: the early replica's Lock: %v", firing.Format(time.TimeOnly), err)
					}
					ran[firing] = append(ran[firing], "early")
					clk.Advance(lateness - 3*time.Millisecond)
					err := lockUnlock(t, late, "sweep")
					if err == nil {
						ran[firing] = append(ran[firing], "late")
					}
					if len(ran[firing]) != 1 {
						t.Errorf("firing %s: the job ran on %v, the late replica's Lock coming %v after the firing; want one run", firing.Format(time.TimeOnly), ran[firing], lateness)
						continue
					}
					nc, ok := errors.AsType[*runclaim.NotClaimedError](err)
					if !ok || !errors.Is(err, runclaim.ErrTickDone) || !nc.Tick.Equal(firing) {
						t.Errorf("firing %s: the late replica's Lock: %v; want ErrTickDone for the firing's tick", firing.Format(time.TimeOnly), err)
					}
				}
			})
		}
	}
}

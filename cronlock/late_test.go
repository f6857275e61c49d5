package cronlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/cronlock"
	"github.com/runclaim/runclaim/internal/testclock"
)

// readmeJob is a job wrapped as the README's robfig/cron snippet wraps one
// (or, for the variant "Job", as docs/schedulers.md's Job snippet does),
// for the source "sweep" and the spec spec, naming ticks by now. Keep it
// in step with the README.
func readmeJob(t *testing.T, variant string, claimer *runclaim.Claimer, spec string, logger cron.Logger, now func() time.Time, work func()) cron.Job {
	t.Helper()
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		t.Fatal(err)
	}
	if variant == "Job" {
		return must[cron.Job](t)(cronlock.Job(t.Context(), claimer, "sweep", logger, func(context.Context, *runclaim.Run) error {
			work()
			return nil
		}, cronlock.WithSchedule(sched), cronlock.WithClock(now)))
	}
	claimed := must[cron.JobWrapper](t)(cronlock.SkipUnlessClaimed(claimer, "sweep", logger, cronlock.WithSchedule(sched), cronlock.WithClock(now)))
	return cron.NewChain(cron.Recover(logger)).Then(claimed(cron.FuncJob(work)))
}

// TestLateRunRunsFiringOnce is a replica whose job starts late (a GC
// pause, a throttled container): two replicas configured as the README
// shows serve a job on a schedule of a minute or more, and the second
// one's job starts from 600 ms to 5 s after the first one's, after the
// first one's run has finished. Each firing must run once, and the late
// replica's start be logged as a skip for "tick done". Both wrappers are
// checked.
func TestLateRunRunsFiringOnce(t *testing.T) {
	for _, variant := range []string{"SkipUnlessClaimed", "Job"} {
		for _, spec := range []string{"* * * * *", "*/5 * * * *"} {
			for _, lateness := range []time.Duration{600 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second} {
				t.Run(fmt.Sprintf("%s/%s/%v", variant, spec, lateness), func(t *testing.T) {
					start := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
					clk := testclock.New(start)
					store := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
					log := &recorder{}
					ran := map[string]int{}
					replica := func(name string) cron.Job {
						claimer, err := runclaim.New(store, runclaim.WithOwner(name))
						if err != nil {
							t.Fatal(err)
						}
						return readmeJob(t, variant, claimer, spec, log, clk.Now, func() { ran[name]++ })
					}
					early, late := replica("early"), replica("late")
					period := time.Minute
					if spec == "*/5 * * * *" {
						period = 5 * time.Minute
					}
					for i := range 3 {
						firing := start.Add(time.Duration(i+1) * period)
						log.reset()
						clk.Advance(firing.Add(3 * time.Millisecond).Sub(clk.Now()))
						early.Run()
						clk.Advance(lateness - 3*time.Millisecond)
						late.Run()
						if ran["early"] != i+1 || ran["late"] != 0 || log.String() != "info skip [source sweep reason tick done]" {
							t.Fatalf("firing %s, the late replica's job starting %v after it: ran %v in all, logged %q; want one more run, on the early replica, and a skip as tick done",
								firing.Format(time.TimeOnly), lateness, ran, log.String())
						}
					}
				})
			}
		}
	}
}

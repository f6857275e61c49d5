package cronlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/cronlock"
	"github.com/runclaim/runclaim/internal/testclock"
)

// TestTicks checks the tick each wrapper names, on a store and wrappers
// that share a fake clock: the latest tick of the schedule, so a late
// replica's run is skipped as "tick done" however long after the job
// finished, and the schedule's next tick is a new one; with a starting
// deadline as well, the job run at a replica's start catches up on the
// latest tick within the deadline, and skips it beyond.
func TestTicks(t *testing.T) {
	for _, variant := range []string{"SkipUnlessClaimed", "Job"} {
		t.Run(variant, func(t *testing.T) {
			clk := testclock.New(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
			store := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
			log := &recorder{}
			ran := map[string]int{}
			replica := func(name string, opts ...cronlock.Option) cron.Job {
				claimer, err := runclaim.New(store, runclaim.WithOwner(name))
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, cronlock.WithClock(clk.Now))
				if variant == "Job" {
					return must[cron.Job](t)(cronlock.Job(t.Context(), claimer, "job/"+name[:1], log, func(context.Context, *runclaim.Run) error {
						ran[name]++
						return nil
					}, opts...))
				}
				return must[cron.JobWrapper](t)(cronlock.SkipUnlessClaimed(claimer, "job/"+name[:1], log, opts...))(cron.FuncJob(func() { ran[name]++ }))
			}
			// Same first letter, same source. A schedule of a second.
			everySecond := cronlock.WithSchedule(runclaim.Every(time.Second))
			early, late := replica("e-early", everySecond), replica("e-late", everySecond)
			clk.Advance(3 * time.Millisecond)
			early.Run()
			clk.Advance(400 * time.Millisecond)
			late.Run()
			if ran["e-late"] != 0 || log.String() != "info skip [source job/e reason tick done]" {
				t.Fatalf("late run of the same tick: ran %v, logged %q; want a skip as tick done", ran, log.String())
			}
			clk.Advance(time.Second)
			late.Run()
			if ran["e-early"] != 1 || ran["e-late"] != 1 {
				t.Fatalf("ran %v (logged %q); want once each", ran, log.String())
			}

			log.reset()
			opts := []cronlock.Option{cronlock.WithSchedule(runclaim.Every(time.Minute)), cronlock.WithStartingDeadline(30 * time.Second)}
			a, b := replica("m-a", opts...), replica("m-b", opts...)
			clk.Advance(20 * time.Second) // 12:00:21.403: back from a restart
			a.Run()
			b.Run()
			if ran["m-a"] != 1 || ran["m-b"] != 0 || log.String() != "info skip [source job/m reason tick done]" {
				t.Fatalf("catching up 21 s after a tick with a deadline of 30 s: ran %v, logged %q; want one run", ran, log.String())
			}
			log.reset()
			clk.Advance(time.Minute + 10*time.Second) // 12:01:31.403
			b.Run()
			if ran["m-b"] != 0 || !strings.HasPrefix(log.String(), "info skip [source job/m reason missed") {
				t.Fatalf("31 s after a tick with a deadline of 30 s: ran %v, logged %q; want a skip as missed", ran, log.String())
			}
			clk.Advance(29 * time.Second) // 12:02:00.403, on time
			b.Run()
			if ran["m-b"] != 1 {
				t.Fatalf("on time: ran %v, logged %q", ran, log.String())
			}
		})
	}
}

// TestJobKeepsRunAliveAfterCancel cancels Job's ctx, as a service does at
// shutdown, while fn winds down past its lease: the run must stay
// alive meanwhile, so that another replica cannot start the source while
// fn still runs (runclaim.Do's rule: a run is kept alive until fn returns,
// whatever happens to ctx).
func TestJobKeepsRunAliveAfterCancel(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			store := sc.Open(t)
			// Three seconds, heartbeats every 300 ms: only 2.7 s without a
			// successful heartbeat loses the run, which a busy machine
			// rarely causes (a lease of 300 ms with heartbeats every 50 ms
			// could: one heartbeat slower than 250 ms). Beside two busy
			// loops CI saw it once: a case whose overlap came after no
			// heartbeat got through for a lease is run again with a lease
			// twice as long, up to 12 s. Heartbeats that stop at the
			// cancel let the other replica in at every length.
			for _, lease := range []time.Duration{3 * time.Second, 6 * time.Second, 12 * time.Second} {
				overlaps := windDown(t, store, lease)
				if len(overlaps) == 0 {
					return
				}
				t.Logf("lease %v: another replica started the source %d times while fn wound down (at %v after the cancel)", lease, len(overlaps), overlaps)
			}
			t.Errorf("another replica started the source while fn wound down, at every lease tried")
		})
	}
}

// windDown runs TestJobKeepsRunAliveAfterCancel's case with lease, and
// returns when, after the cancel, another replica started the source.
func windDown(t *testing.T, store runclaim.Store, lease time.Duration) []string {
	t.Helper()
	source := fmt.Sprintf("wind-down-%v", lease)
	claimer, err := runclaim.New(store, runclaim.WithLease(lease), runclaim.WithHeartbeat(lease/10), runclaim.WithOwner("winding-down"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := runclaim.New(store, runclaim.WithLease(lease), runclaim.WithOwner("other"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var overlaps []string
	job := must[cron.Job](t)(cronlock.Job(ctx, claimer, source, cron.DiscardLogger, func(runCtx context.Context, _ *runclaim.Run) error {
		cancel() // the service shuts down
		<-runCtx.Done()
		// Wind down past the claim's own lease end (the claim ran
		// before fn started), while another replica tries to claim
		// the source: only heartbeats after the cancel keep it out.
		for start := time.Now(); time.Since(start) < lease+lease/4; time.Sleep(lease / 20) {
			run, err := other.Claim(context.Background(), source)
			switch {
			case err == nil:
				overlaps = append(overlaps, time.Since(start).Round(time.Millisecond).String())
				_ = run.Finish(context.Background(), nil)
			case !errors.Is(err, runclaim.ErrAlreadyRunning):
				t.Errorf("other claim: %v", err)
			}
		}
		return runCtx.Err()
	}, everyMinute))
	job.Run()
	return overlaps
}

package cronlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/cronlock"
	"github.com/runclaim/runclaim/internal/testclock"
)

// TestSplayWindow checks the window on a store with a fake clock, for both
// wrappers: after a run starts, the other replica's tick is skipped as too
// soon until the window has passed; WithSplay sets the window, 0 turns it
// off, and a longer minimum interval of the Claimer's own wins.
func TestSplayWindow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []cronlock.Option
		claim  []runclaim.Option
		window time.Duration
	}{
		{"default", nil, nil, cronlock.DefaultSplay},
		{"WithSplay", []cronlock.Option{cronlock.WithSplay(3 * time.Second)}, nil, 3 * time.Second},
		{"WithSplay(0)", []cronlock.Option{cronlock.WithSplay(0)}, nil, 0},
		{"longer claimer interval", nil, []runclaim.Option{runclaim.WithMinInterval(time.Minute)}, time.Minute},
		{"shorter claimer interval", []cronlock.Option{cronlock.WithSplay(2 * time.Second)},
			[]runclaim.Option{runclaim.WithMinInterval(time.Second)}, 2 * time.Second},
	} {
		for _, variant := range []string{"SkipUnlessClaimed", "Job"} {
			t.Run(tc.name+"/"+variant, func(t *testing.T) {
				clk := testclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
				store := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
				log := &recorder{}
				ran := map[string]int{}
				replica := func(name string) cron.Job {
					claimer, err := runclaim.New(store, append(tc.claim, runclaim.WithOwner(name))...)
					if err != nil {
						t.Fatal(err)
					}
					if variant == "Job" {
						return must[cron.Job](t)(cronlock.Job(t.Context(), claimer, "job", log, func(context.Context, *runclaim.Run) error {
							ran[name]++
							return nil
						}, tc.opts...))
					}
					return must[cron.JobWrapper](t)(cronlock.SkipUnlessClaimed(claimer, "job", log, tc.opts...))(cron.FuncJob(func() { ran[name]++ }))
				}
				early, late := replica("early"), replica("late")

				early.Run()
				if tc.window > 0 {
					clk.Advance(tc.window - time.Millisecond)
					late.Run()
					if ran["late"] != 0 || log.String() != "info skip [source job reason too soon]" {
						t.Fatalf("late tick within the window: ran %v, logged %q; want a skip as too soon", ran, log.String())
					}
					clk.Advance(time.Millisecond)
				}
				late.Run()
				if ran["early"] != 1 || ran["late"] != 1 {
					t.Fatalf("ran %v (logged %q); want once each", ran, log.String())
				}
			})
		}
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
			// successful heartbeat loses the run, which a busy machine does
			// not cause (a lease of 300 ms with heartbeats every 50 ms
			// could: one heartbeat slower than 250 ms).
			const lease = 3 * time.Second
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
			job := must[cron.Job](t)(cronlock.Job(ctx, claimer, "wind-down", cron.DiscardLogger, func(runCtx context.Context, _ *runclaim.Run) error {
				cancel() // the service shuts down
				<-runCtx.Done()
				// Wind down past the claim's own lease end (the claim ran
				// before fn started), while another replica tries to claim
				// the source: only heartbeats after the cancel keep it out.
				for start := time.Now(); time.Since(start) < lease+lease/4; time.Sleep(lease / 20) {
					run, err := other.Claim(context.Background(), "wind-down")
					switch {
					case err == nil:
						overlaps = append(overlaps, time.Since(start).Round(time.Millisecond).String())
						_ = run.Finish(context.Background(), nil)
					case !errors.Is(err, runclaim.ErrAlreadyRunning):
						t.Errorf("other claim: %v", err)
					}
				}
				return runCtx.Err()
			}))
			job.Run()
			if len(overlaps) > 0 {
				t.Errorf("another replica started the source %d times while fn wound down (at %v after the cancel)", len(overlaps), overlaps)
			}
		})
	}
}

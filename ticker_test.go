package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runclaim/runclaim"
)

// sevenSeconds is a Schedule that is not an Every: the multiples of seven
// seconds since the Unix epoch, for LatestTick's search.
type sevenSeconds struct{}

func (sevenSeconds) Next(t time.Time) time.Time {
	const p = 7
	s := t.Unix()
	if s < 0 && t.Nanosecond() > 0 {
		s++ // Unix() rounds towards minus infinity; step past t
	}
	n := (s/p + 1) * p
	if s < 0 && s%p != 0 {
		n = s/p*p + 0
		if !time.Unix(n, 0).After(t) {
			n += p
		}
	}
	return time.Unix(n, 0).UTC()
}

// hourly is a cron-like schedule with uneven gaps: 09:00 and 17:30 every day.
type hourly struct{}

func (hourly) Next(t time.Time) time.Time {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{9 * time.Hour, 17*time.Hour + 30*time.Minute, 33 * time.Hour} {
		if c := day.Add(at); c.After(t) {
			return c
		}
	}
	panic("unreachable")
}

func TestLatestTick(t *testing.T) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		s    runclaim.Schedule
		at   time.Time
		want time.Time
	}{
		{"every minute, on a tick", runclaim.Every(time.Minute), base, base},
		{"every minute, just before", runclaim.Every(time.Minute), base.Add(-time.Nanosecond), base.Add(-time.Minute)},
		{"every minute, within", runclaim.Every(time.Minute), base.Add(59 * time.Second), base},
		{"zero period", runclaim.Every(0), base, time.Time{}},
		{"seven seconds, on a tick", sevenSeconds{}, time.Unix(700, 0), time.Unix(700, 0)},
		{"seven seconds, within", sevenSeconds{}, time.Unix(706, 999), time.Unix(700, 0)},
		{"uneven, morning", hourly{}, base, base.Add(-3 * time.Hour)},
		{"uneven, night", hourly{}, base.Add(12 * time.Hour), base.Add(5*time.Hour + 30*time.Minute)},
		{"uneven, just after midnight", hourly{}, base.Add(12*time.Hour + time.Second), base.Add(5*time.Hour + 30*time.Minute)},
		{"nil", nil, base, time.Time{}},
	} {
		if got := runclaim.LatestTick(tc.s, tc.at); !got.Equal(tc.want) {
			t.Errorf("%s: LatestTick(%v) = %v, want %v", tc.name, tc.at, got, tc.want)
		}
	}
}

func TestNewTickerBadInput(t *testing.T) {
	for _, tc := range []struct {
		name     string
		s        runclaim.Schedule
		deadline time.Duration
		opts     []runclaim.ClockOption
	}{
		{"nil schedule", nil, time.Second, nil},
		{"zero deadline", runclaim.Every(time.Minute), 0, nil},
		{"negative deadline", runclaim.Every(time.Minute), -time.Second, nil},
	} {
		if tk, err := runclaim.NewTicker(tc.s, tc.deadline, tc.opts...); err == nil {
			tk.Stop()
			t.Errorf("NewTicker with %s: no error", tc.name)
		}
	}
}

// at12 is noon on a day in synctest's bubble, where time starts at
// midnight, 1 January 2000, UTC.
var at12 = time.Date(2000, 1, 1, 12, 0, 0, 0, time.UTC)

// sleepUntil sleeps until the bubble's clock reads when.
func sleepUntil(when time.Time) { time.Sleep(time.Until(when)) }

// TestTickerDeliversEachTick checks that a Ticker delivers each tick of an
// Every at the moment its clock reaches it, and none at its start when the
// latest tick is older than the deadline.
func TestTickerDeliversEachTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sleepUntil(at12.Add(-30 * time.Second))
		tk, err := runclaim.NewTicker(runclaim.Every(time.Minute), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer tk.Stop()
		for i := range 5 {
			tick := <-tk.C
			want := at12.Add(time.Duration(i) * time.Minute)
			if !tick.Equal(want) || !time.Now().Equal(want) {
				t.Errorf("tick %d: got %v at %v, want %v at that moment", i, tick, time.Now(), want)
			}
		}
	})
}

// TestTickerCatchesUp checks the starting deadline: a Ticker started after
// a tick delivers it at once if it is at most the deadline old, and never
// if it is older; a receiver busy across several ticks gets only the
// latest one within the deadline.
func TestTickerCatchesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sleepUntil(at12.Add(20 * time.Second))
		tk, err := runclaim.NewTicker(runclaim.Every(time.Minute), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if tick := <-tk.C; !tick.Equal(at12) || !time.Now().Equal(at12.Add(20*time.Second)) {
			t.Errorf("started 20 s after noon with a deadline of 30 s: got %v at %v, want noon at once", tick, time.Now())
		}
		// Busy for three and a half minutes: 12:01, 12:02 and 12:03 pass;
		// 12:03 is 30 s old, within the deadline, and the only one left.
		sleepUntil(at12.Add(3*time.Minute + 30*time.Second))
		if tick := <-tk.C; !tick.Equal(at12.Add(3 * time.Minute)) {
			t.Errorf("after a busy spell: got %v, want 12:03 only", tick)
		}
		// Busy past the deadline of 12:04: it is never delivered.
		sleepUntil(at12.Add(4*time.Minute + 31*time.Second))
		if tick := <-tk.C; !tick.Equal(at12.Add(5*time.Minute)) || !time.Now().Equal(tick) {
			t.Errorf("after missing 12:04 by more than the deadline: got %v at %v, want 12:05 on time", tick, time.Now())
		}
		tk.Stop()
		tk.Stop() // twice is fine

		sleepUntil(at12.Add(10*time.Minute + 31*time.Second))
		tk, err = runclaim.NewTicker(runclaim.Every(time.Minute), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer tk.Stop()
		if tick := <-tk.C; !tick.Equal(at12.Add(11 * time.Minute)) {
			t.Errorf("started 31 s after 12:10 with a deadline of 30 s: got %v, want 12:11", tick)
		}
	})
}

// replica is one replica of a service in a bubble: a Ticker on its own
// clock, claiming each tick of source and recording the runs it started.
type replica struct {
	name  string
	skew  time.Duration // how far its clock is ahead of the store's
	plain bool          // claim with Do without ForTick, as before ticks
}

// runReplicas runs replicas against one memory store from start until
// stop (by the store's clock), each job taking job, and returns the ticks
// each run served, by the store's clock of its start when plain.
func runReplicas(t *testing.T, replicas []replica, deadline, job time.Duration, start, stop time.Time) map[time.Time][]string {
	t.Helper()
	store := runclaim.NewMemoryStore()
	runs := make(map[time.Time][]string)
	var mu sync.Mutex // protects runs
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range replicas {
		claimer, err := runclaim.New(store, runclaim.WithOwner(r.name), runclaim.WithLease(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		clock := func() time.Time { return time.Now().Add(r.skew) }
		wg.Go(func() {
			sleepUntil(start)
			tk, err := runclaim.NewTicker(runclaim.Every(time.Minute), deadline, runclaim.WithClock(clock))
			if err != nil {
				t.Error(err)
				return
			}
			defer tk.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case tick := <-tk.C:
					// The ticker waits on the bubble's clock for a time read
					// on the replica's: it fires when the replica's clock
					// reaches the tick.
					fn := func(ctx context.Context, run *runclaim.Run) error {
						mu.Lock()
						runs[tick.UTC()] = append(runs[tick.UTC()], r.name)
						mu.Unlock()
						time.Sleep(job)
						return nil
					}
					if r.plain {
						err = claimer.Do(ctx, "sweep", fn)
					} else {
						err = claimer.Do(ctx, "sweep", fn, runclaim.ForTick(tick))
					}
					if err != nil && !errors.Is(err, runclaim.ErrNotClaimed) {
						t.Errorf("%s, tick %v: %v", r.name, tick, err)
					}
				}
			}
		})
	}
	sleepUntil(stop)
	cancel()
	wg.Wait()
	return runs
}

// TestSkewedReplicasRunEachTickOnce plays three replicas whose clocks are
// 600 ms apart either way, running a job of 100 ms, shorter than the skew:
// a replica whose clock is behind claims each tick after the one ahead has
// finished it. Each of 40 ticks runs exactly once. (With Do, which names
// no tick, the same replicas run most ticks three times.)
func TestSkewedReplicasRunEachTickOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		replicas := []replica{{"ahead", 600 * time.Millisecond, false}, {"on-time", 0, false}, {"behind", -600 * time.Millisecond, false}}
		const ticks = 40
		start := at12.Add(-10 * time.Second)
		runs := runReplicas(t, replicas, 5*time.Second, 100*time.Millisecond, start, at12.Add(ticks*time.Minute-30*time.Second))
		for i := range ticks {
			tick := at12.Add(time.Duration(i) * time.Minute)
			if got := runs[tick]; len(got) != 1 {
				t.Errorf("tick %v ran %d times (%v), want once", tick, len(got), got)
			}
		}
		if len(runs) != ticks {
			t.Errorf("%d ticks ran, want %d", len(runs), ticks)
		}
	})
}

// TestRestartAcrossTick plays a service of one replica that is down across
// a tick: back within the starting deadline, it runs the missed tick once
// (a second replica that comes back with it does not run it again); back
// after the deadline, it never runs it.
func TestRestartAcrossTick(t *testing.T) {
	for _, tc := range []struct {
		name    string
		back    time.Duration // after the missed tick (noon)
		ranNoon bool
	}{
		{"within the deadline", 20 * time.Second, true},
		{"beyond the deadline", 40 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const deadline = 30 * time.Second
				pair := []replica{{"a", 0, false}, {"b", 0, false}}
				// Up from 11:57:45 to 11:59:50: ticks 11:58 and 11:59.
				before := runReplicas(t, pair, deadline, time.Second, at12.Add(-135*time.Second), at12.Add(-10*time.Second))
				// Down across noon; back at noon+back until 12:02:30.
				after := runReplicas(t, pair, deadline, time.Second, at12.Add(tc.back), at12.Add(150*time.Second))
				want := map[time.Time]int{at12.Add(-2 * time.Minute): 1, at12.Add(-time.Minute): 1, at12.Add(time.Minute): 1, at12.Add(2 * time.Minute): 1}
				if tc.ranNoon {
					want[at12] = 1
				}
				got := make(map[time.Time]int)
				for _, rs := range []map[time.Time][]string{before, after} {
					for tick, names := range rs {
						got[tick] += len(names)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("runs per tick: %v, want %v", got, want)
				}
			})
		})
	}
}

// Claim and Do with ForTick refuse a zero tick with an error that is not a
// skip, write nothing and do not call fn; the hooks see a failed claim.
func TestZeroTick(t *testing.T) {
	store := runclaim.NewMemoryStore()
	var failed int
	c, err := runclaim.New(store, runclaim.WithHooks(runclaim.Hooks{ClaimFailed: func(runclaim.Event) { failed++ }}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if run, err := c.Claim(ctx, "src", runclaim.ForTick(time.Time{})); err == nil || run != nil || errors.Is(err, runclaim.ErrNotClaimed) {
		t.Errorf("ForTick(zero) = %v, %v; want an error that is not a skip", run, err)
	}
	called := false
	if err := c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { called = true; return nil }, runclaim.ForTick(time.Time{})); err == nil || called {
		t.Errorf("Do with ForTick(zero) = %v, fn called %v; want an error and no call", err, called)
	}
	if err := c.Do(ctx, "src", nil, runclaim.ForTick(at12)); err == nil {
		t.Error("Do(nil fn) with ForTick: no error")
	}
	if failed != 2 {
		t.Errorf("ClaimFailed hook called %d times, want 2", failed)
	}
	// Nothing was written: a plain claim and a tick claim both win.
	run, err := c.Claim(ctx, "src")
	if err != nil {
		t.Fatalf("plain claim after the refused ones: %v", err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { return nil }, runclaim.ForTick(at12)); err != nil {
		t.Errorf("tick claim after the refused ones: %v", err)
	}
}

package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/gocronlock"
)

// tickAttempt is what one replica did on one tick of a real-clock schedule.
type tickAttempt struct {
	replica string
	tick    time.Time // the tick the attempt named (its run's, or its skip's), in UTC
	err     error     // nil: the job ran
}

// staggered is a gocron.Locker that waits before each Lock.
type staggered struct {
	*gocronlock.Locker
	delay time.Duration
}

func (l staggered) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	select {
	case <-time.After(l.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return l.Locker.Lock(ctx, key)
}

// runThreeReplicas runs three gocron schedulers, each with its own Claimer
// and Locker on store, with a CronJob every second whose job takes about a
// millisecond, until it has seen every replica's attempt at ticks complete
// ticks. Each Locker is given the job's schedule, and lockerOpts. It
// returns the attempts grouped by tick, and the ticks in order.
//
// Each attempt is counted under the tick it named, as the store recorded
// it: a run's Tick, a skip's NotClaimedError.Tick. (The time an attempt
// was seen would not do: on a loaded machine a Lock can return more than
// half a second after its tick, and that time then rounds to the next.)
func runThreeReplicas(t *testing.T, store runclaim.Store, ticks int, lockerOpts ...gocronlock.Option) (map[time.Time][]tickAttempt, []time.Time) {
	t.Helper()
	const replicas = 3
	const spec = "* * * * * *"
	sched, err := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor).Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	lockerOpts = append([]gocronlock.Option{gocronlock.WithSchedule("every-second", sched)}, lockerOpts...)
	attempts := make(chan tickAttempt, 100)
	var schedulers []gocron.Scheduler
	for i := range replicas {
		replica := fmt.Sprintf("replica-%d", i)
		locker := newLocker(t, newClaimer(t, store, runclaim.WithOwner(replica)), lockerOpts...)
		// Replica i locks i×20 ms after its tick, so that a later replica
		// mostly claims after an earlier one has finished the tick.
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(staggered{locker, time.Duration(i) * 20 * time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.NewJob(gocron.CronJob(spec, true),
			gocron.NewTask(func(ctx context.Context) {
				a := tickAttempt{replica: replica, err: errors.New("Locker.Run(ctx) = nil inside the locked task")}
				if run := locker.Run(ctx); run != nil {
					a.tick, a.err = run.Tick.UTC(), nil
				}
				attempts <- a
				time.Sleep(time.Millisecond)
			}),
			gocron.WithName("every-second"),
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
				a := tickAttempt{replica: replica, err: err}
				if nc, ok := errors.AsType[*runclaim.NotClaimedError](err); ok {
					a.tick = nc.Tick.UTC()
				}
				attempts <- a
			})),
		)
		if err != nil {
			t.Fatal(err)
		}
		schedulers = append(schedulers, s)
	}
	for _, s := range schedulers {
		s.Start()
	}
	defer func() {
		for _, s := range schedulers {
			if err := s.Shutdown(); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		}
	}()

	byTick := map[time.Time][]tickAttempt{}
	var complete []time.Time
	timeout := time.After(time.Duration(ticks+15) * time.Second)
	for len(complete) < ticks {
		select {
		case a := <-attempts:
			if a.tick.IsZero() {
				t.Fatalf("%s: an attempt that names no tick: %v", a.replica, a.err)
			}
			byTick[a.tick] = append(byTick[a.tick], a)
			if len(byTick[a.tick]) == replicas {
				complete = append(complete, a.tick)
			}
		case <-timeout:
			t.Fatalf("%d of %d ticks with an attempt by every replica before the timeout: %v", len(complete), ticks, byTick)
		}
	}
	sort.Slice(complete, func(i, j int) bool { return complete[i].Before(complete[j]) })
	return byTick, complete
}

// TestEachTickOnce is the case gocron's Locker contract leaves to the
// locker: three replicas lock the same tick 20 ms apart and the job takes a
// millisecond, so that a late replica claims after the early one has
// finished. With the job's schedule given and no other option, each tick
// must run exactly once (no tick twice, and no tick skipped by every
// replica), and every tick named is a whole second, a tick of the
// schedule. (The schedule's ticks are a second apart, so a Lock over half
// a second late names the next one: TestLateLockRunsFiringOnce covers
// late Locks on schedules of a minute and more.)
func TestEachTickOnce(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			byTick, ticks := runThreeReplicas(t, sc.Open(t), 5)
			ranOn := func(tick time.Time) (ran []string) {
				for _, a := range byTick[tick] {
					if a.err == nil {
						ran = append(ran, a.replica)
					}
				}
				return ran
			}
			for tick := range byTick {
				if !tick.Equal(tick.Round(time.Second)) {
					t.Errorf("tick %s: not a whole second", tick.Format(time.RFC3339Nano))
				}
				if ran := ranOn(tick); len(ran) > 1 {
					t.Errorf("tick %s: the job ran on %v, want one replica at most", tick.Format(time.TimeOnly), ran)
				}
			}
			// A tick every replica attempted ran once, or its skips are
			// explained by what they were told: another tick's run holding
			// the source (on a loaded machine a run can outlast its second),
			// or a later tick, run, served first (a replica whose Lock came
			// over half a second late named the next tick).
			for _, tick := range ticks {
				for _, a := range byTick[tick] {
					if a.err != nil && !errors.Is(a.err, runclaim.ErrNotClaimed) {
						t.Errorf("tick %s: %s: lock error %v, want a skip", tick.Format(time.TimeOnly), a.replica, a.err)
					}
				}
				if len(ranOn(tick)) > 0 {
					continue // once, or reported above
				}
				for _, a := range byTick[tick] {
					nc, _ := errors.AsType[*runclaim.NotClaimedError](a.err)
					switch {
					case nc == nil:
					case errors.Is(nc, runclaim.ErrAlreadyRunning):
					case errors.Is(nc, runclaim.ErrTickDone) && nc.DoneTick.After(tick) && len(ranOn(nc.DoneTick.UTC())) == 1:
					default:
						t.Errorf("tick %s: every replica attempted it and none ran it, yet %s was told: %v", tick.Format(time.TimeOnly), a.replica, a.err)
					}
				}
			}
		})
	}
}

package gocronlock_test

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/gocronlock"
)

// tickAttempt is what one replica did on one tick of a real-clock schedule.
type tickAttempt struct {
	replica string
	at      time.Time // when, by the local clock
	err     error     // nil: the job ran
}

// tickOf is the whole second nearest to at: the tick of a CronJob that
// fires every second, for a job or lock error a little after it.
func tickOf(at time.Time) time.Time { return at.Round(time.Second) }

// runThreeReplicas runs three gocron schedulers, each with its own Claimer
// and Locker on store, with a CronJob every second whose job takes about a
// millisecond, until it has seen every replica's attempt at ticks complete
// ticks. It returns the attempts grouped by tick, and the ticks in order.
func runThreeReplicas(t *testing.T, store runclaim.Store, ticks int, lockerOpts ...gocronlock.Option) (map[time.Time][]tickAttempt, []time.Time) {
	t.Helper()
	const replicas = 3
	attempts := make(chan tickAttempt, 100)
	var schedulers []gocron.Scheduler
	for i := range replicas {
		replica := fmt.Sprintf("replica-%d", i)
		locker := newLocker(t, newClaimer(t, store, runclaim.WithOwner(replica)), lockerOpts...)
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.NewJob(gocron.CronJob("* * * * * *", true),
			gocron.NewTask(func() {
				attempts <- tickAttempt{replica: replica, at: time.Now()}
				time.Sleep(time.Millisecond)
			}),
			gocron.WithName("every-second"),
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
				attempts <- tickAttempt{replica: replica, at: time.Now(), err: err}
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
			tick := tickOf(a.at)
			byTick[tick] = append(byTick[tick], a)
			if len(byTick[tick]) == replicas {
				complete = append(complete, tick)
			}
		case <-timeout:
			t.Fatalf("%d of %d ticks with an attempt by every replica before the timeout: %v", len(complete), ticks, byTick)
		}
	}
	sort.Slice(complete, func(i, j int) bool { return complete[i].Before(complete[j]) })
	return byTick, complete
}

// TestEachTickOnceByDefault is the case gocron's Locker contract leaves to
// the locker: three replicas fire the same tick a few milliseconds apart
// and the job takes a millisecond, so that a late replica claims after the
// early one has finished. With no option set, ticks are claimed by name,
// each tick must run exactly once, and no tick may be skipped by every
// replica.
func TestEachTickOnceByDefault(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			byTick, ticks := runThreeReplicas(t, sc.Open(t), 5)
			for i, tick := range ticks {
				if i > 0 && tick.Sub(ticks[i-1]) != time.Second {
					t.Errorf("ticks %v and %v: want consecutive seconds", ticks[i-1].Format(time.TimeOnly), tick.Format(time.TimeOnly))
				}
				var ran []string
				for _, a := range byTick[tick] {
					switch {
					case a.err == nil:
						ran = append(ran, a.replica)
					case !errors.Is(a.err, runclaim.ErrNotClaimed):
						t.Errorf("tick %s: %s: lock error %v, want a skip", tick.Format(time.TimeOnly), a.replica, a.err)
					}
				}
				if len(ran) != 1 {
					t.Errorf("tick %s: the job ran on %v, want exactly one replica", tick.Format(time.TimeOnly), ran)
				}
			}
		})
	}
}

package cronlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/cronlock"
)

// tickAttempt is what one replica did on one tick of a real-clock schedule.
type tickAttempt struct {
	replica string
	at      time.Time // when, by the local clock
	ran     bool      // the job ran
	skip    string    // the reason logged with "skip"
	err     error     // logged at Error
}

// tickLogger is a cron.Logger that reports skips and errors as attempts.
type tickLogger struct {
	replica  string
	attempts chan<- tickAttempt
}

func (l tickLogger) Info(msg string, kv ...any) {
	if msg == "skip" {
		reason := ""
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == "reason" {
				reason = fmt.Sprint(kv[i+1])
			}
		}
		l.attempts <- tickAttempt{replica: l.replica, at: time.Now(), skip: reason}
	}
}

func (l tickLogger) Error(err error, msg string, kv ...any) {
	l.attempts <- tickAttempt{replica: l.replica, at: time.Now(), err: fmt.Errorf("%s %v: %w", msg, kv, err)}
}

// TestEachTickOnce runs three Crons, each with its own Claimer, on one
// store, with a job every second that takes about a millisecond: the
// replicas fire each tick a few milliseconds apart, and the late ones
// claim after the early one has finished. With the job's schedule given
// and no other option, each tick must run exactly once, and no tick may be
// skipped by every replica. Both wrappers are checked. (The schedule's
// ticks are a second apart, so a job starting over half a second late
// names the next one: TestLateRunRunsFiringOnce covers late starts on
// schedules of a minute and more.)
func TestEachTickOnce(t *testing.T) {
	for _, sc := range stores {
		for _, variant := range []string{"SkipUnlessClaimed", "Job"} {
			t.Run(sc.Name+"/"+variant, func(t *testing.T) {
				t.Parallel()
				testEachTickOnce(t, sc.Open(t), variant)
			})
		}
	}
}

func testEachTickOnce(t *testing.T, store runclaim.Store, variant string) {
	const (
		replicas = 3
		ticks    = 5
	)
	// The ticks are read from what the store gave, not from when each
	// job ran: on a loaded machine a replica's job can start more than
	// half a second after the tick it claimed.
	won := &winsStore{Store: store}
	sched, err := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow).Parse("* * * * * *")
	if err != nil {
		t.Fatal(err)
	}
	attempts := make(chan tickAttempt, 1000)
	var crons []*cron.Cron
	for i := range replicas {
		replica := fmt.Sprintf("replica-%d", i)
		claimer, err := runclaim.New(won, runclaim.WithOwner(replica))
		if err != nil {
			t.Fatal(err)
		}
		logger := tickLogger{replica: replica, attempts: attempts}
		work := func() {
			attempts <- tickAttempt{replica: replica, at: time.Now(), ran: true}
			time.Sleep(time.Millisecond)
		}
		var job cron.Job
		switch variant {
		case "SkipUnlessClaimed":
			job = must[cron.JobWrapper](t)(cronlock.SkipUnlessClaimed(claimer, "every-second", logger, cronlock.WithSchedule(sched)))(cron.FuncJob(work))
		case "Job":
			job = must[cron.Job](t)(cronlock.Job(t.Context(), claimer, "every-second", logger, func(context.Context, *runclaim.Run) error {
				work()
				return nil
			}, cronlock.WithSchedule(sched)))
		}
		c := cron.New(cron.WithLogger(cron.DiscardLogger))
		c.Schedule(sched, job)
		crons = append(crons, c)
	}
	for _, c := range crons {
		c.Start()
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			for _, c := range crons {
				<-c.Stop().Done()
			}
		}
	}
	defer stop()

	ran := 0
	attempt := func(a tickAttempt) {
		switch {
		case a.err != nil:
			t.Errorf("%s: %v", a.replica, a.err)
		case a.ran:
			ran++
		}
	}
	timeout := time.After((ticks + 15) * time.Second)
	for len(won.ticks()) < ticks {
		select {
		case a := <-attempts:
			attempt(a)
		case <-time.After(50 * time.Millisecond):
		case <-timeout:
			t.Fatalf("%d of %d ticks won before the timeout: %v", len(won.ticks()), ticks, won.ticks())
		}
	}
	stop()
	close(attempts)
	for a := range attempts {
		attempt(a)
	}
	// Each tick won once; and a tick that a claim named but no claim won
	// must be explained by what its claims were told: a later tick, won,
	// served first (a replica whose firing rounded to the next second
	// claimed it before the others claimed this one), or another tick's
	// run holding the source. A tick that no claim named is not a fault:
	// a tick is named by rounding the moment the job fired, and the three
	// replicas share this process, so a loaded machine can make all three
	// fire over half a second late at once.
	byTick := won.ticks()
	for tick, owners := range byTick {
		if len(owners) != 1 {
			t.Errorf("tick %s: won by %v, want exactly one replica", tick.Format(time.TimeOnly), owners)
		}
	}
	for tick, skips := range won.skipped() {
		if _, ok := byTick[tick]; ok {
			continue
		}
		for _, nc := range skips {
			switch {
			case errors.Is(nc, runclaim.ErrTickDone) && nc.DoneTick.After(tick) && len(byTick[nc.DoneTick.UTC()]) == 1:
			case errors.Is(nc, runclaim.ErrAlreadyRunning):
			default:
				t.Errorf("tick %s was won by no replica, yet a claim of it was told: %v", tick.Format(time.TimeOnly), nc)
			}
		}
	}
	if n := won.count(); ran != n {
		t.Errorf("the job ran %d times for %d claims won", ran, n)
	}
}

// winsStore is a Store that keeps the owner of every claim won, and the
// skip of every claim not won, by tick (in UTC, so that the ticks named
// and the ticks the store gives back compare equal).
type winsStore struct {
	runclaim.Store
	mu   sync.Mutex
	won  map[time.Time][]string
	skip map[time.Time][]*runclaim.NotClaimedError
	n    int
}

func (s *winsStore) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	info, err := s.Store.Claim(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	var nc *runclaim.NotClaimedError
	switch {
	case err == nil:
		if s.won == nil {
			s.won = map[time.Time][]string{}
		}
		s.won[info.Tick.UTC()] = append(s.won[info.Tick.UTC()], info.Owner)
		s.n++
	case errors.As(err, &nc):
		if s.skip == nil {
			s.skip = map[time.Time][]*runclaim.NotClaimedError{}
		}
		s.skip[req.Tick.UTC()] = append(s.skip[req.Tick.UTC()], nc)
	}
	return info, err
}

// skipped returns a copy of the skips, by the tick claimed.
func (s *winsStore) skipped() map[time.Time][]*runclaim.NotClaimedError {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[time.Time][]*runclaim.NotClaimedError, len(s.skip))
	for tick, skips := range s.skip {
		out[tick] = append([]*runclaim.NotClaimedError(nil), skips...)
	}
	return out
}

// ticks returns a copy of the owners of the claims won, by tick.
func (s *winsStore) ticks() map[time.Time][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[time.Time][]string, len(s.won))
	for tick, owners := range s.won {
		out[tick] = append([]string(nil), owners...)
	}
	return out
}

// count returns the number of claims won.
func (s *winsStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

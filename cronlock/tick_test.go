package cronlock_test

import (
	"context"
	"fmt"
	"sort"
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

// TestEachTickOnceByDefault runs three Crons, each with its own Claimer, on
// one store, with a job every second that takes about a millisecond: the
// replicas fire each tick a few milliseconds apart, and the late ones
// claim after the early one has finished. With no option set, ticks are
// claimed by name: each tick must run exactly once, and no tick may be
// skipped by every replica. Both wrappers are checked.
func TestEachTickOnceByDefault(t *testing.T) {
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
			job = must[cron.JobWrapper](t)(cronlock.SkipUnlessClaimed(claimer, "every-second", logger))(cron.FuncJob(work))
		case "Job":
			job = must[cron.Job](t)(cronlock.Job(t.Context(), claimer, "every-second", logger, func(context.Context, *runclaim.Run) error {
				work()
				return nil
			}))
		}
		c := cron.New(cron.WithSeconds(), cron.WithLogger(cron.DiscardLogger))
		if _, err := c.AddJob("* * * * * *", job); err != nil {
			t.Fatal(err)
		}
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
	// Each tick won once, and no tick between the first and the last
	// skipped by every replica: the replicas fire each tick a few
	// milliseconds apart, and a tick is named by rounding the moment the
	// job fired, so a tick is lost only if all three fire half a second
	// late.
	byTick := won.ticks()
	var order []time.Time
	for tick, owners := range byTick {
		order = append(order, tick)
		if len(owners) != 1 {
			t.Errorf("tick %s: won by %v, want exactly one replica", tick.Format(time.TimeOnly), owners)
		}
	}
	sort.Slice(order, func(i, j int) bool { return order[i].Before(order[j]) })
	for i := 1; i < len(order); i++ {
		if order[i].Sub(order[i-1]) != time.Second {
			t.Errorf("ticks %v and %v won: want consecutive seconds", order[i-1].Format(time.TimeOnly), order[i].Format(time.TimeOnly))
		}
	}
	if n := won.count(); ran != n {
		t.Errorf("the job ran %d times for %d claims won", ran, n)
	}
}

// winsStore is a Store that keeps the owner of every claim won, by tick.
type winsStore struct {
	runclaim.Store
	mu  sync.Mutex
	won map[time.Time][]string
	n   int
}

func (s *winsStore) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	info, err := s.Store.Claim(ctx, req)
	if err == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.won == nil {
			s.won = map[time.Time][]string{}
		}
		s.won[info.Tick] = append(s.won[info.Tick], info.Owner)
		s.n++
	}
	return info, err
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

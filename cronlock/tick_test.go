package cronlock_test

import (
	"context"
	"fmt"
	"sort"
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
	attempts := make(chan tickAttempt, 100)
	var crons []*cron.Cron
	for i := range replicas {
		replica := fmt.Sprintf("replica-%d", i)
		claimer, err := runclaim.New(store, runclaim.WithOwner(replica))
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
	defer func() {
		for _, c := range crons {
			<-c.Stop().Done()
		}
	}()

	byTick := map[time.Time][]tickAttempt{}
	var complete []time.Time
	timeout := time.After((ticks + 15) * time.Second)
	for len(complete) < ticks {
		select {
		case a := <-attempts:
			tick := a.at.Round(time.Second)
			byTick[tick] = append(byTick[tick], a)
			if len(byTick[tick]) == replicas {
				complete = append(complete, tick)
			}
		case <-timeout:
			t.Fatalf("%d of %d ticks with an attempt by every replica before the timeout: %v", len(complete), ticks, byTick)
		}
	}
	sort.Slice(complete, func(i, j int) bool { return complete[i].Before(complete[j]) })
	for i, tick := range complete {
		if i > 0 && tick.Sub(complete[i-1]) != time.Second {
			t.Errorf("ticks %v and %v: want consecutive seconds", complete[i-1].Format(time.TimeOnly), tick.Format(time.TimeOnly))
		}
		var ran []string
		for _, a := range byTick[tick] {
			switch {
			case a.err != nil:
				t.Errorf("tick %s: %s: %v", tick.Format(time.TimeOnly), a.replica, a.err)
			case a.ran:
				ran = append(ran, a.replica)
			}
		}
		if len(ran) != 1 {
			t.Errorf("tick %s: the job ran on %v, want exactly one replica", tick.Format(time.TimeOnly), ran)
		}
	}
}

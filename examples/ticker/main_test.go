package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// TestThreeReplicasRunEachPeriodOnce: three replicas that follow the
// recipe, started a third of a period apart, sweep each source exactly
// once per period. With time.NewTicker, which counts from each replica's
// start, the same replicas sweep a source up to three times per period.
//
// It holds as long as no replica's timer fires more than half a period
// late (the minimum interval): a period of a second leaves 500 ms for a
// loaded machine.
func TestThreeReplicasRunEachPeriodOnce(t *testing.T) {
	const periods = 5
	s := schedule{
		period:  time.Second,
		sources: []string{"sweep-a", "sweep-b"},
		work:    10 * time.Millisecond, // quick: done before a late replica's claim
	}
	// The ticks from s.from to s.until: periods of them. Without s.from,
	// a replica started up to half a period after a tick would run that
	// tick too (a Ticker delivers a tick up to its starting deadline late).
	s.from = time.Now().Truncate(s.period).Add(s.period)
	s.until = s.from.Add((periods - 1) * s.period)
	ctx, cancel := context.WithTimeout(t.Context(), (periods+5)*s.period)
	defer cancel()
	store := runclaim.NewMemoryStore()

	type key struct {
		period time.Time
		source string
	}
	var (
		mu    sync.Mutex
		runs  = map[key][]string{} // replicas that swept the source in the period
		total = map[string]int{}
	)
	var wg sync.WaitGroup
	for i, name := range []string{"replica-a", "replica-b", "replica-c"} {
		wg.Go(func() {
			select { // start a third of a period apart
			case <-time.After(time.Duration(i) * s.period / 3):
			case <-ctx.Done():
				return
			}
			err := replica(ctx, name, store, s, func(tick time.Time, source string, _ *runclaim.Run) {
				mu.Lock()
				defer mu.Unlock()
				k := key{tick.Truncate(s.period), source}
				runs[k] = append(runs[k], name)
				total[source]++
			})
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	wg.Wait()

	for k, who := range runs {
		if len(who) != 1 {
			t.Errorf("%s swept %d times in the period from %s, by %v", k.source, len(who), k.period.Format("15:04:05.000"), who)
		}
	}
	for _, source := range s.sources {
		if total[source] != periods {
			t.Errorf("%s: %d sweeps in %d periods, want one per period", source, total[source], periods)
		}
	}
}

// Command ticker runs three replicas of a service that sweep the same
// sources on a fixed period. runclaim's Claimer.Do lets one replica sweep
// each source per period and skips it on the others.
//
// The replicas start at different moments, as real ones do. A
// time.NewTicker would count each replica's period from its own start, so
// their ticks would fall at different points of the period and each
// replica would win its own tick: a source would run once per replica per
// period. Instead, every replica takes its ticks from a runclaim.Ticker on
// runclaim.Every(period): the multiples of the period on the wall clock,
// the same on every replica. Each claims the tick with Do and ForTick: the first
// claim wins, and a replica whose tick comes late, after a quick sweep has
// already finished, is skipped with ErrTickDone.
//
// The replicas are goroutines with a Claimer each, standing in for three
// processes. By default they share an in-memory store; with DATABASE_URL
// set they share a Postgres table of the examples' own,
// public.runclaim_example_runs, in an advisory lock namespace of their own,
// so that they never compete with a real service's jobs:
//
//	go run ./examples/ticker
//	DATABASE_URL=postgres://user:pass@localhost:5432/db go run ./examples/ticker
//
// It runs for five periods of 200 ms and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim"
)

// schedule is what the replicas run.
type schedule struct {
	period  time.Duration // a minute or more in a real service
	sources []string
	work    time.Duration // how long one sweep takes
	from    time.Time     // the first tick; zero for no start
	until   time.Time     // the last tick; zero for no end
}

var demo = schedule{
	period:  200 * time.Millisecond,
	sources: []string{"sweep-a", "sweep-b"},
	work:    50 * time.Millisecond,
}

const periods = 5

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := demo
	s.from = time.Now().Truncate(s.period).Add(s.period)
	s.until = s.from.Add((periods - 1) * s.period)
	store, closeStore, err := openStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeStore()

	var (
		mu     sync.Mutex
		sweeps = map[string]int{}
	)
	var wg sync.WaitGroup
	for i, name := range []string{"replica-a", "replica-b", "replica-c"} {
		wg.Go(func() {
			// The replicas start a third of a period apart.
			time.Sleep(time.Duration(i) * demo.period / 3)
			err := replica(ctx, name, store, s, func(tick time.Time, source string, run *runclaim.Run) {
				fmt.Printf("%s  %s  %-7s swept as run %d\n", tick.Format("15:04:05.000"), name, source, run.ID)
				mu.Lock()
				sweeps[source]++
				mu.Unlock()
			})
			if err != nil {
				log.Printf("%s: %v", name, err)
			}
		})
	}
	wg.Wait()

	fmt.Println()
	for _, source := range s.sources {
		fmt.Printf("%-7s %d sweeps in %d periods, by 3 replicas\n", source, sweeps[source], periods)
	}
}

// replica is one replica of the service: at every multiple of the period
// on the wall clock it asks runclaim, for each source, whether this tick is
// its own, and calls swept for each sweep it runs. It returns after the
// tick at s.until (ticks before s.from are let pass), or with ctx's error when ctx ends.
func replica(ctx context.Context, name string, store runclaim.Store, s schedule,
	swept func(tick time.Time, source string, run *runclaim.Run)) error {
	claimer, err := runclaim.New(store,
		runclaim.WithOwner(name),
		runclaim.WithLease(10*time.Second),
	)
	if err != nil {
		return err
	}
	ticker, err := runclaim.NewTicker(runclaim.Every(s.period), s.period/2)
	if err != nil {
		return err
	}
	defer ticker.Stop()
	for {
		var tick time.Time
		select {
		case <-ctx.Done():
			return ctx.Err()
		case tick = <-ticker.C:
		}
		if !s.until.IsZero() && tick.After(s.until) {
			return nil
		}
		if tick.Before(s.from) {
			// A Ticker delivers a tick up to its starting deadline
			// late, so the tick before s.from may come first.
			continue
		}
		var wg sync.WaitGroup
		for _, source := range s.sources {
			wg.Go(func() {
				err := claimer.Do(ctx, source, func(ctx context.Context, run *runclaim.Run) error {
					swept(tick, source, run)
					return sweep(ctx, s.work)
				}, runclaim.ForTick(tick))
				switch {
				case errors.Is(err, runclaim.ErrNotClaimed):
					fmt.Printf("%s  %s  %-7s skipped: %s\n", tick.Format("15:04:05.000"), name, source, why(err))
				case err != nil && ctx.Err() == nil:
					fmt.Printf("%s  %s  %-7s failed: %v\n", tick.Format("15:04:05.000"), name, source, err)
				}
			})
		}
		wg.Wait()
	}
}

// sweep stands in for the real work, such as scraping a site. It stops when
// ctx ends, which Do arranges when the run's lease is lost.
func sweep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// why says in a few words why a claim was skipped.
func why(err error) string {
	var nc *runclaim.NotClaimedError
	switch {
	case !errors.As(err, &nc):
		return err.Error()
	case errors.Is(err, runclaim.ErrTickDone):
		return "the tick was run already"
	case errors.Is(err, runclaim.ErrTooSoon):
		return "too soon since the last run"
	case nc.Holder != nil:
		return fmt.Sprintf("run %d by %s is running", nc.Holder.ID, nc.Holder.Owner)
	default:
		return "another claim is in flight"
	}
}

// openStore returns an in-memory store, or a Postgres store on the
// examples' own table and namespace when DATABASE_URL is set.
func openStore(ctx context.Context) (runclaim.Store, func(), error) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		fmt.Println("store: in memory (set DATABASE_URL to use Postgres)")
		return runclaim.NewMemoryStore(), func() {}, nil
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	store, err := runclaim.NewPostgresStore(pool,
		runclaim.WithTable(runclaim.DefaultSchema, "runclaim_example_runs"),
		runclaim.WithNamespace("runclaim-example"))
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	fmt.Println("store: Postgres, table", store.Table())
	return store, pool.Close, nil
}

// Command ticker runs two replicas of a service, each with a plain
// time.Ticker, that sweep the same sources on every tick. runclaim's
// Claimer.Do lets one replica sweep each source per tick and skips it on
// the other.
//
// The replicas are goroutines with a Claimer each, standing in for two
// processes. By default they share an in-memory store; with DATABASE_URL set
// they share a Postgres table, as two processes would:
//
//	go run ./examples/ticker
//	DATABASE_URL=postgres://user:pass@localhost:5432/db go run ./examples/ticker
//
// It runs five ticks of 200 ms and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim"
)

const (
	period = 200 * time.Millisecond // the schedule; a minute or more in a real service
	ticks  = 5
	work   = 50 * time.Millisecond // how long one sweep takes
)

var sources = []string{"avito", "cian"}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, closeStore, err := openStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeStore()

	var sweeps sync.Map // source -> *atomic.Int64
	for _, s := range sources {
		sweeps.Store(s, new(atomic.Int64))
	}
	var wg sync.WaitGroup
	for _, name := range []string{"replica-a", "replica-b"} {
		wg.Go(func() {
			if err := replica(ctx, name, store, &sweeps); err != nil {
				log.Printf("%s: %v", name, err)
			}
		})
	}
	wg.Wait()

	fmt.Println()
	for _, s := range sources {
		n, _ := sweeps.Load(s)
		fmt.Printf("%-6s %d sweeps in %d ticks\n", s, n.(*atomic.Int64).Load(), ticks)
	}
}

// replica is one replica of the service: it ticks every period and asks
// runclaim for each source whether this tick is its own.
func replica(ctx context.Context, name string, store runclaim.Store, sweeps *sync.Map) error {
	claimer, err := runclaim.New(store,
		runclaim.WithOwner(name),
		runclaim.WithLease(10*time.Second),
		// The replicas' tickers are a little apart. Without a minimum
		// interval, a late replica whose claim comes after a fast sweep
		// has finished would sweep the same tick again.
		runclaim.WithMinInterval(period/2),
	)
	if err != nil {
		return err
	}
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for tick := 1; tick <= ticks; tick++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
		var wg sync.WaitGroup
		for _, source := range sources {
			wg.Go(func() {
				err := claimer.Do(ctx, source, func(ctx context.Context, run *runclaim.Run) error {
					fmt.Printf("tick %d  %s  %-6s swept as run %d\n", tick, name, source, run.ID)
					n, _ := sweeps.Load(source)
					n.(*atomic.Int64).Add(1)
					return sweep(ctx)
				})
				switch {
				case errors.Is(err, runclaim.ErrNotClaimed):
					fmt.Printf("tick %d  %s  %-6s skipped: %s\n", tick, name, source, why(err))
				case err != nil:
					fmt.Printf("tick %d  %s  %-6s failed: %v\n", tick, name, source, err)
				}
			})
		}
		wg.Wait()
	}
	return nil
}

// sweep stands in for the real work, such as scraping a site. It stops when
// ctx ends, which Do arranges when the run's lease is lost.
func sweep(ctx context.Context) error {
	select {
	case <-time.After(work):
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
	case errors.Is(err, runclaim.ErrTooSoon):
		return "too soon since the last run"
	case nc.Holder != nil:
		return fmt.Sprintf("run %d by %s is running", nc.Holder.ID, nc.Holder.Owner)
	default:
		return "another claim is in flight"
	}
}

// openStore returns an in-memory store, or a Postgres store when
// DATABASE_URL is set.
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
	store, err := runclaim.NewPostgresStore(pool)
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

// Command cron runs two replicas of a service, each with its own robfig/cron
// v3 Cron, that tick the same jobs. Wrapped by cronlock, each tick of a job
// runs on one replica only, and the other logs a skip.
//
// The replicas are goroutines with a Claimer and a Cron each, standing in
// for two processes. By default they share an in-memory store; with
// DATABASE_URL set they share a Postgres table, as two processes would:
//
//	go run ./examples/cron
//	DATABASE_URL=postgres://user:pass@localhost:5432/db go run ./examples/cron
//
// Cron specs tick once a minute at most ("@every" once a second), so that
// the example ends quickly, its schedule is every 200 ms, on the same round
// times on every replica, as a spec like "*/5 * * * *" would be. It runs for
// five ticks and exits.
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
	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/cronlock"
)

const (
	period = 200 * time.Millisecond // the schedule; a minute or more in a real service
	ticks  = 5
	work   = 50 * time.Millisecond // how long one sweep takes
)

// every is a cron.Schedule that fires on the multiples of a duration, so
// that the replicas tick at the same times.
type every time.Duration

func (d every) Next(t time.Time) time.Time {
	return t.Truncate(time.Duration(d)).Add(time.Duration(d))
}

func main() {
	ctx, cancel := context.WithCancel(context.Background()) // cancelled on the way out
	defer cancel()
	store, closeStore, err := openStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeStore()

	var sweeps counter
	var crons []*cron.Cron
	for _, name := range []string{"replica-a", "replica-b"} {
		c, err := newCron(ctx, name, store, &sweeps)
		if err != nil {
			log.Fatal(err)
		}
		crons = append(crons, c)
	}
	// Start both just after a tick, so that each runs the next five.
	first := time.Now().Truncate(period).Add(period)
	time.Sleep(time.Until(first.Add(period / 4)))
	for _, c := range crons {
		c.Start()
	}
	time.Sleep(time.Until(first.Add(ticks*period + period/2)))
	for _, c := range crons {
		<-c.Stop().Done() // waits for running jobs
	}

	fmt.Println()
	for _, s := range []string{"avito", "cian"} {
		fmt.Printf("%-6s %d sweeps in %d ticks\n", s, sweeps.get(s), ticks)
	}
}

// newCron builds one replica's Cron with two jobs: avito, a plain func
// wrapped with cronlock.SkipUnlessClaimed, and cian, a cronlock.Job, which
// gets the run's context and ID and has its error recorded.
func newCron(ctx context.Context, name string, store runclaim.Store, sweeps *counter) (*cron.Cron, error) {
	claimer, err := runclaim.New(store,
		runclaim.WithOwner(name),
		runclaim.WithLease(10*time.Second),
		// A late replica whose claim comes after a fast job has finished
		// would run the same tick again; this skips it.
		runclaim.WithMinInterval(period/2),
	)
	if err != nil {
		return nil, err
	}
	// Skips are logged at Info: a verbose logger shows them.
	logger := cron.VerbosePrintfLogger(log.New(os.Stdout, name+"  cron: ", log.Lmicroseconds))
	c := cron.New(
		cron.WithLogger(cron.PrintfLogger(log.New(os.Stderr, name+" cron: ", log.LstdFlags))), // cron's own log: errors only
		cron.WithChain(cron.Recover(logger)),
	)

	// With a spec and a chain for every job, this would be
	// cron.New(cron.WithChain(cron.Recover(logger), cronlock.SkipUnlessClaimed(claimer, "sweep-avito", logger)))
	// and c.AddFunc("*/5 * * * *", ...).
	c.Schedule(every(period), cronlock.SkipUnlessClaimed(claimer, "sweep-avito", logger)(cron.FuncJob(func() {
		fmt.Printf("%s  %s  avito swept\n", time.Now().Format("15:04:05.000000"), name)
		sweeps.add("avito")
		time.Sleep(work) // the real work, such as scraping a site
	})))

	c.Schedule(every(period), cronlock.Job(ctx, claimer, "sweep-cian", logger,
		func(ctx context.Context, run *runclaim.Run) error {
			fmt.Printf("%s  %s  cian swept as run %d\n", time.Now().Format("15:04:05.000000"), name, run.ID)
			sweeps.add("cian")
			select { // the real work, which stops if the run is lost
			case <-time.After(work):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}))
	return c, nil
}

// counter counts sweeps per source.
type counter struct {
	mu sync.Mutex // protects n
	n  map[string]int
}

func (c *counter) add(source string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	c.n[source]++
}

func (c *counter) get(source string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[source]
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
		return nil, nil, errors.Join(errors.New("open store"), err)
	}
	fmt.Println("store: Postgres, table", store.Table())
	return store, pool.Close, nil
}

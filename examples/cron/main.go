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
// So that the example ends quickly, its spec fires every second (a spec with
// seconds), on the wall clock like "*/5 * * * *", and the jobs take a
// millisecond: shorter than the few milliseconds between the replicas'
// ticks, so that the late replica's claim comes after the early one's job
// has finished. It names the same tick, which is done, and is skipped. It runs for
// four ticks and exits.
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
	spec   = "* * * * * *" // every second; "*/5 * * * *" or so in a real service
	period = time.Second
	ticks  = 4
	work   = time.Millisecond // how long one sweep takes
)

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
	// Start both just after a tick, so that each runs the next four.
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
	for _, s := range []string{"books", "news"} {
		fmt.Printf("%-6s %d sweeps in %d ticks\n", s, sweeps.get(s), ticks)
	}
}

// newCron builds one replica's Cron with two jobs: books, a plain func
// wrapped with cronlock.SkipUnlessClaimed, and news, a cronlock.Job, which
// gets the run's context and ID and has its error recorded.
func newCron(ctx context.Context, name string, store runclaim.Store, sweeps *counter) (*cron.Cron, error) {
	claimer, err := runclaim.New(store,
		runclaim.WithOwner(name),
		runclaim.WithLease(10*time.Second),
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

	// Cron does not tell a job which firing it serves, so each wrapper is
	// given the job's schedule, and each run claims the latest tick of it:
	// a late replica's claim of the same tick is skipped. (A schedule of a
	// second names the right tick for a job starting up to half a second
	// late; one of "*/5 * * * *", for one up to 4 min 59.5 s late.)
	sched, err := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor).Parse(spec)
	if err != nil {
		return nil, err
	}
	claimedBooks, err := cronlock.SkipUnlessClaimed(claimer, "sweep-books", logger, cronlock.WithSchedule(sched))
	if err != nil {
		return nil, err
	}
	c.Schedule(sched, claimedBooks(cron.FuncJob(func() {
		fmt.Printf("%s  %s  books swept\n", time.Now().Format("15:04:05.000000"), name)
		sweeps.add("books")
		time.Sleep(work) // the real work, such as scraping a site
	})))

	news, err := cronlock.Job(ctx, claimer, "sweep-news", logger,
		func(ctx context.Context, run *runclaim.Run) error {
			fmt.Printf("%s  %s  news swept as run %d\n", time.Now().Format("15:04:05.000000"), name, run.ID)
			sweeps.add("news")
			select { // the real work, which stops if the run is lost
			case <-time.After(work):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		},
		cronlock.WithSchedule(sched))
	if err != nil {
		return nil, err
	}
	c.Schedule(sched, news)
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
	// A table and an advisory lock namespace of the examples' own: pointed
	// at a production database, the example never competes with its jobs.
	store, err := runclaim.NewPostgresStore(pool,
		runclaim.WithTable(runclaim.DefaultSchema, "runclaim_example_runs"),
		runclaim.WithNamespace("runclaim-example"))
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

// Command gocron runs two replicas of a service, each with its own gocron v2
// scheduler, that tick the same jobs. With gocronlock as the schedulers'
// distributed locker, each tick of a job runs on one replica only.
//
// The replicas are goroutines with a Claimer and a scheduler each, standing
// in for two processes. By default they share an in-memory store; with
// DATABASE_URL set they share a Postgres table, as two processes would:
//
//	go run ./examples/gocron
//	DATABASE_URL=postgres://user:pass@localhost:5432/db go run ./examples/gocron
//
// The jobs run every second, on the wall clock, and take a millisecond:
// shorter than the few milliseconds between the replicas' ticks, so that
// the late replica's claim comes after the early one's job has finished.
// The Locker claims each tick by name, so it is skipped as a tick already
// run (ErrTickDone). It runs for four
// ticks and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/gocronlock"
)

const (
	period = time.Second // the schedule; a minute or more in a real service
	ticks  = 4
	work   = time.Millisecond // how long one sweep takes
)

var sources = []string{"books", "news"}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, closeStore, err := openStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeStore()

	// Cron jobs fire on the wall clock, so that every replica's ticks line
	// up; start both just after a tick, so that each runs the next four.
	start := time.Now().Truncate(period).Add(period)
	time.Sleep(time.Until(start.Add(period / 4)))
	var sweeps counter
	var schedulers []gocron.Scheduler
	for _, name := range []string{"replica-a", "replica-b"} {
		s, err := newScheduler(name, store, &sweeps)
		if err != nil {
			log.Fatal(err)
		}
		s.Start()
		schedulers = append(schedulers, s)
	}

	// Let the schedules tick, then shut both replicas down; Shutdown waits
	// for running jobs.
	time.Sleep(time.Until(start.Add(ticks*period + period/2)))
	for _, s := range schedulers {
		if err := s.Shutdown(); err != nil {
			log.Print(err)
		}
	}

	fmt.Println()
	for _, s := range sources {
		fmt.Printf("%-6s %d sweeps in %d ticks\n", s, sweeps.get(s), ticks)
	}
}

// newScheduler builds one replica's scheduler: a Claimer, a gocronlock
// Locker as the scheduler's distributed locker, and one job per source.
func newScheduler(name string, store runclaim.Store, sweeps *counter) (gocron.Scheduler, error) {
	claimer, err := runclaim.New(store,
		runclaim.WithOwner(name),
		runclaim.WithLease(10*time.Second),
	)
	if err != nil {
		return nil, err
	}
	// gocron does not tell the Locker which firing a Lock serves, so the
	// Locker is given each job's schedule, the robfig/cron parse of its
	// spec, and claims the latest tick of it: a late replica's claim of
	// the same tick is skipped with ErrTickDone. (A schedule of a second
	// names the right tick for a Lock up to half a second late; one of
	// "*/5 * * * *", for a Lock up to 4 min 59.5 s late.)
	const spec = "* * * * * *" // every second
	sched, err := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor).Parse(spec)
	if err != nil {
		return nil, err
	}
	opts := []gocronlock.Option{gocronlock.WithPrefix("example/")}
	for _, source := range sources {
		opts = append(opts, gocronlock.WithSchedule("sweep-"+source, sched))
	}
	locker, err := gocronlock.New(claimer, opts...)
	if err != nil {
		return nil, err
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		return nil, err
	}
	for _, source := range sources {
		_, err := s.NewJob(
			gocron.CronJob(spec, true),
			gocron.NewTask(func() {
				fmt.Printf("%s  %s  %-6s swept\n", time.Now().Format("15:04:05.000"), name, source)
				sweeps.add(source)
				time.Sleep(work) // the real work, such as scraping a site
			}),
			// The job's name is the claimed source (after the prefix):
			// the same on every replica and in every release.
			gocron.WithName("sweep-"+source),
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, job string, err error) {
				if errors.Is(err, runclaim.ErrNotClaimed) {
					fmt.Printf("%s  %s  %-6s skipped: %s\n", time.Now().Format("15:04:05.000"), name, source, why(err))
					return
				}
				log.Printf("%s: %s: %v", name, job, err) // the claim failed
			})),
		)
		if err != nil {
			return nil, err
		}
	}
	return s, nil
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
		return nil, nil, err
	}
	fmt.Println("store: Postgres, table", store.Table())
	return store, pool.Close, nil
}

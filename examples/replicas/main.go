// Command replicas shows two replicas of a service ticking on the same
// sources: on every tick exactly one of them runs each source, and the other
// is told why not.
//
//	go run ./examples/replicas                                # in memory, no setup
//	DATABASE_URL=postgres://... go run ./examples/replicas    # on Postgres
//
// The sources are three jobs of different kinds:
//
//   - books: a slow sweep that outlives a tick; while it runs, every claim
//     is skipped because the source is already running;
//   - news: a fast job, finished before the second replica's tick arrives;
//     the minimum interval stops that replica from running it a second
//     time in the same tick (the double run of a check-then-act scheduler);
//   - weather: a job that fails now and then; the failure is recorded and
//     returned.
//
// The program takes about a second and a half.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

const (
	ticks       = 5
	tickEvery   = 200 * time.Millisecond
	replicaLag  = 30 * time.Millisecond  // one replica ticks this much after the other
	lease       = 2 * time.Second        // a crashed replica frees its sources after this
	minInterval = 150 * time.Millisecond // less than a tick, more than the replicas' lag
)

var sources = []string{"books", "news", "weather"}

// jobs are the work done for each source. run.ID is the fencing token:
// real jobs pass it to the writes they make.
var jobs = map[string]func(ctx context.Context, run *runclaim.Run) error{
	"books": func(ctx context.Context, run *runclaim.Run) error {
		return work(ctx, 450*time.Millisecond)
	},
	"news": func(ctx context.Context, run *runclaim.Run) error {
		return work(ctx, 10*time.Millisecond)
	},
	"weather": func(ctx context.Context, run *runclaim.Run) error {
		if err := work(ctx, 20*time.Millisecond); err != nil {
			return err
		}
		if n := weatherCalls.add(); n%2 == 0 {
			return errors.New("upstream answered 503 Service Unavailable")
		}
		return nil
	},
}

var weatherCalls counter

// work stands for a job's real work: it takes d, or stops when ctx ends,
// as a job must when its run is lost (context.Cause(ctx) then matches
// runclaim.ErrLeaseLost).
func work(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "replicas:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	store, describe, closeStore, err := openStore(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	fmt.Printf("store: %s\n", describe)
	fmt.Printf("two replicas, %d ticks %v apart (one %v behind the other), lease %v, minimum interval %v\n\n",
		ticks, tickEvery, replicaLag, lease, minInterval)

	st := newStats()
	var replicas []*replica
	for _, owner := range []string{"replica-a", "replica-b"} {
		c, err := runclaim.New(store,
			runclaim.WithOwner(owner),
			runclaim.WithLease(lease),
			runclaim.WithMinInterval(minInterval))
		if err != nil {
			return err
		}
		replicas = append(replicas, &replica{name: owner, claimer: c, stats: st})
	}

	start := time.Now()
	st.start = start
	var wg sync.WaitGroup
	for i := range ticks {
		// The replicas' tickers are not in step: one fires a little
		// before the other, and which one varies from tick to tick.
		for j := range replicas {
			r := replicas[(i+j)%len(replicas)]
			at := start.Add(time.Duration(i)*tickEvery + time.Duration(j)*replicaLag)
			if !sleepUntil(ctx, at) {
				break
			}
			st.printf("tick %d: %s\n", i+1, r.name)
			for _, src := range sources {
				wg.Go(func() { r.tick(ctx, src) })
			}
		}
	}
	wg.Wait()
	st.summary(replicas)
	return ctx.Err()
}

// openStore returns the Postgres store when DATABASE_URL is set, else a
// memory store.
func openStore(ctx context.Context) (runclaim.Store, string, func(), error) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return runclaim.NewMemoryStore(), "in memory (set DATABASE_URL to use Postgres)", func() {}, nil
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, "", nil, err
	}
	// The examples' own table and advisory lock namespace: pointed at a
	// production database, this example never competes with real jobs.
	store, err := runclaim.NewPostgresStore(pool,
		runclaim.WithTable(runclaim.DefaultSchema, "runclaim_example_runs"),
		runclaim.WithNamespace("runclaim-example"))
	if err != nil {
		pool.Close()
		return nil, "", nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		pool.Close()
		return nil, "", nil, err
	}
	cfg := pool.Config().ConnConfig
	return store, fmt.Sprintf("Postgres at %s:%d/%s, table %s", cfg.Host, cfg.Port, cfg.Database, store.Table()), pool.Close, nil
}

// A replica is one instance of the service, with its own Claimer.
type replica struct {
	name    string
	claimer *runclaim.Claimer
	stats   *stats
}

// tick is what the replica's scheduler does for a source on every tick.
func (r *replica) tick(ctx context.Context, source string) {
	var id int64
	err := r.claimer.Do(ctx, source, func(ctx context.Context, run *runclaim.Run) error {
		id = run.ID
		r.stats.enter(source)
		defer r.stats.leave(source)
		r.stats.printf("  %-9s %-7s run %d started\n", r.name, source, run.ID)
		return jobs[source](ctx, run)
	})
	var nc *runclaim.NotClaimedError
	switch {
	case errors.As(err, &nc):
		r.stats.count(r.name, source, skipReason(nc))
		r.stats.printf("  %-9s %-7s skipped: %s\n", r.name, source, describeSkip(nc))
	case err != nil && id == 0:
		r.stats.count(r.name, source, "claim error")
		r.stats.printf("  %-9s %-7s claim failed: %v\n", r.name, source, err)
	case err != nil:
		r.stats.count(r.name, source, "failed")
		r.stats.printf("  %-9s %-7s run %d failed: %v\n", r.name, source, id, err)
	default:
		r.stats.count(r.name, source, "succeeded")
		r.stats.printf("  %-9s %-7s run %d succeeded\n", r.name, source, id)
	}
}

func skipReason(nc *runclaim.NotClaimedError) string {
	if errors.Is(nc, runclaim.ErrTooSoon) {
		return "skipped: too soon"
	}
	return "skipped: running"
}

// describeSkip says why a claim was skipped, from the details the store
// reported.
func describeSkip(nc *runclaim.NotClaimedError) string {
	switch {
	case errors.Is(nc, runclaim.ErrTooSoon):
		return fmt.Sprintf("too soon, the last run started less than %v ago", minInterval)
	case nc.Holder != nil:
		return fmt.Sprintf("already running as run %d by %s", nc.Holder.ID, nc.Holder.Owner)
	default:
		return "another replica's claim is in flight"
	}
}

// sleepUntil waits until t, or returns false when ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// stats prints events and counts outcomes; it also counts how many runs of
// each source run at once, which the claims keep at one.
type stats struct {
	start time.Time

	mu       sync.Mutex                // protects the fields below
	outcomes map[string]map[string]int // "replica/source" -> outcome -> count
	running  map[string]int            // source -> runs in progress
	maxAtOnc map[string]int            // source -> most runs in progress at once
}

func newStats() *stats {
	return &stats{outcomes: map[string]map[string]int{}, running: map[string]int{}, maxAtOnc: map[string]int{}}
}

func (s *stats) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Printf("%6.3fs ", time.Since(s.start).Seconds())
	fmt.Printf(format, args...)
}

func (s *stats) enter(source string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[source]++
	s.maxAtOnc[source] = max(s.maxAtOnc[source], s.running[source])
}

func (s *stats) leave(source string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[source]--
}

func (s *stats) count(replica, source, outcome string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := replica + "/" + source
	if s.outcomes[key] == nil {
		s.outcomes[key] = map[string]int{}
	}
	s.outcomes[key][outcome]++
}

func (s *stats) summary(replicas []*replica) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Printf("\nsummary after %.2fs:\n", time.Since(s.start).Seconds())
	for _, src := range sources {
		fmt.Printf("  %-7s (at most %d run at a time)\n", src, s.maxAtOnc[src])
		for _, r := range replicas {
			o := s.outcomes[r.name+"/"+src]
			keys := make([]string, 0, len(o))
			for k := range o {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			parts := make([]string, 0, len(keys))
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s %d", k, o[k]))
			}
			fmt.Printf("    %-9s %s\n", r.name, strings.Join(parts, ", "))
		}
	}
}

// counter is a goroutine-safe counter.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

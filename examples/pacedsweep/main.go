// Command pacedsweep shows a sweep of one site paced across replicas: the
// forty sources of the sweep (one per city) share the key "site:example",
// whose Limit has a MinGap, so that however many replicas sweep at once,
// the site sees one request start at a time, MinGap apart.
//
// Two replicas sweep the same forty sources for one tick, each in its own
// order, with Wait: a claim within MinGap of the key's latest start waits
// until the gap has passed (the skip's RetryAfter says when), and a source
// the other replica already swept for this tick is skipped (ErrTickDone).
// Each source runs once, and the starts, by the store's clock, are at
// least MinGap apart.
//
// MinGap is 50 ms here so that the example ends in about two seconds; a
// real sweep would use seconds or minutes. By default the replicas share
// an in-memory store; with DATABASE_URL they share the examples' runs
// table on Postgres (schema version 12 or later: Migrate runs first):
//
//	go run ./examples/pacedsweep
//	DATABASE_URL=postgres://user:pass@localhost:5432/db go run ./examples/pacedsweep
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

const (
	site    = "site:example"
	sources = 40
	gap     = 50 * time.Millisecond
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, closeStore, err := openStore(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pacedsweep:", err)
		os.Exit(1)
	}
	defer closeStore()
	if _, err := sweep(ctx, store, time.Now().Truncate(time.Second), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pacedsweep:", err)
		os.Exit(1)
	}
}

// start is one run of the sweep: its source, the replica that ran it and
// when it started by the store's clock.
type start struct {
	source, replica string
	at              time.Time
}

// sweep runs the sweep of tick on two replicas at once and returns its
// starts, in order. It fails if a source ran twice or not at all, or if
// two starts came less than the gap apart.
func sweep(ctx context.Context, store runclaim.Store, tick time.Time, out io.Writer) ([]start, error) {
	limiter, ok := store.(runclaim.Limiter)
	if !ok {
		return nil, fmt.Errorf("%T does not implement runclaim.Limiter", store)
	}
	if err := limiter.SetLimit(ctx, site, runclaim.Limit{MinGap: gap}); err != nil {
		return nil, err
	}
	var names []string
	for i := range sources {
		names = append(names, fmt.Sprintf("sweep/city-%02d", i))
	}

	var (
		mu     sync.Mutex
		starts []start
	)
	replica := func(name string, order []string) error {
		c, err := runclaim.New(store, runclaim.WithOwner(name))
		if err != nil {
			return err
		}
		for _, src := range order {
			err := c.Do(ctx, src, func(ctx context.Context, run *runclaim.Run) error {
				mu.Lock()
				starts = append(starts, start{src, name, run.StartedAt})
				mu.Unlock()
				return nil // fetch the city's page here
			}, runclaim.WithKeys(site), runclaim.ForTick(tick), runclaim.Wait())
			if err != nil && !errors.Is(err, runclaim.ErrTickDone) {
				return fmt.Errorf("%s: %s: %w", name, src, err)
			}
		}
		return nil
	}
	// replica-a sweeps the cities in order, replica-b from the last.
	reversed := slices.Clone(names)
	slices.Reverse(reversed)
	errs := make(chan error, 2)
	go func() { errs <- replica("replica-a", names) }()
	go func() { errs <- replica("replica-b", reversed) }()
	if err := errors.Join(<-errs, <-errs); err != nil {
		return nil, err
	}

	if len(starts) == 0 {
		return nil, fmt.Errorf("no source ran: tick %v was swept already", tick)
	}
	slices.SortFunc(starts, func(a, b start) int { return a.at.Compare(b.at) })
	seen := make(map[string]bool)
	for i, s := range starts {
		if seen[s.source] {
			return nil, fmt.Errorf("%s ran twice", s.source)
		}
		seen[s.source] = true
		step := ""
		if i > 0 {
			d := s.at.Sub(starts[i-1].at)
			if d < gap {
				return nil, fmt.Errorf("%s started %v after %s, less than MinGap %v", s.source, d, starts[i-1].source, gap)
			}
			step = fmt.Sprintf(" (+%v)", d.Round(time.Millisecond))
		}
		fmt.Fprintf(out, "%s: %s at %s%s\n", s.replica, s.source, s.at.Format("15:04:05.000"), step)
	}
	if len(seen) != sources {
		return nil, fmt.Errorf("%d sources ran, want %d", len(seen), sources)
	}
	fmt.Fprintf(out, "%d sources swept once each, at least %v apart, in %v\n", sources, gap, starts[len(starts)-1].at.Sub(starts[0].at).Round(10*time.Millisecond))
	return starts, nil
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

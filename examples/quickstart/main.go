// Command quickstart is the README's quickstart: it claims the source
// "nightly-report" and runs the job if it wins. With DATABASE_URL set it
// claims on that Postgres: run it twice at once and one of them skips.
// Without it, it says so and runs two replicas in this process on the
// in-memory store: one runs the job, the other skips.
//
//	go run ./examples/quickstart
//	DATABASE_URL=postgres://... go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"log"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

func main() {
	ctx := context.Background()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		log.Print("DATABASE_URL is not set: two replicas in this process, on the in-memory store")
		store := runclaim.NewMemoryStore() // shared by the replicas, as Postgres would be
		var wg sync.WaitGroup
		for _, replica := range []string{"replica-1", "replica-2"} {
			wg.Go(func() { nightlyReport(ctx, store, replica) })
		}
		wg.Wait()
		return
	}

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil { // safe at every start
		log.Fatal(err)
	}
	nightlyReport(ctx, store, "this process")
}

// nightlyReport is what every replica runs on its schedule.
func nightlyReport(ctx context.Context, store runclaim.Store, replica string) {
	claimer, err := runclaim.New(store, runclaim.WithLease(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	err = claimer.Do(ctx, "nightly-report", func(ctx context.Context, run *runclaim.Run) error {
		log.Printf("%s: run %d: working", replica, run.ID) // run.ID is a fencing token
		select {
		case <-time.After(2 * time.Second): // the job's work
			return nil
		case <-ctx.Done(): // the run was lost: stop
			return context.Cause(ctx)
		}
	})
	switch {
	case errors.Is(err, runclaim.ErrNotClaimed):
		log.Printf("%s: skipped: %v", replica, err) // another replica has it
	case err != nil:
		log.Fatal(err)
	default:
		log.Printf("%s: done", replica)
	}
}

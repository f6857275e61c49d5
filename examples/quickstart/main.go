// Command quickstart is the README's quickstart: it claims the source
// "nightly-report" on the Postgres at DATABASE_URL and runs the job if it
// wins. Run it twice at once and one of them skips.
//
//	DATABASE_URL=postgres://... go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
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
	claimer, err := runclaim.New(store, runclaim.WithLease(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}

	err = claimer.Do(ctx, "nightly-report", func(ctx context.Context, run *runclaim.Run) error {
		log.Printf("run %d: working", run.ID) // run.ID is a fencing token
		select {
		case <-time.After(2 * time.Second): // the job's work
			return nil
		case <-ctx.Done(): // the run was lost: stop
			return context.Cause(ctx)
		}
	})
	switch {
	case errors.Is(err, runclaim.ErrNotClaimed):
		log.Printf("skipped: %v", err) // another replica has it
	case err != nil:
		log.Fatal(err)
	default:
		log.Print("done")
	}
}

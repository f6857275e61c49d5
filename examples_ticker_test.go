package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/runclaim/runclaim"
)

// A plain ticker on every replica, aligned to the wall clock: each tick,
// Do runs the sweep of a source on the one replica whose claim wins and
// skips it on the others. (time.NewTicker would count each replica's period
// from its own start, so that replicas would tick at different moments and
// each win its own tick.)
func ExampleClaimer_Do_ticker() {
	ctx, stop := context.WithCancel(context.Background()) // signal.NotifyContext in a service
	defer stop()

	// runclaim.NewPostgresStore(pool) in production, shared by every
	// replica. A minimum interval of half the period turns away a replica
	// whose tick comes a little late, after a quick sweep has finished.
	const period = 200 * time.Millisecond // say time.Minute in production
	claimer, err := runclaim.New(runclaim.NewMemoryStore(), runclaim.WithMinInterval(period/2))
	if err != nil {
		log.Fatal(err)
	}

	for tick := 1; ; tick++ {
		// Wait for the next multiple of period on the wall clock: the
		// same moment on every replica.
		next := time.Now().Truncate(period).Add(period)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		for _, source := range []string{"avito", "cian"} {
			err := claimer.Do(ctx, source, func(ctx context.Context, run *runclaim.Run) error {
				// ctx ends if the run is lost; run.ID is a fencing token.
				fmt.Printf("tick %d: sweeping %s as run %d\n", tick, run.Source, run.ID)
				return nil
			})
			switch {
			case errors.Is(err, runclaim.ErrNotClaimed):
				// Another replica has this tick.
			case err != nil:
				log.Printf("sweep %s: %v", source, err)
			}
		}
		if tick == 2 {
			stop() // this example stops after two ticks
		}
	}
	// Output:
	// tick 1: sweeping avito as run 1
	// tick 1: sweeping cian as run 2
	// tick 2: sweeping avito as run 3
	// tick 2: sweeping cian as run 4
}

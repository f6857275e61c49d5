package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/runclaim/runclaim"
)

// A plain time.Ticker on every replica: each tick, Do runs the sweep of a
// source on the one replica whose claim wins and skips it on the others.
func ExampleClaimer_Do_ticker() {
	ctx, stop := context.WithCancel(context.Background()) // signal.NotifyContext in a service
	defer stop()

	// runclaim.NewPostgresStore(pool) in production, shared by every replica.
	claimer, err := runclaim.New(runclaim.NewMemoryStore())
	if err != nil {
		log.Fatal(err)
	}

	ticker := time.NewTicker(10 * time.Millisecond) // say time.Minute in production
	defer ticker.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
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

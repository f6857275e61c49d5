package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/runclaim/runclaim"
)

// A plain loop on every replica: a Ticker delivers the ticks of a
// schedule on the wall clock, the same on every replica, and Do with ForTick runs
// the sweep of a source for a tick on the one replica whose claim wins.
// Any other claim of that tick, however late (a replica whose clock is
// behind, after a quick sweep has finished), is skipped with ErrTickDone.
// A replica that starts, or wakes, up to the starting deadline after a
// tick gets that tick at once: a tick missed during a restart still runs.
func ExampleForTick() {
	ctx, stop := context.WithCancel(context.Background()) // signal.NotifyContext in a service
	defer stop()

	// runclaim.NewPostgresStore(pool) in production, shared by every
	// replica.
	claimer, err := runclaim.New(runclaim.NewMemoryStore())
	if err != nil {
		log.Fatal(err)
	}
	const period = 200 * time.Millisecond // say time.Minute in production
	ticker, err := runclaim.NewTicker(runclaim.Every(period), period/2)
	if err != nil {
		log.Fatal(err)
	}
	defer ticker.Stop()

	for n := 1; ; n++ {
		var tick time.Time
		select {
		case <-ctx.Done():
			return
		case tick = <-ticker.C:
		}
		for _, source := range []string{"avito", "cian"} {
			err := claimer.Do(ctx, source, func(ctx context.Context, run *runclaim.Run) error {
				// ctx ends if the run is lost; run.ID is a fencing token.
				fmt.Printf("tick %d: sweeping %s as run %d\n", n, run.Source, run.ID)
				return nil
			}, runclaim.ForTick(tick))
			switch {
			case errors.Is(err, runclaim.ErrNotClaimed):
				// Another replica has this tick, or has run it.
			case err != nil:
				log.Printf("sweep %s: %v", source, err)
			}
		}
		if n == 2 {
			stop() // this example stops after two ticks
		}
	}
	// Output:
	// tick 1: sweeping avito as run 1
	// tick 1: sweeping cian as run 2
	// tick 2: sweeping avito as run 3
	// tick 2: sweeping cian as run 4
}

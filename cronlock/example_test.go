package cronlock_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/cronlock"
)

func ExampleSkipUnlessClaimed() {
	// runclaim.NewPostgresStore(pool) in production, shared by every
	// replica. This example sets the store's clock to show two ticks five
	// minutes apart.
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	store := runclaim.NewMemoryStore(runclaim.WithClock(func() time.Time { return now }))
	claimer, err := runclaim.New(store, runclaim.WithOwner("replica-a"))
	if err != nil {
		log.Fatal(err)
	}
	logger := cron.VerbosePrintfLogger(log.New(os.Stdout, "cron: ", 0))

	// The wrapper names each firing by the job's schedule: cron does not
	// tell a job which firing it serves.
	sched, err := cron.ParseStandard("*/5 * * * *")
	if err != nil {
		log.Fatal(err)
	}
	claimed, err := cronlock.SkipUnlessClaimed(claimer, "sweep-avito", logger, cronlock.WithSchedule(sched))
	if err != nil {
		log.Fatal(err)
	}
	c := cron.New(cron.WithChain(cron.Recover(logger)))
	id := c.Schedule(sched, claimed(cron.FuncJob(func() { fmt.Println("sweeping avito") })))
	// A service calls c.Start(); this example runs two ticks by hand.
	tick := c.Entry(id).WrappedJob.Run

	tick()
	now = now.Add(5 * time.Minute)
	// Another replica holds the source during the second tick.
	other, err := runclaim.New(store, runclaim.WithOwner("replica-b"))
	if err != nil {
		log.Fatal(err)
	}
	run, err := other.Claim(context.Background(), "sweep-avito")
	if err != nil {
		log.Fatal(err)
	}
	tick()
	if err := run.Finish(context.Background(), nil); err != nil {
		log.Fatal(err)
	}
	// Output:
	// sweeping avito
	// cron: skip, source=sweep-avito, reason=already running, holder=replica-b, run=2
}

func ExampleJob() {
	ctx, stop := context.WithCancel(context.Background()) // cancel at shutdown
	defer stop()
	// runclaim.NewPostgresStore(pool) in production, shared by every replica.
	claimer, err := runclaim.New(runclaim.NewMemoryStore())
	if err != nil {
		log.Fatal(err)
	}
	logger := cron.PrintfLogger(log.New(os.Stderr, "cron: ", log.LstdFlags))

	c := cron.New(cron.WithChain(cron.Recover(logger)))
	sched, err := cron.ParseStandard("*/5 * * * *")
	if err != nil {
		log.Fatal(err)
	}
	job, err := cronlock.Job(ctx, claimer, "sweep-cian", logger,
		func(ctx context.Context, run *runclaim.Run) error {
			// ctx ends if the run is lost; run.ID is a fencing token; an
			// error is recorded as the run's outcome.
			fmt.Printf("sweeping cian as run %d\n", run.ID)
			return nil
		},
		cronlock.WithSchedule(sched))
	if err != nil {
		log.Fatal(err)
	}
	id := c.Schedule(sched, job)
	// A service calls c.Start(); this example runs one tick by hand.
	c.Entry(id).WrappedJob.Run()
	// Output: sweeping cian as run 1
}

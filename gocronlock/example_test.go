package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/gocronlock"
)

func Example() {
	// runclaim.NewPostgresStore(pool) in production, shared by every replica.
	store := runclaim.NewMemoryStore()
	claimer, err := runclaim.New(store)
	if err != nil {
		log.Fatal(err)
	}
	// The Locker names each firing by the job's schedule: gocron does not
	// tell it which scheduled time it fires for.
	const spec = "*/5 * * * *"
	sched, err := cron.ParseStandard(spec) // robfig/cron, which gocron parses specs with
	if err != nil {
		log.Fatal(err)
	}
	locker, err := gocronlock.New(claimer, gocronlock.WithSchedule("sweep-avito", sched))
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}

	done := make(chan struct{}) // this example stops after the first run
	_, err = s.NewJob(
		gocron.CronJob(spec, false),
		gocron.NewTask(func() {
			fmt.Println("sweeping avito")
			close(done)
		}),
		gocron.WithName("sweep-avito"), // the claimed source: keep it stable across releases
		// At the start, run the latest firing that has passed (see
		// Catching up in the package doc), here for the example's sake.
		gocron.WithStartAt(gocron.WithStartImmediately()),
		gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, job string, err error) {
			if !errors.Is(err, runclaim.ErrNotClaimed) { // a skip is routine; this is not
				log.Printf("%s: %v", job, err)
			}
		})),
	)
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	<-done
	if err := s.Shutdown(); err != nil {
		log.Fatal(err)
	}
	// Output: sweeping avito
}

// A job that needs what the Locker cannot give it (its outcome recorded, the
// run ID as a fencing token, its context cancelled when the run is lost)
// calls Claimer.Do itself, in a scheduler without the Locker.
func Example_claimerDo() {
	// runclaim.NewPostgresStore(pool) in production, shared by every replica.
	claimer, err := runclaim.New(runclaim.NewMemoryStore())
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler() // no distributed locker
	if err != nil {
		log.Fatal(err)
	}

	done := make(chan struct{}) // this example stops after the first run
	_, err = s.NewJob(
		gocron.DurationJob(time.Minute),
		gocron.NewTask(func(ctx context.Context) { // gocron passes the job's context
			defer close(done)
			err := claimer.Do(ctx, "sweep-avito", func(ctx context.Context, run *runclaim.Run) error {
				fmt.Printf("sweeping avito as run %d\n", run.ID)
				return nil // an error here is recorded as the run's outcome
			})
			if err != nil && !errors.Is(err, runclaim.ErrNotClaimed) {
				log.Printf("sweep-avito: %v", err)
			}
		}),
		gocron.WithName("sweep-avito"),
		gocron.WithStartAt(gocron.WithStartImmediately()),
	)
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	<-done
	if err := s.Shutdown(); err != nil {
		log.Fatal(err)
	}
	// Output: sweeping avito as run 1
}

// With an Elector, one scheduler of all the replicas runs every job, and
// the others stand by: a replica takes over when the leader closes, or
// within one lease of its death.
func ExampleNewElector() {
	// runclaim.NewPostgresStore(pool) in production, shared by every replica.
	claimer, err := runclaim.New(runclaim.NewMemoryStore())
	if err != nil {
		log.Fatal(err)
	}
	elector, err := gocronlock.NewElector(claimer, "billing/scheduler-leader")
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		log.Fatal(err)
	}

	done := make(chan struct{}) // this example stops after the first run
	_, err = s.NewJob(
		gocron.DurationJob(time.Minute),
		gocron.NewTask(func() {
			fmt.Println("the leader sweeps")
			close(done)
		}),
		gocron.WithStartAt(gocron.WithStartImmediately()),
	)
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	<-done
	if err := s.Shutdown(); err != nil { // waits for running jobs
		log.Fatal(err)
	}
	if err := elector.Close(context.Background()); err != nil { // hands leadership over
		log.Fatal(err)
	}
	// Output: the leader sweeps
}

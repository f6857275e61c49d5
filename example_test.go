package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runclaim/runclaim"
)

// Two replicas tick on the same source; one runs it, the other is told why
// not. In production the store is NewPostgresStore on the shared database.
func Example() {
	ctx := context.Background()
	store := runclaim.NewMemoryStore()
	replicaA, _ := runclaim.New(store, runclaim.WithOwner("replica-a"))
	replicaB, _ := runclaim.New(store, runclaim.WithOwner("replica-b"))

	run, err := replicaA.Claim(ctx, "avito")
	if err != nil {
		fmt.Println("replica-a:", err)
		return
	}
	fmt.Printf("replica-a runs %s as run %d\n", run.Source, run.ID)

	_, err = replicaB.Claim(ctx, "avito")
	var nc *runclaim.NotClaimedError
	if errors.As(err, &nc) && nc.Holder != nil {
		fmt.Printf("replica-b skips %s: run %d by %s holds it\n", nc.Source, nc.Holder.ID, nc.Holder.Owner)
	}

	if err := run.Finish(ctx, nil); err != nil {
		fmt.Println("finish:", err)
	}
	run, err = replicaB.Claim(ctx, "avito")
	if err == nil {
		fmt.Printf("next tick: replica-b runs %s as run %d\n", run.Source, run.ID)
		_ = run.Finish(ctx, nil)
	}
	// Output:
	// replica-a runs avito as run 1
	// replica-b skips avito: run 1 by replica-a holds it
	// next tick: replica-b runs avito as run 2
}

// Do claims, heartbeats while the job runs, and records its outcome. A
// skipped tick is an error matching ErrNotClaimed, and the job is not run.
func ExampleClaimer_Do() {
	ctx := context.Background()
	claimer, err := runclaim.New(runclaim.NewMemoryStore(), runclaim.WithOwner("pod-7"))
	if err != nil {
		fmt.Println(err)
		return
	}

	sweep := func(ctx context.Context, run *runclaim.Run) error {
		// Pass run.ID to downstream writes as a fencing token, and stop
		// when ctx is cancelled: context.Cause(ctx) matches ErrLeaseLost
		// when the run is no longer this replica's.
		fmt.Printf("sweeping %s as run %d\n", run.Source, run.ID)

		// A second tick while the sweep runs is skipped.
		err := claimer.Do(ctx, run.Source, func(context.Context, *runclaim.Run) error {
			fmt.Println("never printed")
			return nil
		})
		fmt.Println("overlapping tick skipped:", errors.Is(err, runclaim.ErrNotClaimed))
		return nil
	}
	if err := claimer.Do(ctx, "avito", sweep); err != nil {
		fmt.Println("sweep:", err)
	}

	// A job's error is recorded and returned, wrapped.
	errBanned := errors.New("banned by the site")
	err = claimer.Do(ctx, "avito", func(context.Context, *runclaim.Run) error { return errBanned })
	fmt.Println(errors.Is(err, errBanned), err)
	// Output:
	// sweeping avito as run 1
	// overlapping tick skipped: true
	// true runclaim: run 2 of "avito": banned by the site
}

// Claim for callers that manage the run themselves: heartbeat while it lasts
// longer than the lease, and always finish it.
func ExampleClaimer_Claim() {
	ctx := context.Background()
	store := runclaim.NewMemoryStore()
	claimer, _ := runclaim.New(store, runclaim.WithLease(time.Minute), runclaim.WithMinInterval(time.Hour))

	run, err := claimer.Claim(ctx, "avito")
	switch {
	case errors.Is(err, runclaim.ErrNotClaimed):
		fmt.Println("skipped:", err)
		return
	case err != nil:
		fmt.Println("claim failed:", err)
		return
	}
	if err := run.Heartbeat(ctx); err != nil {
		fmt.Println("lost the run:", errors.Is(err, runclaim.ErrLeaseLost))
	}
	if err := run.Finish(ctx, nil); err != nil {
		fmt.Println("finish:", err)
	}
	fmt.Println("run", run.ID, "done; lease was", run.LeaseUntil.Sub(run.StartedAt))

	// The minimum interval is measured from the last start.
	_, err = claimer.Claim(ctx, "avito")
	var nc *runclaim.NotClaimedError
	if errors.As(err, &nc) && errors.Is(err, runclaim.ErrTooSoon) {
		fmt.Println("too soon; retry after", nc.RetryAfter.Sub(run.StartedAt), "from the last start")
	}
	// Output:
	// run 1 done; lease was 1m0s
	// too soon; retry after 1h0m0s from the last start
}

// A memory store with its own clock shows lease expiry without waiting: a
// holder that stopped heartbeating loses its run to the next claim.
func ExampleNewMemoryStore() {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	store := runclaim.NewMemoryStore(runclaim.WithClock(func() time.Time { return now }))
	crashed, _ := runclaim.New(store, runclaim.WithOwner("crashed"), runclaim.WithLease(30*time.Second))
	healthy, _ := runclaim.New(store, runclaim.WithOwner("healthy"), runclaim.WithLease(30*time.Second))

	stale, _ := crashed.Claim(ctx, "avito")
	fmt.Println("crashed holds run", stale.ID, "until", stale.LeaseUntil.Format(time.TimeOnly))

	now = now.Add(31 * time.Second) // no heartbeat came
	run, err := healthy.Claim(ctx, "avito")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("healthy took over as run", run.ID, "at", run.StartedAt.Format(time.TimeOnly))
	fmt.Println("crashed's heartbeat:", errors.Is(stale.Heartbeat(ctx), runclaim.ErrLeaseLost))
	fmt.Println("crashed's finish:", errors.Is(stale.Finish(ctx, nil), runclaim.ErrLeaseLost))
	_ = run.Finish(ctx, nil)
	// Output:
	// crashed holds run 1 until 12:00:30
	// healthy took over as run 2 at 12:00:31
	// crashed's heartbeat: true
	// crashed's finish: true
}

// A job winding down after a shutdown watches Lost: its context was
// cancelled by the shutdown, so a run lost meanwhile shows only there.
// Here the holder heartbeats by hand, and a takeover after the store's
// clock passed the lease is what loses the run.
func ExampleRun_Lost() {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := runclaim.NewMemoryStore(runclaim.WithClock(func() time.Time { return now }))
	holder, _ := runclaim.New(store, runclaim.WithOwner("old-replica"))
	other, _ := runclaim.New(store, runclaim.WithOwner("new-replica"))

	run, _ := holder.Claim(ctx, "avito")
	flushed := make(chan struct{}) // the wind-down, still going on

	now = now.Add(holder.Settings().Lease + time.Second) // the holder stalled past its lease
	next, _ := other.Claim(ctx, "avito")
	fmt.Printf("%s took avito over as run %d\n", next.Owner, next.ID)
	if err := run.Heartbeat(ctx); errors.Is(err, runclaim.ErrLeaseLost) {
		fmt.Println("heartbeat: lease lost")
	}

	select {
	case <-flushed:
		fmt.Println("flushed")
	case <-run.Lost():
		fmt.Printf("run %d lost: stop writing\n", run.ID)
	}
	// Output:
	// new-replica took avito over as run 2
	// heartbeat: lease lost
	// run 1 lost: stop writing
}

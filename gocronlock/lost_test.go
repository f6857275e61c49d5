package gocronlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/runclaim/runclaim"
)

// TestTaskSeesLostAfterShutdown: a gocron task reaches its run through
// Locker.Run with the context gocron gives it. The scheduler shuts down,
// which cancels that context, and while the task winds down its run is
// taken over (the store's clock jumps past the lease and another replica
// claims the source). The task must learn it from run.Lost(), and the
// Locker must forget the run at Unlock.
//
// The store's clock is a fake one, moved by hand; the heartbeats run on
// real time, every third of the 1 s lease, so the holder's next heartbeat
// after the takeover finds the run gone. waitTimeout only bounds a wait
// that a working Lost ends at that heartbeat.
func TestTaskSeesLostAfterShutdown(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	store := runclaim.NewMemoryStore(runclaim.WithClock(func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}))
	const lease = time.Second
	holder := newClaimer(t, store, runclaim.WithLease(lease), runclaim.WithOwner("holder"))
	locker := newLocker(t, holder, minutely)
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		t.Fatal(err)
	}

	type seen struct {
		run         *runclaim.Run
		ctx         context.Context
		shutdownErr error // the job's context's error when Lost closed
		lost        bool
	}
	started := make(chan *runclaim.Run, 1)
	result := make(chan seen, 1)
	task := func(ctx context.Context) {
		run := locker.Run(ctx)
		started <- run
		if run == nil {
			result <- seen{ctx: ctx}
			return
		}
		<-ctx.Done() // the shutdown; now winding down
		timeout := time.NewTimer(waitTimeout)
		defer timeout.Stop()
		select {
		case <-run.Lost():
			result <- seen{run: run, ctx: ctx, shutdownErr: ctx.Err(), lost: true}
		case <-timeout.C:
			result <- seen{run: run, ctx: ctx, shutdownErr: ctx.Err()}
		}
	}
	if _, err := s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()), gocron.NewTask(task), gocron.WithName("sweep")); err != nil {
		t.Fatal(err)
	}
	s.Start()
	run := awaitValue(t, started, "the task to start")
	if run == nil {
		t.Fatal("Locker.Run(ctx) = nil inside the locked task")
	}
	if run.Source != "sweep" || run.Owner != "holder" {
		t.Fatalf("Locker.Run(ctx) = run of %q by %q", run.Source, run.Owner)
	}
	shutdown := make(chan error, 1)
	go func() { shutdown <- s.Shutdown() }() // cancels the job's context, waits for the task

	mu.Lock()
	now = now.Add(lease + time.Second)
	mu.Unlock()
	taker := newClaimer(t, store, runclaim.WithLease(lease), runclaim.WithOwner("taker"))
	takeover, err := taker.Claim(t.Context(), "sweep")
	if err != nil {
		t.Fatalf("claim after the lease ended: %v", err)
	}

	got := awaitValue(t, result, "the task to return")
	if err := awaitValue(t, shutdown, "Shutdown to return"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if !got.lost {
		t.Fatal("the task never saw run.Lost() close after its run was taken over")
	}
	if !errors.Is(got.shutdownErr, context.Canceled) {
		t.Errorf("the job's context error = %v when Lost closed; the scenario needs the shutdown first", got.shutdownErr)
	}
	if r := locker.Run(got.ctx); r != nil {
		t.Errorf("Locker.Run after Unlock = run %d, want nil", r.ID)
	}
	if err := takeover.Finish(t.Context(), nil); err != nil {
		t.Errorf("the takeover run: %v", err)
	}
}

// TestLockerRunUnknownContext: a context the Locker holds no run for gives
// nil, and so does nil.
func TestLockerRunUnknownContext(t *testing.T) {
	locker := newLocker(t, newClaimer(t, runclaim.NewMemoryStore()), minutely)
	lk, err := locker.Lock(t.Context(), "sweep")
	if err != nil {
		t.Fatal(err)
	}
	if r := locker.Run(t.Context()); r == nil || r.Source != "sweep" {
		t.Errorf("Locker.Run(the Lock's context) = %v, want the run of sweep", r)
	}
	if r := locker.Run(context.Background()); r != nil {
		t.Errorf("Locker.Run(another context) = run %d, want nil", r.ID)
	}
	//lint:ignore SA1012 nil is the case under test
	if r := locker.Run(nil); r != nil {
		t.Errorf("Locker.Run(nil) = run %d, want nil", r.ID)
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := locker.Run(t.Context()); r != nil {
		t.Errorf("Locker.Run after Unlock = run %d, want nil", r.ID)
	}
}

// awaitValue receives from ch, or fails the test after waitTimeout.
func awaitValue[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		panic("unreachable")
	}
}

// TestElectorRunLost: a job of the leading scheduler reaches the
// leadership run through Elector.Run, and its Lost channel closes once the
// leader's heartbeats have failed for all but the expiry margin of a
// lease: exactly then, in a synctest bubble on the memory store.
func TestElectorRunLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &partitionable{Store: runclaim.NewMemoryStore()}
		c := newClaimer(t, store)
		e := newElector(t, c, "leader")
		if r := e.Run(); r != nil {
			t.Fatalf("Run before IsLeader = run %d, want nil", r.ID)
		}
		t0 := time.Now()
		if err := e.IsLeader(t.Context()); err != nil {
			t.Fatal(err)
		}
		run := e.Run()
		if run == nil || run.Source != "leader" {
			t.Fatalf("Run while leading = %v, want the leadership run", run)
		}
		store.cut.Store(true)
		<-run.Lost()
		if got, want := time.Since(t0), c.Settings().Lease-c.Settings().ExpiryMargin; got != want {
			t.Errorf("Lost closed at t0+%v, want t0+%v", got, want)
		}
		if err := e.IsLeader(t.Context()); err == nil {
			t.Error("IsLeader = nil for a leader cut off from the store")
		}
		if r := e.Run(); r != nil {
			t.Errorf("Run after leadership was lost and not won back = run %d, want nil", r.ID)
		}
		store.cut.Store(false)
	})
}

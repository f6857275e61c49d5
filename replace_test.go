package runclaim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// Rule: Do's function, asked to stop by a claim with Replace, sees its
// context cancelled with cause ErrReplaced while its run still holds the
// source (Lost stays open); once it returns, the run is recorded
// StatusReplaced (the Finished event says so), Do returns an error
// matching ErrReplaced, and the claim with Replace, which waited, wins.
// Both stores.
func TestReplaceDo(t *testing.T) {
	eachStore(t, func(t *testing.T, store runclaim.Store) {
		ctx := t.Context()
		var finished runclaim.Status
		holder := sharedtest.NewClaimer(t, store, runclaim.WithOwner("holder"), runclaim.WithHeartbeat(100*time.Millisecond),
			runclaim.WithHooks(runclaim.Hooks{Finished: func(e runclaim.Event) { finished = e.Status }}))
		replacer := sharedtest.NewClaimer(t, store, runclaim.WithOwner("replacer"))
		started := make(chan struct{})
		stopped := make(chan error, 1)
		done := make(chan error, 1)
		go func() {
			done <- holder.Do(ctx, "src", func(ctx context.Context, run *runclaim.Run) error {
				close(started)
				<-ctx.Done()
				select {
				case <-run.Lost():
					stopped <- errors.New("Lost closed: a replaced run keeps its lease")
				default:
					stopped <- context.Cause(ctx)
				}
				return ctx.Err()
			})
		}()
		waitFor(t, started, 10*time.Second, "the holder's run")
		won := claimAsync(ctx, replacer, "src", runclaim.Replace())
		cause := waitFor(t, stopped, 10*time.Second, "the holder's context to end")
		if !errors.Is(cause, runclaim.ErrReplaced) || !errors.Is(cause, runclaim.ErrLeaseLost) {
			t.Errorf("the holder's context ended with cause %v, want ErrReplaced", cause)
		}
		err := waitFor(t, done, 10*time.Second, "Do to return")
		if !errors.Is(err, runclaim.ErrReplaced) {
			t.Errorf("Do of the replaced run: %v, want ErrReplaced", err)
		}
		if finished != runclaim.StatusReplaced {
			t.Errorf("Finished event: status %q, want %q", finished, runclaim.StatusReplaced)
		}
		r := waitFor(t, won, 10*time.Second, "the claim with Replace to win")
		if r.err != nil {
			t.Fatalf("claim with Replace: %v", r.err)
		}
		if err := r.run.Finish(ctx, nil); err != nil {
			t.Error(err)
		}
	})
}

// Rule: Replace skips at once on a pause, a served tick and the minimum
// interval, as the store answers; ClaimMany and DoMany refuse it, and it
// may not be given twice.
func TestReplaceRefused(t *testing.T) {
	ctx := t.Context()
	store := runclaim.NewMemoryStore()
	c := sharedtest.NewClaimer(t, store, runclaim.WithMinInterval(time.Hour))
	run, err := c.Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	defer run.Finish(ctx, nil)
	if _, err := c.Claim(ctx, "src", runclaim.Replace()); !errors.Is(err, runclaim.ErrTooSoon) {
		t.Errorf("Replace of a run younger than the interval: %v, want ErrTooSoon at once", err)
	}
	if _, err := c.ClaimMany(ctx, []string{"a", "b"}, runclaim.Replace()); err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
		t.Errorf("ClaimMany with Replace: %v, want an error", err)
	}
	if _, err := c.Claim(ctx, "x", runclaim.Replace(), runclaim.Replace()); err == nil {
		t.Error("Replace given twice: nil error")
	}
	if _, err := c.Claim(ctx, "src", runclaim.Replace(), runclaim.Wait()); !errors.Is(err, runclaim.ErrTooSoon) {
		t.Errorf("Replace with Wait: %v, want what Replace gives, ErrTooSoon", err)
	}
}

package runclaim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// Rule (docs/overlap.md, Temporal's BufferOne and BufferAll): a claim of a
// tick with Wait, made while a run of an earlier tick holds the source,
// runs after it; of two ticks waiting, each runs after the one before it,
// unless a later tick was served first: then the earlier one is dropped
// (ErrTickDone). Never two runs at once. Both stores.
func TestBufferedTicks(t *testing.T) {
	eachStore(t, func(t *testing.T, store runclaim.Store) {
		ctx := t.Context()
		base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		holder := sharedtest.NewClaimer(t, store, runclaim.WithOwner("holder"))
		first, err := holder.Claim(ctx, "src", runclaim.ForTick(base))
		if err != nil {
			t.Fatal(err)
		}
		w2 := claimAsync(ctx, sharedtest.NewClaimer(t, store, runclaim.WithOwner("w2")), "src", runclaim.ForTick(base.Add(time.Minute)), runclaim.Wait())
		w3 := claimAsync(ctx, sharedtest.NewClaimer(t, store, runclaim.WithOwner("w3")), "src", runclaim.ForTick(base.Add(2*time.Minute)), runclaim.Wait())
		time.Sleep(50 * time.Millisecond) // both wait behind the holder
		if err := first.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		results := map[string]claimResult{}
		for len(results) < 2 {
			select {
			case r := <-w2:
				results["w2"] = r
				if r.err == nil {
					if err := r.run.Finish(ctx, nil); err != nil {
						t.Fatal(err)
					}
				}
			case r := <-w3:
				results["w3"] = r
				if r.err == nil {
					if err := r.run.Finish(ctx, nil); err != nil {
						t.Fatal(err)
					}
				}
			case <-time.After(sharedtest.Scale(t, 20*time.Second)):
				t.Fatalf("the waiting claims did not end: %v", results)
			}
		}
		r2, r3 := results["w2"], results["w3"]
		if r3.err != nil {
			t.Fatalf("the claim of the latest tick: %v, want a win", r3.err)
		}
		switch {
		case r2.err == nil:
			if !r2.run.StartedAt.Before(r3.run.StartedAt) {
				t.Errorf("tick 2 ran at %v, after tick 3 at %v", r2.run.StartedAt, r3.run.StartedAt)
			}
		case errors.Is(r2.err, runclaim.ErrTickDone):
			// Overtaken: tick 3 was served while tick 2 waited.
		default:
			t.Errorf("the claim of tick 2: %v, want a win or ErrTickDone", r2.err)
		}
	})
}

// Rule (docs/overlap.md, Temporal's AllowAll): a job that may overlap
// itself takes no claim; and Skip, the default: a claim of a held source
// is skipped at once.
func TestSkipIsTheDefault(t *testing.T) {
	ctx := context.Background()
	store := runclaim.NewMemoryStore()
	c := sharedtest.NewClaimer(t, store)
	run, err := c.Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	defer run.Finish(ctx, nil)
	if _, err := c.Claim(ctx, "src"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Errorf("a claim of a held source: %v, want ErrAlreadyRunning at once", err)
	}
}

package runclaim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// Issue: a tick in the first microsecond of year 1 is cut down to the
// zero time, which means "no tick". It is refused as the zero tick is, by
// every entry point that takes a tick, and nothing is claimed; the first
// tick a store keeps is a microsecond later.
func TestTickInFirstMicrosecondRefused(t *testing.T) {
	ctx := t.Context()
	store := runclaim.NewMemoryStore()
	c, err := runclaim.New(store)
	if err != nil {
		t.Fatal(err)
	}
	for _, tick := range []time.Time{
		time.Date(1, time.January, 1, 0, 0, 0, 1, time.UTC),
		time.Date(1, time.January, 1, 0, 0, 0, 999, time.UTC),
		time.Date(1, time.January, 1, 0, 0, 0, 0, time.UTC).Add(time.Nanosecond).In(time.FixedZone("east", 3600)),
	} {
		_, err := c.Claim(ctx, "src", runclaim.ForTick(tick))
		if err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("ForTick(%v): %v; want an error that is not a skip", tick, err)
		}
		runs, err := c.ClaimMany(ctx, []string{"src"}, runclaim.ForTick(tick))
		if err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("ClaimMany with ForTick(%v): %v, %d runs; want an error", tick, err, len(runs))
		}
		called := false
		err = c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { called = true; return nil }, runclaim.ForTick(tick))
		if err == nil || errors.Is(err, runclaim.ErrNotClaimed) || called {
			t.Errorf("Do with ForTick(%v): %v, called %v; want an error, and fn not called", tick, err, called)
		}
	}
	// Nothing was claimed: the source is free.
	plain, err := c.Claim(ctx, "src")
	if err != nil {
		t.Fatalf("a plain claim after the refused ticks: %v; want a win", err)
	}
	if err := plain.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	second := time.Date(1, time.January, 1, 0, 0, 0, 1000, time.UTC)
	run, err := c.Claim(ctx, "src", runclaim.ForTick(second))
	if err != nil || !run.Tick.Equal(second) {
		t.Fatalf("ForTick of the first tick kept: %v, %v", run, err)
	}
}

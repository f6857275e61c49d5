package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// hookLog records, in order, which hook set saw which event.
type hookLog struct{ calls []string }

// hooks returns a set named name that records every event kind but the
// ones in skip, which it leaves nil.
func (l *hookLog) hooks(name string, skip ...string) runclaim.Hooks {
	note := func(kind string) { l.calls = append(l.calls, name+" "+kind) }
	h := runclaim.Hooks{
		Claimed:         func(runclaim.Event) { note("claimed") },
		Skipped:         func(runclaim.Event) { note("skipped") },
		ClaimFailed:     func(runclaim.Event) { note("claim failed") },
		Finished:        func(runclaim.Event) { note("finished") },
		HeartbeatFailed: func(runclaim.Event) { note("heartbeat failed") },
		LeaseLost:       func(runclaim.Event) { note("lease lost") },
	}
	for _, kind := range skip {
		switch kind {
		case "claimed":
			h.Claimed = nil
		case "skipped":
			h.Skipped = nil
		case "claim failed":
			h.ClaimFailed = nil
		case "finished":
			h.Finished = nil
		case "heartbeat failed":
			h.HeartbeatFailed = nil
		case "lease lost":
			h.LeaseLost = nil
		default:
			panic("unknown event kind " + kind)
		}
	}
	return h
}

// take returns the calls recorded and forgets them.
func (l *hookLog) take() []string {
	calls := l.calls
	l.calls = nil
	return calls
}

// TestHooksCompose: every set given with WithHooks is called, in the
// order given, for every event kind; a nil field in one set, the first,
// a middle or the last, leaves the others called. Claimer.With adds its sets after the Claimer's own and
// leaves the Claimer's unchanged.
func TestHooksCompose(t *testing.T) {
	ctx := t.Context()
	spy := newSpyStore(runclaim.NewMemoryStore())
	log := &hookLog{}
	c := doClaimer(t, spy, runclaim.WithLease(time.Minute),
		runclaim.WithHooks(log.hooks("a", "heartbeat failed")),
		runclaim.WithHooks(log.hooks("b", "claimed", "skipped", "finished")),
		runclaim.WithHooks(log.hooks("c", "lease lost")))

	// each runs step and checks that the sets named in sets, and no
	// others, saw kind, in that order.
	each := func(kind string, sets []string, step func() error) {
		t.Helper()
		if err := step(); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		var want []string
		for _, s := range sets {
			want = append(want, s+" "+kind)
		}
		if got := log.take(); !slices.Equal(got, want) {
			t.Errorf("%s: hooks called %q, want %q", kind, got, want)
		}
	}
	all, noB := []string{"a", "b", "c"}, []string{"a", "c"}

	var run *runclaim.Run
	each("claimed", noB, func() (err error) {
		run, err = c.Claim(ctx, "s")
		return err
	})
	each("skipped", noB, func() error {
		if _, err := c.Claim(ctx, "s"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
			return fmt.Errorf("second claim: %v; want ErrAlreadyRunning", err)
		}
		return nil
	})
	each("claim failed", all, func() error {
		if _, err := c.Claim(ctx, "bad\x00source"); !errors.Is(err, runclaim.ErrInvalidSource) {
			return fmt.Errorf("claim of an invalid source: %v; want ErrInvalidSource", err)
		}
		return nil
	})
	spy.setHeartbeat(func(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
		return time.Time{}, errors.New("connection refused")
	})
	each("heartbeat failed", []string{"b", "c"}, func() error {
		if err := run.Heartbeat(ctx); err == nil {
			return errors.New("heartbeat succeeded with the store down")
		}
		return nil
	})
	spy.setHeartbeat(func(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
		return time.Time{}, fmt.Errorf("runclaim: heartbeat run %d: %w", req.ID, runclaim.ErrLeaseLost)
	})
	each("lease lost", []string{"a", "b"}, func() error {
		if err := run.Heartbeat(ctx); !errors.Is(err, runclaim.ErrLeaseLost) {
			return fmt.Errorf("heartbeat of a released run: %v; want ErrLeaseLost", err)
		}
		return nil
	})
	spy.setHeartbeat(nil)
	each("finished", noB, func() error {
		run, err := c.Claim(ctx, "t")
		if err != nil {
			return err
		}
		log.take() // claimed, checked above
		return run.Finish(ctx, nil)
	})

	// With adds a set after the Claimer's; the Claimer keeps its own.
	d, err := c.With(runclaim.WithHooks(log.hooks("d")))
	if err != nil {
		t.Fatal(err)
	}
	each("claimed", []string{"a", "c", "d"}, func() error {
		_, err := d.Claim(ctx, "u")
		return err
	})
	each("skipped", noB, func() error {
		if _, err := c.Claim(ctx, "u"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
			return fmt.Errorf("claim by the base: %v; want ErrAlreadyRunning", err)
		}
		return nil
	})
}

// TestSkippedHookReasons: for every reason to skip, the Skipped hook gets
// the very *NotClaimedError the claim returned, which matches its reason
// with errors.Is.
func TestSkippedHookReasons(t *testing.T) {
	ctx := t.Context()
	store := runclaim.NewMemoryStore()
	var got []runclaim.Event
	c := doClaimer(t, store, runclaim.WithMinInterval(time.Hour),
		runclaim.WithHooks(runclaim.Hooks{Skipped: func(e runclaim.Event) { got = append(got, e) }}))
	tick := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	run, err := c.Claim(ctx, "ticked", runclaim.ForTick(tick))
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	run, err = c.Claim(ctx, "recent")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := store.Pause(ctx, "paused", time.Time{}, "maintenance"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		reason error
		claim  func() (*runclaim.Run, error)
	}{
		{runclaim.ErrAlreadyRunning, func() (*runclaim.Run, error) { return c.Claim(ctx, "held") }},
		{runclaim.ErrTooSoon, func() (*runclaim.Run, error) { return c.Claim(ctx, "recent") }},
		{runclaim.ErrTickDone, func() (*runclaim.Run, error) { return c.Claim(ctx, "ticked", runclaim.ForTick(tick)) }},
		{runclaim.ErrPaused, func() (*runclaim.Run, error) { return c.Claim(ctx, "paused") }},
	} {
		got = nil
		_, err := tc.claim()
		if !errors.Is(err, tc.reason) {
			t.Errorf("claim: %v; want %v", err, tc.reason)
			continue
		}
		if len(got) != 1 {
			t.Errorf("%v: %d Skipped calls, want 1", tc.reason, len(got))
			continue
		}
		if e := got[0]; error(e.Err) != err || !errors.Is(e.Err, tc.reason) || !errors.Is(e.Err, runclaim.ErrNotClaimed) {
			t.Errorf("%v: Skipped got %v; want the claim's error, %v", tc.reason, e.Err, err)
		}
	}
}

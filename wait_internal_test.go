package runclaim

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// The pauses of a waiting claim: between half and all of a bound that
// starts at waitPollMin and doubles up to waitPollMax; less when the
// skip's RetryAfter comes first.
func TestPollSchedule(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	held := &NotClaimedError{Reason: ErrAlreadyRunning}
	for _, tc := range []struct {
		name  string
		rand  func(n int64) int64
		skips []*NotClaimedError
		want  []time.Duration
	}{
		{"lowest draw", func(int64) int64 { return 0 },
			[]*NotClaimedError{held, held, held, held, held, held, held},
			[]time.Duration{25, 50, 100, 200, 400, 400, 400}},
		{"highest draw", func(n int64) int64 { return n - 1 },
			[]*NotClaimedError{held, held, held, held, held, held, held},
			[]time.Duration{50, 100, 200, 400, 800, 800, 800}},
		{"a lease that ends first", func(n int64) int64 { return n - 1 },
			[]*NotClaimedError{held, held, held, {Reason: ErrAlreadyRunning, RetryAfter: now.Add(100 * time.Millisecond)}, held},
			[]time.Duration{50, 100, 200, 105, 800}},
		{"a RetryAfter that has passed", func(n int64) int64 { return n - 1 },
			[]*NotClaimedError{{Reason: ErrAlreadyRunning, RetryAfter: now.Add(-time.Second)}},
			[]time.Duration{50}},
		{"a RetryAfter after the pause", func(n int64) int64 { return n - 1 },
			[]*NotClaimedError{{Reason: ErrTooSoon, RetryAfter: now.Add(time.Hour)}},
			[]time.Duration{50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pollSchedule{rand: tc.rand}
			for i, nc := range tc.skips {
				want := tc.want[i] * time.Millisecond
				if got := p.pause(nc, now); got != want {
					t.Errorf("pause %d: %v, want %v", i, got, want)
				}
			}
		})
	}
}

// Which skips a waiting claim waits on.
func TestWaitable(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	deadline := now.Add(time.Minute)
	before, after := now.Add(time.Second), now.Add(time.Hour)
	errLater := newSkip("runclaim: a reason of a later release")
	for _, tc := range []struct {
		name        string
		nc          NotClaimedError
		hasDeadline bool
		want        bool
	}{
		{"held", NotClaimedError{Reason: ErrAlreadyRunning, RetryAfter: after}, false, true},
		{"in flight", NotClaimedError{Reason: ErrAlreadyRunning}, true, true},
		{"a later reason", NotClaimedError{Reason: errLater, RetryAfter: after}, true, true},
		{"a key's limit", NotClaimedError{Reason: ErrLimited, Key: "site:a", RetryAfter: after}, false, true},
		{"a key cooling down", NotClaimedError{Reason: ErrLimited, Key: "site:a", RetryAfter: after, Note: "429"}, true, true},
		{"tick done", NotClaimedError{Reason: ErrTickDone}, true, false},
		{"paused until Resume", NotClaimedError{Reason: ErrPaused}, true, false},
		{"paused, ends before the deadline", NotClaimedError{Reason: ErrPaused, RetryAfter: before}, true, true},
		{"paused, ends after the deadline", NotClaimedError{Reason: ErrPaused, RetryAfter: after}, true, false},
		{"paused, no deadline", NotClaimedError{Reason: ErrPaused, RetryAfter: before}, false, false},
		{"too soon, before the deadline", NotClaimedError{Reason: ErrTooSoon, RetryAfter: before}, true, true},
		{"too soon, after the deadline", NotClaimedError{Reason: ErrTooSoon, RetryAfter: after}, true, false},
		{"too soon, no deadline", NotClaimedError{Reason: ErrTooSoon, RetryAfter: before}, false, false},
	} {
		if got := waitable(&tc.nc, deadline, tc.hasDeadline, false); got != tc.want {
			t.Errorf("%s: waitable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A Claimer holds a waiting claim back for the rest of waitPollMax after
// a run of the source won by its own waiting claim ended; other sources,
// and later claims, go at once.
func TestYields(t *testing.T) {
	var y yields
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if d := y.holdBack("a", now); d != 0 {
		t.Errorf("hold back with nothing ended: %v", d)
	}
	y.end("a", now)
	if d := y.holdBack("a", now.Add(300*time.Millisecond)); d != waitPollMax-300*time.Millisecond {
		t.Errorf("hold back 300ms after the end: %v, want %v", d, waitPollMax-300*time.Millisecond)
	}
	if d := y.holdBack("b", now); d != 0 {
		t.Errorf("hold back of another source: %v", d)
	}
	if d := y.holdBack("a", now.Add(waitPollMax)); d != 0 {
		t.Errorf("hold back a cap after the end: %v", d)
	}
	// Old entries are dropped once there are many.
	for i := range yieldsKept {
		y.end(string(rune('A'+i)), now)
	}
	y.end("new", now.Add(waitPollMax))
	y.mu.Lock()
	n := len(y.ended)
	y.mu.Unlock()
	if n != 1 {
		t.Errorf("%d sources kept after the old ones lapsed; want 1", n)
	}
}

// A run won by a waiting claim counts its lease from the claim that won,
// not from the call: its local expiry is after the holder's Finish.
func TestWaitRunClaimedAtWin(t *testing.T) {
	ctx := t.Context()
	store := NewMemoryStore()
	holder, err := New(store, WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	skipped := make(chan struct{}, 1)
	waiter, err := New(store, WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waiter.store = skipSignal{store, skipped}
	held, err := holder.Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		run *Run
		err error
	}
	done := make(chan result, 1)
	go func() {
		run, err := waiter.Claim(ctx, "src", Wait())
		done <- result{run, err}
	}()
	select {
	case <-skipped:
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not skipped")
	}
	skippedAt := time.Now()
	if err := held.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the waiter did not win after the holder's Finish")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.run.Finish(ctx, nil)
	if !r.run.claimedAt.After(skippedAt) {
		t.Errorf("run claimed at %v, before the waiter's skip at %v: its lease counts from the call", r.run.claimedAt, skippedAt)
	}
	if !r.run.waited {
		t.Error("the run is not marked won by a waiting claim")
	}
}

// skipSignal is a Store that signals on skipped (if no signal is
// pending) after each skipped claim.
type skipSignal struct {
	Store
	skipped chan struct{}
}

func (s skipSignal) Claim(ctx context.Context, req ClaimRequest) (RunInfo, error) {
	info, err := s.Store.Claim(ctx, req)
	if errors.Is(err, ErrNotClaimed) {
		select {
		case s.skipped <- struct{}{}:
		default:
		}
	}
	return info, err
}

// On a MemoryStore a waiting claim wins as soon as a claim can (the
// holder's Finish, a Resume, a Trigger), not at its next poll: in a
// bubble, no time passes between the change and the win.
func TestWaitMemoryWakes(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		// setup makes the source unclaimable, and returns what makes it
		// claimable again.
		setup func(t *testing.T, s *MemoryStore, c *Claimer) (change func() error)
	}{
		{"finish", nil, func(t *testing.T, s *MemoryStore, c *Claimer) func() error {
			held, err := c.Claim(t.Context(), "src")
			if err != nil {
				t.Fatal(err)
			}
			return func() error { return held.Finish(t.Context(), nil) }
		}},
		{"resume", nil, func(t *testing.T, s *MemoryStore, c *Claimer) func() error {
			if err := s.Pause(t.Context(), "src", time.Now().Add(time.Hour), ""); err != nil {
				t.Fatal(err)
			}
			return func() error { return s.Resume(t.Context(), "src") }
		}},
		{"trigger", []Option{WithMinInterval(time.Hour)}, func(t *testing.T, s *MemoryStore, c *Claimer) func() error {
			run, err := c.Claim(t.Context(), "src")
			if err != nil {
				t.Fatal(err)
			}
			if err := run.Finish(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			return func() error { return s.Trigger(t.Context(), "src") }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Hour)
				defer cancel()
				store := NewMemoryStore()
				other, err := New(store, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				waiter, err := New(store, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				change := tc.setup(t, store, other)
				done := make(chan *Run, 1)
				go func() {
					run, err := waiter.Claim(ctx, "src", Wait())
					if err != nil {
						t.Errorf("waiting claim: %v", err)
					}
					done <- run
				}()
				time.Sleep(10 * time.Second) // many polls, in the bubble's time
				synctest.Wait()
				select {
				case run := <-done:
					t.Fatalf("won run %v before the change", run)
				default:
				}
				changed := time.Now()
				if err := change(); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				select {
				case run := <-done:
					if run == nil {
						return
					}
					if d := time.Since(changed); d != 0 {
						t.Errorf("won %v after the change; want at once", d)
					}
					if err := run.Finish(ctx, nil); err != nil {
						t.Fatal(err)
					}
				default:
					t.Fatal("the waiter did not win at once after the change")
				}
			})
		})
	}
}

// A waiting claim of a source that a waited run of the same Claimer just
// finished holds back for the rest of waitPollMax, unless ctx's deadline
// comes first; another Claimer's, and a plain claim, do not.
func TestWaitHoldsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := NewMemoryStore()
		c, err := New(store)
		if err != nil {
			t.Fatal(err)
		}
		other, err := New(store)
		if err != nil {
			t.Fatal(err)
		}
		claim := func(c *Claimer, ctx context.Context, opts ...ClaimOption) time.Duration {
			t.Helper()
			start := time.Now()
			run, err := c.Claim(ctx, "src", opts...)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if err := run.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
			return took
		}
		if d := claim(c, ctx, Wait()); d != 0 {
			t.Errorf("first waiting claim took %v; want no wait", d)
		}
		if d := claim(c, ctx, Wait()); d != waitPollMax {
			t.Errorf("waiting claim right after the Claimer's waited run ended took %v; want %v", d, waitPollMax)
		}
		time.Sleep(waitPollMax / 4)
		if d := claim(c, ctx, Wait()); d != waitPollMax*3/4 {
			t.Errorf("waiting claim a quarter cap after took %v; want %v", d, waitPollMax*3/4)
		}
		dctx, cancel := context.WithTimeout(ctx, waitPollMax/2)
		defer cancel()
		if d := claim(c, dctx, Wait()); d != 0 {
			t.Errorf("waiting claim with a deadline before the hold-back's end took %v; want no wait", d)
		}
		if d := claim(other, ctx, Wait()); d != 0 {
			t.Errorf("another Claimer's waiting claim took %v; want no wait", d)
		}
		if d := claim(c, ctx); d != 0 {
			t.Errorf("plain claim took %v; want no wait", d)
		}
	})
}

package runclaim_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// countStore counts the claims sent through it, and the skips among them.
type countStore struct {
	runclaim.Store
	claims  atomic.Int64
	skips   atomic.Int64
	skipped chan struct{} // gets a value (if none is pending) on each skip
}

func newCountStore(inner runclaim.Store) *countStore {
	return &countStore{Store: inner, skipped: make(chan struct{}, 1)}
}

func (s *countStore) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	s.claims.Add(1)
	info, err := s.Store.Claim(ctx, req)
	if errors.Is(err, runclaim.ErrNotClaimed) {
		s.skips.Add(1)
		select {
		case s.skipped <- struct{}{}:
		default:
		}
	}
	return info, err
}

// hookCounts counts the hooks' events.
type hookCounts struct {
	claimed, skipped, failed atomic.Int64
	mu                       sync.Mutex // protects last
	last                     runclaim.Event
}

func (h *hookCounts) hooks() runclaim.Hooks {
	keep := func(n *atomic.Int64) func(runclaim.Event) {
		return func(e runclaim.Event) {
			n.Add(1)
			h.mu.Lock()
			h.last = e
			h.mu.Unlock()
		}
	}
	return runclaim.Hooks{Claimed: keep(&h.claimed), Skipped: keep(&h.skipped), ClaimFailed: keep(&h.failed)}
}

func (h *hookCounts) check(t *testing.T, claimed, skipped, failed int64) {
	t.Helper()
	if c, s, f := h.claimed.Load(), h.skipped.Load(), h.failed.Load(); c != claimed || s != skipped || f != failed {
		t.Errorf("hooks: %d claimed, %d skipped, %d failed; want %d, %d, %d", c, s, f, claimed, skipped, failed)
	}
}

// eachStore runs test on a fresh memory store and a fresh Postgres store.
func eachStore(t *testing.T, test func(t *testing.T, store runclaim.Store)) {
	for _, sc := range sharedtest.Stores() {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			test(t, sc.Open(t))
		})
	}
}

// waitFor receives from ch, or fails the test after bound (scaled).
func waitFor[T any](t *testing.T, ch <-chan T, bound time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(sharedtest.Scale(t, bound)):
		t.Fatalf("no %s within %v", what, sharedtest.Scale(t, bound))
		panic("unreachable")
	}
}

type claimResult struct {
	run *runclaim.Run
	err error
	at  time.Time
}

// claimAsync starts Claim(ctx, source, opts...) on c and returns where its
// result comes.
func claimAsync(ctx context.Context, c *runclaim.Claimer, source string, opts ...runclaim.ClaimOption) <-chan claimResult {
	done := make(chan claimResult, 1)
	go func() {
		run, err := c.Claim(ctx, source, opts...)
		done <- claimResult{run, err, time.Now()}
	}()
	return done
}

// Rule: a waiting claim of a held source waits, and wins once the holder
// has finished; one Claimed event, no Skipped for its polls.
func TestWaitWinsAfterFinish(t *testing.T) {
	eachStore(t, func(t *testing.T, store runclaim.Store) {
		ctx := t.Context()
		cs := newCountStore(store)
		var h hookCounts
		holder := sharedtest.NewClaimer(t, store, runclaim.WithOwner("holder"))
		waiter := sharedtest.NewClaimer(t, cs, runclaim.WithOwner("waiter"), runclaim.WithHooks(h.hooks()))
		held, err := holder.Claim(ctx, "src")
		if err != nil {
			t.Fatal(err)
		}
		done := claimAsync(ctx, waiter, "src", runclaim.Wait())
		// Skipped twice: it polls on.
		for range 2 {
			waitFor(t, cs.skipped, 10*time.Second, "skip of the waiter")
		}
		finished := time.Now()
		if err := held.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		r := waitFor(t, done, 10*time.Second, "win after the holder's Finish")
		if r.err != nil {
			t.Fatalf("waiting claim: %v", r.err)
		}
		defer r.run.Finish(ctx, nil)
		if r.run.ID <= held.ID || r.run.Owner != "waiter" {
			t.Errorf("won run %d of %q; want a run after %d, the waiter's", r.run.ID, r.run.Owner, held.ID)
		}
		t.Logf("won %v after the holder's Finish returned, after %d claims", r.at.Sub(finished), cs.claims.Load())
		h.check(t, 1, 0, 0)
		h.mu.Lock()
		if h.last.Waited <= 0 || h.last.Run != r.run {
			t.Errorf("Claimed event: Waited %v, Run %p; want a positive wait, run %p", h.last.Waited, h.last.Run, r.run)
		}
		h.mu.Unlock()
	})
}

// Rule: a waiting claim wins once a dead holder's lease has ended, and the
// holder has lost its run.
func TestWaitDeadHolder(t *testing.T) {
	eachStore(t, func(t *testing.T, store runclaim.Store) {
		ctx := t.Context()
		cs := newCountStore(store)
		holder := sharedtest.NewClaimer(t, store, runclaim.WithOwner("holder"), runclaim.WithLease(500*time.Millisecond))
		waiter := sharedtest.NewClaimer(t, cs, runclaim.WithOwner("waiter"))
		held, err := holder.Claim(ctx, "src")
		if err != nil {
			t.Fatal(err)
		}
		// The holder dies: no heartbeat, no Finish.
		r := waitFor(t, claimAsync(ctx, waiter, "src", runclaim.Wait()), 20*time.Second, "win after the dead holder's lease")
		if r.err != nil {
			t.Fatalf("waiting claim: %v", r.err)
		}
		defer r.run.Finish(ctx, nil)
		if r.run.StartedAt.Before(held.LeaseUntil) {
			t.Errorf("won at %v, before the dead holder's lease ended at %v", r.run.StartedAt, held.LeaseUntil)
		}
		if cs.skips.Load() == 0 {
			t.Errorf("the waiter won without being skipped: it did not wait")
		}
		if err := held.Heartbeat(ctx); !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("the dead holder's heartbeat: %v, want ErrLeaseLost", err)
		}
		t.Logf("won %v after the dead holder's lease ended (store clock), after %d claims", r.run.StartedAt.Sub(held.LeaseUntil), cs.claims.Load())
	})
}

// Rule: a waiting claim returns at once, after one claim, on a skip that
// waiting cannot end: a pause until Resume, a pause or an interval that
// ends after ctx's deadline or with no deadline, a tick served. Its one
// Skipped event carries the skip.
func TestWaitReturnsAtOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, store runclaim.Store) {
		ctx := t.Context()
		ctl := store.(runclaim.Controller)
		tick := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		for _, tc := range []struct {
			name     string
			source   string
			setup    func(t *testing.T)
			deadline time.Duration // 0: none
			opts     []runclaim.Option
			claim    []runclaim.ClaimOption
			want     error
		}{
			{name: "paused until Resume", source: "p1", deadline: time.Hour, want: runclaim.ErrPaused,
				setup: func(t *testing.T) {
					if err := ctl.Pause(ctx, "p1", time.Time{}, "maintenance"); err != nil {
						t.Fatal(err)
					}
				}},
			{name: "paused past the deadline", source: "p2", deadline: time.Minute, want: runclaim.ErrPaused,
				setup: func(t *testing.T) {
					if err := ctl.Pause(ctx, "p2", time.Now().Add(time.Hour), ""); err != nil {
						t.Fatal(err)
					}
				}},
			{name: "paused, no deadline", source: "p3", want: runclaim.ErrPaused,
				setup: func(t *testing.T) {
					if err := ctl.Pause(ctx, "p3", time.Now().Add(time.Minute), ""); err != nil {
						t.Fatal(err)
					}
				}},
			{name: "tick done", source: "t1", deadline: time.Hour, want: runclaim.ErrTickDone,
				claim: []runclaim.ClaimOption{runclaim.ForTick(tick)},
				setup: func(t *testing.T) {
					c := sharedtest.NewClaimer(t, store)
					run, err := c.Claim(ctx, "t1", runclaim.ForTick(tick))
					if err != nil {
						t.Fatal(err)
					}
					if err := run.Finish(ctx, nil); err != nil {
						t.Fatal(err)
					}
				}},
			{name: "too soon past the deadline", source: "s1", deadline: time.Minute, want: runclaim.ErrTooSoon,
				opts: []runclaim.Option{runclaim.WithMinInterval(time.Hour)},
				setup: func(t *testing.T) {
					c := sharedtest.NewClaimer(t, store, runclaim.WithMinInterval(time.Hour))
					run, err := c.Claim(ctx, "s1")
					if err != nil {
						t.Fatal(err)
					}
					if err := run.Finish(ctx, nil); err != nil {
						t.Fatal(err)
					}
				}},
			{name: "too soon, no deadline", source: "s2", want: runclaim.ErrTooSoon,
				opts: []runclaim.Option{runclaim.WithMinInterval(time.Minute)},
				setup: func(t *testing.T) {
					c := sharedtest.NewClaimer(t, store, runclaim.WithMinInterval(time.Minute))
					run, err := c.Claim(ctx, "s2")
					if err != nil {
						t.Fatal(err)
					}
					if err := run.Finish(ctx, nil); err != nil {
						t.Fatal(err)
					}
				}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.setup(t)
				cs := newCountStore(store)
				var h hookCounts
				c := sharedtest.NewClaimer(t, cs, append(tc.opts, runclaim.WithHooks(h.hooks()))...)
				cctx := ctx
				if tc.deadline > 0 {
					var cancel context.CancelFunc
					cctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				run, err := c.Claim(cctx, tc.source, append(tc.claim, runclaim.Wait())...)
				if !errors.Is(err, tc.want) {
					t.Fatalf("Claim with Wait: %v, %v; want %v", run, err, tc.want)
				}
				if n := cs.claims.Load(); n != 1 {
					t.Errorf("%d claims sent; want 1", n)
				}
				h.check(t, 0, 1, 0)
				h.mu.Lock()
				if !errors.Is(h.last.Err, tc.want) {
					t.Errorf("Skipped event's Err: %v; want %v", h.last.Err, tc.want)
				}
				h.mu.Unlock()
				// Do, too, returns the skip without calling fn.
				err = c.Do(cctx, tc.source, func(context.Context, *runclaim.Run) error {
					t.Error("fn called")
					return nil
				}, append(tc.claim, runclaim.Wait())...)
				if !errors.Is(err, tc.want) {
					t.Errorf("Do with Wait: %v; want %v", err, tc.want)
				}
			})
		}
	})
}

// Rule: a pause, or a minimum interval, that ends before ctx's deadline
// is waited for.
func TestWaitUntilRetryAfter(t *testing.T) {
	eachStore(t, func(t *testing.T, store runclaim.Store) {
		ctx, cancel := context.WithTimeout(t.Context(), sharedtest.Scale(t, 30*time.Second))
		defer cancel()
		ctl := store.(runclaim.Controller)
		cs := newCountStore(store)
		c := sharedtest.NewClaimer(t, cs, runclaim.WithMinInterval(300*time.Millisecond))
		// The pause must end after the claim's first attempt has read it:
		// 300 ms from now, or, on a machine where a call takes long (a
		// loaded one), ten times a claim and a Resume measured once the
		// store has made its first claim (which learns the table's
		// version and proves that the advisory locks exclude).
		warm := func(source string) {
			t.Helper()
			r, err := c.Claim(ctx, source)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		warm("warm")
		start := time.Now()
		warm("warm again")
		if err := ctl.Resume(ctx, "paused"); err != nil {
			t.Fatal(err)
		}
		until := time.Now().Add(max(300*time.Millisecond, 10*time.Since(start)))
		if err := ctl.Pause(ctx, "paused", until, ""); err != nil {
			t.Fatal(err)
		}
		skipsBefore := cs.skips.Load()
		run, err := c.Claim(ctx, "paused", runclaim.Wait())
		if err != nil {
			t.Fatalf("waiting claim of a pause that ends before the deadline: %v", err)
		}
		if run.StartedAt.Before(until) {
			t.Errorf("won at %v, before the pause's end %v", run.StartedAt, until)
		}
		if cs.skips.Load() == skipsBefore {
			t.Errorf("won without a skip: the pause did not hold")
		}
		if err := run.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		// The minimum interval, from run's start.
		next, err := c.Claim(ctx, "paused", runclaim.Wait())
		if err != nil {
			t.Fatalf("waiting claim of an interval that ends before the deadline: %v", err)
		}
		defer next.Finish(ctx, nil)
		if got := next.StartedAt.Sub(run.StartedAt); got < 300*time.Millisecond {
			t.Errorf("next run started %v after the last; want at least the interval, 300ms", got)
		}
	})
}

// Rule: a waiting claim whose ctx ends returns an error matching ctx's,
// not a skip, and reports it once, as a failed claim.
func TestWaitContextEnds(t *testing.T) {
	eachStore(t, func(t *testing.T, store runclaim.Store) {
		ctx := t.Context()
		holder := sharedtest.NewClaimer(t, store, runclaim.WithOwner("holder"))
		held, err := holder.Claim(ctx, "src")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Finish(ctx, nil)
		for _, tc := range []struct {
			name string
			make func() (context.Context, context.CancelFunc)
			want error
		}{
			{"cancelled", func() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }, context.Canceled},
			{"deadline", func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, 300*time.Millisecond)
			}, context.DeadlineExceeded},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cs := newCountStore(store)
				var h hookCounts
				waiter := sharedtest.NewClaimer(t, cs, runclaim.WithHooks(h.hooks()))
				wctx, cancel := tc.make()
				defer cancel()
				done := claimAsync(wctx, waiter, "src", runclaim.Wait())
				waitFor(t, cs.skipped, 10*time.Second, "skip of the waiter")
				if tc.want == context.Canceled {
					cancel()
				}
				r := waitFor(t, done, 10*time.Second, "return after ctx ended")
				if !errors.Is(r.err, tc.want) || errors.Is(r.err, runclaim.ErrNotClaimed) {
					t.Fatalf("waiting claim: %v, %v; want an error matching %v and not ErrNotClaimed", r.run, r.err, tc.want)
				}
				h.check(t, 0, 0, 1)
				h.mu.Lock()
				if h.last.Err != r.err || h.last.Waited <= 0 {
					t.Errorf("ClaimFailed event: Err %v, Waited %v; want the claim's error and a positive wait", h.last.Err, h.last.Waited)
				}
				h.mu.Unlock()
			})
		}
	})
}

// Rule: Wait given twice, and Wait with ClaimMany or DoMany, is refused
// with an error that is not a skip, and nothing is claimed.
func TestWaitRefused(t *testing.T) {
	ctx := t.Context()
	c := sharedtest.NewClaimer(t, runclaim.NewMemoryStore())
	fn := func(context.Context, *runclaim.Run) error { t.Error("fn called"); return nil }
	notSkip := func(what string, err error) {
		t.Helper()
		if err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("%s: %v; want an error that is not a skip", what, err)
		}
	}
	_, err := c.Claim(ctx, "src", runclaim.Wait(), runclaim.Wait())
	notSkip("Claim with Wait twice", err)
	notSkip("Do with Wait twice", c.Do(ctx, "src", fn, runclaim.Wait(), runclaim.Wait()))
	runs, err := c.ClaimMany(ctx, []string{"src", "other"}, runclaim.Wait())
	notSkip("ClaimMany with Wait", err)
	if runs != nil {
		t.Errorf("ClaimMany with Wait returned runs %v", runs)
	}
	notSkip("DoMany with Wait", c.DoMany(ctx, []string{"src", "other"}, fn, runclaim.Wait()))
	for _, s := range []string{"src", "other"} {
		run, err := c.Claim(ctx, s)
		if err != nil {
			t.Fatalf("claim of %q after the refused calls: %v", s, err)
		}
		defer run.Finish(ctx, nil)
	}
	// Bad input, with Wait, is refused as without it.
	if _, err := c.Claim(ctx, "bad\x00", runclaim.Wait()); !errors.Is(err, runclaim.ErrInvalidSource) {
		t.Errorf("Claim of an invalid source with Wait: %v; want ErrInvalidSource", err)
	}
	var nilCtx context.Context
	if _, err := c.Claim(nilCtx, "src", runclaim.Wait()); err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
		t.Errorf("Claim with a nil context and Wait: %v; want an error that is not a skip", err)
	}
}

// Rule: with three callers that each claim with Wait again as soon as
// their run ends, none starves: each wins again and again while the
// others keep winning, and no two runs overlap.
func TestWaitNoStarvation(t *testing.T) {
	eachStore(t, func(t *testing.T, store runclaim.Store) {
		const waiters, wantWins = 3, 5
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		bound := sharedtest.Scale(t, time.Minute)
		var (
			inside  atomic.Int32
			overlap atomic.Int32
			wins    [waiters]atomic.Int32
			enough  atomic.Int32 // waiters with wantWins wins
			all     = make(chan struct{})
			wg      sync.WaitGroup
		)
		for i := range waiters {
			c := sharedtest.NewClaimer(t, store, runclaim.WithOwner(string(rune('a'+i))))
			wg.Go(func() {
				for ctx.Err() == nil {
					err := c.Do(ctx, "src", func(context.Context, *runclaim.Run) error {
						if inside.Add(1) != 1 {
							overlap.Add(1)
						}
						time.Sleep(10 * time.Millisecond) // the job
						inside.Add(-1)
						return nil
					}, runclaim.Wait())
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("waiter %d: %v", i, err)
						}
						return
					}
					if wins[i].Add(1) == wantWins && enough.Add(1) == waiters {
						close(all)
					}
				}
			})
		}
		select {
		case <-all:
		case <-time.After(bound):
		}
		stop()
		wg.Wait()
		var got [waiters]int32
		total := int32(0)
		for i := range wins {
			got[i] = wins[i].Load()
			total += got[i]
		}
		t.Logf("wins per waiter: %v", got)
		for i, n := range got {
			if n < wantWins {
				t.Errorf("waiter %d won %d times in %v while the others won %d; want at least %d", i, n, bound, total-n, wantWins)
			}
		}
		if n := overlap.Load(); n != 0 {
			t.Errorf("%d runs started while another was inside fn", n)
		}
	})
}

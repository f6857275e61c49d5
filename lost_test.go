package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runclaim/runclaim"
)

// These tests cover Run.Lost and a run's end: a run lost while fn winds
// down after a shutdown, a run lost by the local clock, a holder that
// heartbeats by hand, and a run finished inside fn. They run in a
// testing/synctest bubble on the memory store, whose clock is the
// bubble's: every time below is exact, and nothing waits in real time.
//
// With the default lease of 30 s, the heartbeat interval is 10 s, a failed
// attempt is retried after 2.5 s, and the expiry margin is
// (30 s - 2×10 s)/4 = 2.5 s.

const (
	lostLease    = runclaim.DefaultLease
	lostInterval = lostLease / 3
	lostMargin   = (lostLease - 2*lostInterval) / 4
)

// lostHooks counts the LeaseLost and HeartbeatFailed events of a Claimer.
type lostHooks struct{ lost, failed atomic.Int32 }

func (h *lostHooks) option() runclaim.Option {
	return runclaim.WithHooks(runclaim.Hooks{
		LeaseLost:       func(runclaim.Event) { h.lost.Add(1) },
		HeartbeatFailed: func(runclaim.Event) { h.failed.Add(1) },
	})
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// How the run is lost in each scenario, from a moment while fn winds down.
type loseFunc func(spy *spyStore)

var (
	// An operator releases the run (or another replica expired it): the
	// next heartbeat finds it gone.
	loseReleased loseFunc = func(spy *spyStore) {
		spy.setHeartbeat(func(_ context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
			return time.Time{}, fmt.Errorf("runclaim: heartbeat run %d: %w", req.ID, runclaim.ErrLeaseLost)
		})
		spy.setFinish(func(_ context.Context, req runclaim.FinishRequest) error {
			return fmt.Errorf("runclaim: finish run %d: %w", req.ID, runclaim.ErrLeaseLost)
		})
	}
	// The database becomes unreachable: the lease lapses, and the local
	// clock says so a margin before its end.
	loseLapsed loseFunc = func(spy *spyStore) {
		spy.setHeartbeat(func(context.Context, runclaim.HeartbeatRequest) (time.Time, error) {
			return time.Time{}, errors.New("dial tcp: connection refused")
		})
	}
)

// Rule: a run lost while fn winds down after a shutdown closes Run.Lost,
// although fn's context was already cancelled with the shutdown's cause.
// Claimed at t0: the shutdown comes at t0+1s, the loss at t0+15s.
// Released, the heartbeat of t0+20s finds the run gone. Lapsed, the last
// success was sent at t0+10s, so the lease ends at t0+40s by the local
// clock and Lost closes a margin before.
func TestDoLostAfterShutdown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lose   loseFunc
		lostAt time.Duration // after the claim
	}{
		{"released", loseReleased, 2 * lostInterval},
		{"lapsed", loseLapsed, lostInterval + lostLease - lostMargin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				spy := newSpyStore(runclaim.NewMemoryStore())
				var hooks lostHooks
				c := doClaimer(t, spy, hooks.option())
				errShutdown := errors.New("SIGTERM")
				ctx, sigterm := context.WithCancelCause(t.Context())
				defer sigterm(nil)

				t0 := time.Now()
				var sawLost time.Duration
				var sawCause error
				err := c.Do(ctx, "src", func(ctx context.Context, run *runclaim.Run) error {
					go func() {
						time.Sleep(time.Second)
						sigterm(errShutdown)
						time.Sleep(15*time.Second - time.Second)
						tc.lose(spy)
					}()
					<-ctx.Done()
					sawCause = context.Cause(ctx)
					// Winding down: flush, checkpoint... unless the run is lost.
					select {
					case <-run.Lost():
						sawLost = time.Since(t0)
						return fmt.Errorf("stopped winding down: %w", context.Cause(ctx))
					case <-time.After(10 * lostLease):
						return errors.New("fn never learned that its run was lost")
					}
				})
				if sawCause != errShutdown {
					t.Errorf("fn's context cause = %v, want the shutdown's", sawCause)
				}
				if sawLost != tc.lostAt {
					t.Errorf("fn saw Lost at t0+%v, want t0+%v", sawLost, tc.lostAt)
				}
				if !errors.Is(err, runclaim.ErrLeaseLost) {
					t.Errorf("Do = %v, want it to match ErrLeaseLost", err)
				}
				if n := hooks.lost.Load(); n != 1 {
					t.Errorf("LeaseLost fired %d times, want once", n)
				}
			})
		})
	}
}

// Rule: KeepAlive closes Lost as Do does, after its context was cancelled.
func TestKeepAliveLostAfterShutdown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lose   loseFunc
		lostAt time.Duration
	}{
		{"released", loseReleased, 2 * lostInterval},
		{"lapsed", loseLapsed, lostInterval + lostLease - lostMargin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				spy := newSpyStore(runclaim.NewMemoryStore())
				c := doClaimer(t, spy)
				t0 := time.Now()
				run, err := c.Claim(t.Context(), "src")
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				runCtx, stop := run.KeepAlive(ctx)
				defer stop()
				time.Sleep(time.Second)
				cancel()
				time.Sleep(14 * time.Second)
				tc.lose(spy)
				select {
				case <-run.Lost():
				case <-time.After(10 * lostLease):
					t.Fatal("Lost never closed")
				}
				if got := time.Since(t0); got != tc.lostAt {
					t.Errorf("Lost closed at t0+%v, want t0+%v", got, tc.lostAt)
				}
				if !errors.Is(context.Cause(runCtx), context.Canceled) {
					t.Errorf("KeepAlive's context cause = %v, want the cancellation that came first", context.Cause(runCtx))
				}
			})
		})
	}
}

// Rule: without a shutdown, Lost closes at the moment fn's context is
// cancelled with ErrLeaseLost.
func TestDoLostWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spy := newSpyStore(runclaim.NewMemoryStore())
		c := doClaimer(t, spy)
		err := c.Do(t.Context(), "src", func(ctx context.Context, run *runclaim.Run) error {
			time.Sleep(15 * time.Second)
			loseReleased(spy)
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), runclaim.ErrLeaseLost) {
				t.Errorf("fn's context cause = %v, want ErrLeaseLost", context.Cause(ctx))
			}
			if !isClosed(run.Lost()) {
				t.Error("fn's context was cancelled with ErrLeaseLost before Lost closed")
			}
			return ctx.Err()
		})
		if !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("Do = %v, want ErrLeaseLost", err)
		}
	})
}

// Rule: a holder that claims with Claim and heartbeats by hand sees Lost
// close when Heartbeat returns ErrLeaseLost, and, once it has asked for
// Lost, a margin before the lease ends by the local clock.
func TestLostManualHeartbeat(t *testing.T) {
	t.Run("heartbeat finds the run gone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			spy := newSpyStore(runclaim.NewMemoryStore())
			var hooks lostHooks
			c := doClaimer(t, spy, hooks.option())
			run, err := c.Claim(t.Context(), "src")
			if err != nil {
				t.Fatal(err)
			}
			lost := run.Lost()
			if err := run.Heartbeat(t.Context()); err != nil {
				t.Fatal(err)
			}
			if isClosed(lost) {
				t.Fatal("Lost closed after a successful heartbeat")
			}
			loseReleased(spy)
			if err := run.Heartbeat(t.Context()); !errors.Is(err, runclaim.ErrLeaseLost) {
				t.Fatalf("Heartbeat = %v, want ErrLeaseLost", err)
			}
			if !isClosed(lost) || !isClosed(run.Lost()) {
				t.Error("Lost is open after Heartbeat returned ErrLeaseLost")
			}
			if n := hooks.lost.Load(); n != 1 {
				t.Errorf("LeaseLost fired %d times, want once", n)
			}
		})
	})
	t.Run("local clock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := doClaimer(t, runclaim.NewMemoryStore())
			t0 := time.Now()
			run, err := c.Claim(t.Context(), "src")
			if err != nil {
				t.Fatal(err)
			}
			lost := run.Lost()
			time.Sleep(20 * time.Second)
			if err := run.Heartbeat(t.Context()); err != nil { // the lease now ends at t0+50s
				t.Fatal(err)
			}
			<-lost
			if got, want := time.Since(t0), 20*time.Second+lostLease-lostMargin; got != want {
				t.Errorf("Lost closed at t0+%v, want t0+%v", got, want)
			}
		})
	})
	t.Run("asked for after the lease ended", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := doClaimer(t, runclaim.NewMemoryStore())
			run, err := c.Claim(t.Context(), "src")
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(lostLease)
			lost := run.Lost()
			synctest.Wait()
			if !isClosed(lost) {
				t.Error("Lost is open for a run whose lease ended by the local clock")
			}
		})
	})
}

// Rule: Lost does not close on a shutdown, on Finish, or after Finish,
// however long the run's Run value lives on.
func TestLostNotOnShutdownOrFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hooks lostHooks
		c := doClaimer(t, runclaim.NewMemoryStore(), hooks.option())
		ctx, sigterm := context.WithCancel(t.Context())
		var run *runclaim.Run
		err := c.Do(ctx, "src", func(ctx context.Context, r *runclaim.Run) error {
			run = r
			sigterm()
			select {
			case <-r.Lost():
				return errors.New("Lost closed on a shutdown")
			case <-time.After(3 * lostLease): // winding down
				return ctx.Err()
			}
		})
		if !errors.Is(err, context.Canceled) || errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("Do = %v, want the cancellation and no lost lease", err)
		}
		time.Sleep(3 * lostLease)
		synctest.Wait()
		if isClosed(run.Lost()) {
			t.Error("Lost closed after the run finished")
		}
		if n := hooks.lost.Load(); n != 0 {
			t.Errorf("LeaseLost fired %d times", n)
		}
	})
}

// Rule: a run that fn finished itself stops its heartbeats quietly: fn
// cleaning up for longer than a lease afterwards sees no lost run, the
// LeaseLost and HeartbeatFailed hooks stay silent, and Do returns nil.
func TestDoFinishInsideFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spy := newSpyStore(runclaim.NewMemoryStore())
		var hooks lostHooks
		c := doClaimer(t, spy, hooks.option())
		var beatsAtFinish int
		err := c.Do(t.Context(), "src", func(ctx context.Context, run *runclaim.Run) error {
			time.Sleep(15 * time.Second)
			if err := run.Finish(ctx, nil); err != nil {
				return err
			}
			beatsAtFinish = spy.heartbeats()
			select { // cleaning up
			case <-ctx.Done():
				return fmt.Errorf("fn's context ended after Finish: %w", context.Cause(ctx))
			case <-run.Lost():
				return errors.New("Lost closed after Finish")
			case <-time.After(3 * lostLease):
				return nil
			}
		})
		if err != nil {
			t.Errorf("Do = %v, want nil", err)
		}
		if n := hooks.lost.Load(); n != 0 {
			t.Errorf("LeaseLost fired %d times for a run that succeeded", n)
		}
		if n := hooks.failed.Load(); n != 0 {
			t.Errorf("HeartbeatFailed fired %d times", n)
		}
		if n := spy.heartbeats() - beatsAtFinish; n != 0 {
			t.Errorf("%d heartbeats reached the store after Finish", n)
		}
		if calls := spy.finishCalls(); len(calls) != 1 && len(calls) != 2 {
			t.Errorf("%d Finish calls reached the store", len(calls))
		}
	})
}

// Rule: a heartbeat that reaches the store after a Finish recorded the
// run, and so finds it not running, is not a lost lease: Heartbeat returns
// ErrFinished, whether the Finish had returned by then or was still
// waiting for its answer.
func TestHeartbeatRacingFinish(t *testing.T) {
	for _, inFlight := range []bool{false, true} {
		name := "finish returned"
		if inFlight {
			name = "finish in flight"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := runclaim.NewMemoryStore()
				spy := newSpyStore(mem)
				var hooks lostHooks
				c := doClaimer(t, spy, hooks.option())
				run, err := c.Claim(t.Context(), "src")
				if err != nil {
					t.Fatal(err)
				}
				// The heartbeat is sent first, and reaches the store only
				// after the Finish has committed there.
				hbSent, committed, answer := make(chan struct{}), make(chan struct{}), make(chan struct{})
				spy.setHeartbeat(func(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
					close(hbSent)
					<-committed
					return mem.Heartbeat(ctx, req)
				})
				spy.setFinish(func(ctx context.Context, req runclaim.FinishRequest) error {
					err := mem.Finish(ctx, req)
					close(committed)
					if inFlight {
						<-answer // the answer is slow to come back
					}
					return err
				})
				hbErr := make(chan error, 1)
				go func() { hbErr <- run.Heartbeat(t.Context()) }()
				<-hbSent
				finErr := make(chan error, 1)
				go func() { finErr <- run.Finish(t.Context(), nil) }()
				if inFlight {
					synctest.Wait() // the heartbeat has its answer; the Finish not yet
					close(answer)
				}
				if err := <-finErr; err != nil {
					t.Fatalf("Finish: %v", err)
				}
				if err := <-hbErr; !errors.Is(err, runclaim.ErrFinished) || errors.Is(err, runclaim.ErrLeaseLost) {
					t.Errorf("Heartbeat = %v, want ErrFinished", err)
				}
				if isClosed(run.Lost()) || hooks.lost.Load() != 0 {
					t.Error("the run was reported lost")
				}
			})
		})
	}
}

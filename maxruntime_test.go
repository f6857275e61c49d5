package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runclaim/runclaim"
)

// These tests run Do in a synctest bubble on the memory store: its clock,
// the heartbeats' timers and the maximum run time's timer are all the
// bubble's fake time, so the assertions on when things happen are exact.

// TestMaxRunTimeCancels: past the maximum run time, fn's context is
// cancelled with a cause matching ErrRunTimeout, at that instant and not
// before; Do returns an error matching it, and the run is recorded as
// failed with its text.
func TestMaxRunTimeCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spy := newSpyStore(runclaim.NewMemoryStore())
		const limit = time.Hour
		c, err := runclaim.New(spy, runclaim.WithLease(time.Minute), runclaim.WithMaxRunTime(limit))
		if err != nil {
			t.Fatal(err)
		}
		if c.Settings().MaxRunTime != limit {
			t.Errorf("MaxRunTime() = %v, want %v", c.Settings().MaxRunTime, limit)
		}
		start := time.Now()
		var runID int64
		var ran time.Duration
		var cause error
		err = c.Do(t.Context(), "slow", func(ctx context.Context, run *runclaim.Run) error {
			runID = run.ID
			<-ctx.Done()
			ran, cause = time.Since(start), context.Cause(ctx)
			return ctx.Err()
		})
		if ran != limit {
			t.Errorf("fn's context ended after %v, want exactly %v", ran, limit)
		}
		if !errors.Is(cause, runclaim.ErrRunTimeout) {
			t.Errorf("fn's context cause = %v, want one matching ErrRunTimeout", cause)
		}
		if !errors.Is(err, runclaim.ErrRunTimeout) || errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("Do = %v, want an error matching ErrRunTimeout and not ErrLeaseLost", err)
		}
		f := spy.wantOneFinish(t, runID, runclaim.StatusFailed, runclaim.ErrRunTimeout.Error())
		if !strings.Contains(f.req.Error, "ran longer than 1h0m0s") {
			t.Errorf("recorded error %q does not say the limit", f.req.Error)
		}
		// The heartbeats kept the hour-long run (lease one minute) alive.
		if spy.heartbeats() < 60 {
			t.Errorf("%d heartbeats in an hour with a one-minute lease", spy.heartbeats())
		}
	})
}

// TestMaxRunTimeKeepsRunWhileWindingDown: a function that ignores the
// timeout and returns nil an hour later keeps its source all that time
// (another claim is skipped as already running), and is recorded as
// failed: a run that outlived its limit does not count as succeeded.
func TestMaxRunTimeKeepsRunWhileWindingDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := runclaim.NewMemoryStore()
		spy := newSpyStore(store)
		c, err := runclaim.New(spy, runclaim.WithLease(time.Minute), runclaim.WithMaxRunTime(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		other, err := runclaim.New(store, runclaim.WithOwner("other"))
		if err != nil {
			t.Fatal(err)
		}
		var runID int64
		err = c.Do(t.Context(), "stubborn", func(ctx context.Context, run *runclaim.Run) error {
			runID = run.ID
			<-ctx.Done()
			time.Sleep(time.Hour) // winds down for an hour, well past the lease
			if _, err := other.Claim(t.Context(), "stubborn"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
				t.Errorf("claim of a source whose run timed out but still runs = %v, want ErrAlreadyRunning", err)
			}
			return nil
		})
		if !errors.Is(err, runclaim.ErrRunTimeout) {
			t.Errorf("Do = %v, want an error matching ErrRunTimeout", err)
		}
		f := spy.wantOneFinish(t, runID, runclaim.StatusFailed, runclaim.ErrRunTimeout.Error())
		if want := fmt.Sprintf(`runclaim: maximum run time exceeded: run %d of "stubborn" ran longer than 1m0s`, runID); f.req.Error != want {
			t.Errorf("recorded error %q, want %q", f.req.Error, want)
		}
	})
}

// TestMaxRunTimeFnError: fn's own error after the timeout is kept, with the
// timeout's text; Do's error matches both.
func TestMaxRunTimeFnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spy := newSpyStore(runclaim.NewMemoryStore())
		c, err := runclaim.New(spy, runclaim.WithMaxRunTime(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		mine := errors.New("upload aborted")
		var runID int64
		err = c.Do(t.Context(), "fnerr", func(ctx context.Context, run *runclaim.Run) error {
			runID = run.ID
			<-ctx.Done()
			return mine
		})
		if !errors.Is(err, runclaim.ErrRunTimeout) || !errors.Is(err, mine) {
			t.Errorf("Do = %v, want an error matching ErrRunTimeout and fn's error", err)
		}
		f := spy.wantOneFinish(t, runID, runclaim.StatusFailed, "upload aborted")
		if want := fmt.Sprintf(`upload aborted (cause: runclaim: maximum run time exceeded: run %d of "fnerr" ran longer than 1s)`, runID); f.req.Error != want {
			t.Errorf("recorded error %q, want %q", f.req.Error, want)
		}
	})
}

// TestMaxRunTimeInTime: a function that returns just before the limit
// succeeds, and the limit's timer does not touch its context afterwards;
// with 0, the default, there is no limit.
func TestMaxRunTimeInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			opts []runclaim.Option
			runs time.Duration
		}{
			{[]runclaim.Option{runclaim.WithMaxRunTime(time.Hour)}, time.Hour - time.Nanosecond},
			{[]runclaim.Option{runclaim.WithMaxRunTime(0)}, 48 * time.Hour},
			{nil, 48 * time.Hour},
		} {
			spy := newSpyStore(runclaim.NewMemoryStore())
			c, err := runclaim.New(spy, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			var runID int64
			var runCtx context.Context
			err = c.Do(t.Context(), "quick", func(ctx context.Context, run *runclaim.Run) error {
				runID, runCtx = run.ID, ctx
				time.Sleep(tc.runs)
				return ctx.Err()
			})
			if err != nil {
				t.Errorf("Do running %v with max run time %v = %v, want nil", tc.runs, c.Settings().MaxRunTime, err)
			}
			spy.wantOneFinish(t, runID, runclaim.StatusSucceeded, "")
			time.Sleep(2 * time.Hour)
			if cause := context.Cause(runCtx); errors.Is(cause, runclaim.ErrRunTimeout) {
				t.Errorf("the limit fired after fn returned in time: cause %v", cause)
			}
		}
	})
}

// TestMaxRunTimeAfterLeaseLost: a run lost before its limit keeps
// ErrLeaseLost as its cause; the limit does not replace it.
func TestMaxRunTimeAfterLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spy := newSpyStore(runclaim.NewMemoryStore())
		c, err := runclaim.New(spy, runclaim.WithLease(time.Minute), runclaim.WithMaxRunTime(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		spy.setHeartbeat(func(context.Context, runclaim.HeartbeatRequest) (time.Time, error) {
			return time.Time{}, runclaim.ErrLeaseLost
		})
		err = c.Do(t.Context(), "lost", func(ctx context.Context, run *runclaim.Run) error {
			<-ctx.Done()
			time.Sleep(2 * time.Hour)
			return context.Cause(ctx)
		})
		if !errors.Is(err, runclaim.ErrLeaseLost) || errors.Is(err, runclaim.ErrRunTimeout) {
			t.Errorf("Do = %v, want ErrLeaseLost and not ErrRunTimeout", err)
		}
	})
}

// TestMaxRunTimeOption: a negative maximum run time is refused by New and
// by With, naming the option.
func TestMaxRunTimeOption(t *testing.T) {
	store := runclaim.NewMemoryStore()
	if _, err := runclaim.New(store, runclaim.WithMaxRunTime(-time.Second)); err == nil || !strings.Contains(err.Error(), "WithMaxRunTime") {
		t.Errorf("New(WithMaxRunTime(-1s)) = %v, want an error naming WithMaxRunTime", err)
	}
	c, err := runclaim.New(store, runclaim.WithMaxRunTime(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.With(runclaim.WithMaxRunTime(-1)); err == nil {
		t.Error("With(WithMaxRunTime(-1ns)) returned no error")
	}
	d, err := c.With(runclaim.WithMinInterval(time.Second))
	if err != nil || d.Settings().MaxRunTime != time.Minute {
		t.Errorf("With keeps MaxRunTime: got %v, %v; want %v", d.Settings().MaxRunTime, err, time.Minute)
	}
}

package runclaim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Do claims source and, if the claim succeeds, calls fn with the run and a
// context derived from ctx. While fn runs, Do extends the lease in the
// background every heartbeat interval (see WithHeartbeat).
//
// fn's context is cancelled, with ErrLeaseLost as its cause (see
// context.Cause), as soon as a heartbeat finds the run gone, and also when,
// without a successful heartbeat, the lease is about to end by this
// process's own clock: (lease - 2*heartbeat interval)/4 before its end, so
// that fn hears of it before another replica can take the source over. It
// is also cancelled when ctx is.
//
// When fn returns, Do records the outcome: succeeded if fn returned nil,
// failed with fn's error text otherwise, and failed if ctx was cancelled.
// A panic in fn is recorded as failed and then re-panicked. The outcome is
// recorded even after ctx was cancelled (see Run.Finish). Do's heartbeat
// goroutine has stopped by the time Do returns or re-panics.
//
// To make fn's writes to the runs table's database commit only while the
// run holds its source, see PostgresStore.Fence.
//
// If the claim is skipped, Do returns the ErrNotClaimed error without calling
// fn. Otherwise it returns fn's error wrapped (errors.Is finds it and, after
// a lost lease, ErrLeaseLost), joined with any error from recording the
// outcome.
func (c *Claimer) Do(ctx context.Context, source string, fn func(ctx context.Context, run *Run) error) error {
	if fn == nil {
		return errors.New("runclaim: Do: nil function")
	}
	run, err := c.Claim(ctx, source)
	if err != nil {
		return err
	}
	runCtx, cancel, halt := run.startKeepAlive(ctx)
	defer cancel(nil)
	panicked, panicVal, fnErr := callFn(runCtx, run, fn)
	halt()

	outcome := fnErr
	switch {
	case panicked:
		outcome = fmt.Errorf("panic: %v", panicVal)
	case fnErr != nil:
		if cause := context.Cause(runCtx); cause != nil && !errors.Is(fnErr, cause) && errors.Is(fnErr, runCtx.Err()) {
			outcome = fmt.Errorf("%w (cause: %w)", fnErr, cause)
		}
	case ctx.Err() != nil:
		outcome = fmt.Errorf("cancelled: %w", context.Cause(ctx))
	}
	finishErr := run.Finish(ctx, outcome)
	if panicked {
		panic(panicVal)
	}
	var result error
	if outcome != nil {
		result = fmt.Errorf("runclaim: run %d of %q: %w", run.ID, run.Source, outcome)
		if cause := context.Cause(runCtx); errors.Is(cause, ErrLeaseLost) && !errors.Is(outcome, ErrLeaseLost) {
			result = fmt.Errorf("%w (%w)", result, cause)
		}
	}
	if finishErr != nil {
		return errors.Join(result, finishErr)
	}
	return result
}

// callFn calls fn and turns a panic into a value.
func callFn(ctx context.Context, run *Run, fn func(context.Context, *Run) error) (panicked bool, val any, err error) {
	panicked = true
	defer func() {
		if panicked {
			val = recover()
		}
	}()
	err = fn(ctx, run)
	panicked = false
	return false, nil, err
}

// keepAlive heartbeats until stop is closed or ctx ends, and cancels ctx
// with ErrLeaseLost when the run is gone or its lease is about to end by
// the local clock. It waits for an in-flight heartbeat before it returns.
func (r *Run) keepAlive(ctx context.Context, cancel context.CancelCauseFunc, stop <-chan struct{}) {
	interval := r.claimer.cfg.heartbeat
	tick := time.NewTimer(interval)
	defer tick.Stop()
	margin := r.expiryMargin()
	expiry := time.NewTimer(time.Until(r.localDeadline().Add(-margin)))
	defer expiry.Stop()

	hbCtx, hbCancel := context.WithCancel(ctx)
	defer hbCancel()
	results := make(chan error, 1)
	inFlight := false
	defer func() {
		if inFlight {
			hbCancel()
			<-results
		}
	}()

	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-expiry.C:
			err := fmt.Errorf("%w: run %d's lease is ending by the local clock without a successful heartbeat", ErrLeaseLost, r.ID)
			r.failed(err, true)
			cancel(err)
			return
		case <-tick.C:
			inFlight = true
			go func() { results <- r.Heartbeat(hbCtx) }()
		case err := <-results:
			inFlight = false
			if errors.Is(err, ErrLeaseLost) {
				cancel(err)
				return
			}
			if err == nil {
				expiry.Reset(time.Until(r.localDeadline().Add(-margin)))
			}
			tick.Reset(interval)
		}
	}
}

// expiryMargin is how long before the lease's end by the local clock
// keepAlive gives up on a run without a successful heartbeat. Cancelling
// at the end itself would be too late: the store's lease ends only as much
// later as the claim or heartbeat took to reach it, so fn could still be
// running when another replica takes the source over. The margin is a
// quarter of the slack the heartbeat schedule leaves (positive, since the
// interval is below lease/2), so one failed heartbeat still does not lose
// the run.
func (r *Run) expiryMargin() time.Duration {
	return (r.claimer.cfg.lease - 2*r.claimer.cfg.heartbeat) / 4
}

// KeepAlive heartbeats the run in the background, as Do does, for callers
// that claim with Claim and hand the run to code that Do cannot wrap (such
// as a scheduler's lock). The returned context is derived from ctx and is
// cancelled, with cause ErrLeaseLost, as soon as the run is found lost or
// its lease is about to end by the local clock without a successful
// heartbeat (see Do). stop ends the heartbeats and waits for them; it is
// safe to call more than once. KeepAlive does not finish the run: call
// Finish after stop.
func (r *Run) KeepAlive(ctx context.Context) (runCtx context.Context, stop func()) {
	if ctx == nil {
		ctx = context.Background()
	}
	runCtx, cancel, halt := r.startKeepAlive(ctx)
	var once sync.Once
	return runCtx, func() {
		once.Do(func() {
			halt()
			cancel(nil)
		})
	}
}

// startKeepAlive starts the heartbeat goroutine on a context derived from
// ctx. halt stops it and waits for it, leaving the context's cause as the
// goroutine set it; cancel then releases the context.
func (r *Run) startKeepAlive(ctx context.Context) (runCtx context.Context, cancel context.CancelCauseFunc, halt func()) {
	runCtx, cancel = context.WithCancelCause(ctx)
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		r.keepAlive(runCtx, cancel, stop)
	}()
	return runCtx, cancel, func() {
		close(stop)
		<-stopped
	}
}

// Lease returns the lease of this Claimer's runs.
func (c *Claimer) Lease() time.Duration { return c.cfg.lease }

// HeartbeatInterval returns how often Do and KeepAlive extend a lease.
func (c *Claimer) HeartbeatInterval() time.Duration { return c.cfg.heartbeat }

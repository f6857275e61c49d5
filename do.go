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
// The run is kept alive until fn returns, whatever happens to ctx: when ctx
// is cancelled (a graceful shutdown), fn's context is cancelled with ctx's
// cause, and the heartbeats go on while fn winds down, so that no other
// replica can take the source over before fn has stopped. A run is lost
// when a heartbeat finds it gone, and also when, without a successful
// heartbeat, its lease is about to end by this process's own clock
// (Settings.ExpiryMargin before its end), so that fn hears of it before
// another replica can take the source over. Then run.Lost() is closed and
// fn's context is cancelled with a cause matching ErrLeaseLost, unless a
// shutdown cancelled it first: a context is cancelled once, so a run lost
// while fn winds down after a shutdown shows only in run.Lost(). fn
// therefore stops at once on ctx.Done() if it can, and otherwise, while
// it winds down, selects on run.Lost() too:
//
//	err := claimer.Do(ctx, "avito", func(ctx context.Context, run *runclaim.Run) error {
//		err := sweep(ctx, run.ID) // returns soon after ctx ends
//		select {
//		case <-flush(): // the wind-down: may outlast a lease
//		case <-run.Lost():
//			return errors.Join(err, errors.New("run lost: flush abandoned"))
//		}
//		return err
//	})
//
// Each heartbeat attempt is bounded (see Run.KeepAlive); one that hangs is
// abandoned and retried, so one hung connection does not lose the run. If
// fn calls run.Finish itself, the heartbeats stop quietly and the run is
// not reported lost, however long fn goes on.
//
// When fn returns, Do records the outcome: succeeded if fn returned nil,
// failed with fn's error text otherwise, and failed if ctx was cancelled.
// A panic in fn is recorded as failed and then re-panicked with the same
// value, from the panicking goroutine's stack, so that the crash output
// shows where fn panicked; fn leaving through runtime.Goexit (t.FailNow in
// a test) is recorded as failed too. The outcome is recorded even after ctx
// was cancelled (see Run.Finish). Do's heartbeat goroutine has stopped by
// the time Do returns, re-panics or lets a Goexit go on.
//
// To make fn's writes to the runs table's database commit only while the
// run holds its source, see PostgresStore.Fence.
//
// With WithMaxRunTime, once the maximum run time has passed since the
// claim, Do cancels fn's context with a cause matching ErrRunTimeout (unless
// it was cancelled already, by ctx or a lost lease) and keeps the run alive
// until fn returns, as after a shutdown. The run is then recorded as
// failed with the timeout's text, joined to fn's error if fn returned one,
// even if fn returned nil, and Do's error matches ErrRunTimeout.
//
// If the claim's answer comes when the run's lease is already ending by
// this process's own clock (a stalled process, or a claim slower than the
// lease), another replica may hold the source by then: Do does not call
// fn, records the run as failed if it still can, and returns an error
// matching ErrLeaseLost.
//
// If the claim is skipped, Do returns the ErrNotClaimed error without calling
// fn. Otherwise it returns fn's error wrapped (errors.Is finds it and, after
// a run lost while fn ran, ErrLeaseLost, also when a shutdown came first),
// joined with any error from recording the outcome.
//
// A job that writes its results into the database of the runs table can
// make those writes commit only while it holds the run: see
// PostgresStore.Fence.
//
// opts change the claim as they change Claim's: with ForTick, fn runs at
// most once for the tick across every replica; with Wait, Do waits while
// the source is held and then runs fn, and returns ctx's error, without
// calling fn, if ctx ends first.
func (c *Claimer) Do(ctx context.Context, source string, fn func(ctx context.Context, run *Run) error, opts ...ClaimOption) error {
	if fn == nil {
		return errors.New("runclaim: Do: nil function")
	}
	run, err := c.Claim(ctx, source, opts...)
	if err != nil {
		return err
	}
	return c.do(ctx, run, fn, false)
}

// DoMany claims sources with ClaimMany and calls fn for each run it won,
// each on a goroutine of its own, all at once, under Do's rules: fn's
// context is derived from ctx, the run is kept alive until fn returns,
// whatever happens to ctx, run.Lost() closes and fn's context is
// cancelled with a cause matching ErrLeaseLost when the run is lost, the
// maximum run time applies, and the outcome is recorded when fn returns.
// It returns once every fn has returned and its outcome is recorded.
//
// When the Store is a ManyStore (PostgresStore and MemoryStore
// are), the runs of every DoMany call of the Claimer are kept alive
// together: one call of HeartbeatMany (with PostgresStore, one statement)
// per heartbeat interval for all of them, whatever their number. Each
// attempt is bounded and retried as Do's heartbeats are, so one slow or
// failed call loses no run; a run that the answer reports lost is lost
// alone. With another Store each run heartbeats on its own, as under Do.
//
// The sources that were skipped are not errors: DoMany reports them to
// Hooks.Skipped and the logger, and calls fn for the runs it won only. It
// returns the ClaimMany error, if the claim failed (fn is then not
// called), or else the errors that Do would have returned for each run,
// joined (errors.Join), nil if every fn succeeded. fn runs for every won
// source at once: to bound how many do their work at the same time, have
// fn wait on a semaphore; its run is kept alive while it waits. A panic
// in fn is recorded as the run's failure and then re-panicked on fn's
// goroutine, which ends the program, as a panic on any goroutine does.
//
// opts change the claims as they change ClaimMany's: with ForTick, fn runs
// at most once for the tick and each source across every replica. Wait is
// refused, as ClaimMany refuses it.
func (c *Claimer) DoMany(ctx context.Context, sources []string, fn func(ctx context.Context, run *Run) error, opts ...ClaimOption) error {
	if fn == nil {
		return errors.New("runclaim: DoMany: nil function")
	}
	runs, err := c.ClaimMany(ctx, sources, opts...)
	if err != nil {
		return err
	}
	return c.doMany(ctx, runs, fn)
}

// doMany runs fn for each of runs, just claimed, as DoMany describes.
func (c *Claimer) doMany(ctx context.Context, runs []*Run, fn func(ctx context.Context, run *Run) error) error {
	_, group := c.store.(ManyStore)
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, run := range runs {
		wg.Go(func() {
			// Overwritten when fn returns; left when it calls runtime.Goexit.
			errs[i] = fmt.Errorf("runclaim: run %d of %q: fn called runtime.Goexit", run.ID, run.Source)
			errs[i] = c.do(ctx, run, fn, group)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// do runs fn for run, which was just claimed, as Do describes; with
// group, its heartbeats are the Claimer's heartbeats of DoMany's runs.
func (c *Claimer) do(ctx context.Context, run *Run, fn func(ctx context.Context, run *Run) error, group bool) error {
	start := run.startKeepAlive
	if group {
		start = run.startGroupKeepAlive
	}
	runCtx, cancel, halt := start(ctx)
	defer cancel(nil)
	stopLimit := run.limitRunTime(cancel)
	defer stopLimit()

	if lost := run.lostAtStart(); lost != nil {
		// The claim's answer came when the lease was already ending by
		// this process's own clock (a stalled process, a claim slower than
		// the lease): another replica may hold the source by now, so fn
		// does not start.
		cancel(lost)
		halt()
		stopLimit()
		finishErr := run.Finish(ctx, lost)
		run.stopWatch()
		return errors.Join(fmt.Errorf("runclaim: run %d of %q: fn not started: %w", run.ID, run.Source, lost), finishErr)
	}

	returned := false
	defer func() {
		if returned {
			return
		}
		// fn panicked or called runtime.Goexit. This runs on top of fn's
		// frames: re-panicking here keeps them in the crash output.
		val := recover()
		halt()
		outcome := errors.New("fn called runtime.Goexit")
		if val != nil {
			outcome = panicError(val)
		}
		_ = run.Finish(ctx, outcome)
		run.stopWatch()
		if val != nil {
			panic(val)
		}
	}()
	fnErr := fn(runCtx, run)
	returned = true
	stopLimit() // a function that returned in time did not time out
	halt()
	lostErr := run.lostCause() // while fn ran, perhaps after a shutdown

	outcome := fnErr
	cause := context.Cause(runCtx)
	switch {
	case errors.Is(cause, ErrRunTimeout) && fnErr == nil:
		// Past the maximum run time, a run fails whatever fn returns.
		outcome = cause
	case errors.Is(cause, ErrRunTimeout) && !errors.Is(fnErr, ErrRunTimeout):
		outcome = fmt.Errorf("%w (cause: %w)", fnErr, cause)
	case fnErr != nil:
		if cause != nil && !errors.Is(fnErr, cause) && errors.Is(fnErr, runCtx.Err()) {
			outcome = fmt.Errorf("%w (cause: %w)", fnErr, cause)
		}
	case ctx.Err() != nil:
		outcome = fmt.Errorf("cancelled: %w", context.Cause(ctx))
	}
	finishErr := run.Finish(ctx, outcome)
	run.stopWatch()
	var result error
	if run.replaced() && finishErr == nil {
		// Recorded StatusReplaced, whatever fn returned.
		result = fmt.Errorf("runclaim: run %d of %q: %w", run.ID, run.Source, ErrReplaced)
		if fnErr != nil && !errors.Is(fnErr, ErrReplaced) {
			result = fmt.Errorf("%w (fn returned: %w)", result, fnErr)
		}
		return result
	}
	if outcome != nil {
		result = fmt.Errorf("runclaim: run %d of %q: %w", run.ID, run.Source, outcome)
		if lostErr != nil && !errors.Is(outcome, ErrLeaseLost) {
			result = fmt.Errorf("%w (%w)", result, lostErr)
		}
	}
	if finishErr != nil {
		return errors.Join(result, finishErr)
	}
	return result
}

// limitRunTime cancels the run's context with ErrRunTimeout once the
// claimer's maximum run time has passed since the claim, unless stop is
// called first. Once stop has returned, the timeout has either cancelled
// the context already or never will. stop is safe to call more than once.
func (r *Run) limitRunTime(cancel context.CancelCauseFunc) (stop func()) {
	d := r.claimer.cfg.maxRunTime
	if d <= 0 {
		return func() {}
	}
	var (
		mu      sync.Mutex // protects stopped; held while the timeout cancels
		stopped bool
	)
	t := time.AfterFunc(time.Until(r.claimedAt.Add(d)), func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			cancel(fmt.Errorf("%w: run %d of %s ran longer than %v", ErrRunTimeout, r.ID, quoteForError(r.Source), d))
		}
	})
	return func() {
		t.Stop()
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
}

// panicError is the outcome recorded for a panic with val.
func panicError(val any) error {
	if err, ok := val.(error); ok {
		return fmt.Errorf("panic: %w", err)
	}
	return fmt.Errorf("panic: %v", val)
}

// keepAlive heartbeats until stop is closed, whatever becomes of ctx, and
// cancels ctx with ErrLeaseLost when the run is gone or its lease is about
// to end by the local clock (Lost closes). It stops quietly once the run is
// finished. It follows the heartbeat schedule (see beatLoop): a late
// attempt is abandoned and retried after the retry delay, as is a failed
// one. When it returns, every attempt it started has returned.
func (r *Run) keepAlive(ctx context.Context, cancel context.CancelCauseFunc, stop <-chan struct{}) {
	l := &beatLoop[error]{
		sched: r.claimer.sched,
		start: func(actx context.Context) (func() error, bool) {
			return func() error { return r.Heartbeat(actx) }, true
		},
		late: func() {
			r.failed(fmt.Errorf("runclaim: heartbeat run %d: no answer within %v; abandoned, retrying: %w", r.ID, r.claimer.sched.attempt, context.DeadlineExceeded), true)
		},
		answer: func(err error, _ bool) (ok, end bool) {
			switch {
			case errors.Is(err, ErrReplaced):
				return true, false // asked to stop, the lease extended: go on until fn returns
			case errors.Is(err, ErrLeaseLost): // Lost is closed
				cancel(r.lostCause())
				return false, true
			case errors.Is(err, ErrFinished):
				return false, true // fn finished the run itself: stop quietly
			}
			return err == nil, false
		},
	}
	// Lost closes by the local clock too.
	l.run(ctx, stop, r.Lost(), func() { cancel(r.lostCause()) })
}

// KeepAlive heartbeats the run in the background, as Do does, for callers
// that claim with Claim and hand the run to code that Do cannot wrap (such
// as a scheduler's lock). The returned context is derived from ctx: it ends
// when ctx does, with ctx's cause, and it is cancelled with a cause matching
// ErrLeaseLost as soon as the run is found lost or its lease is about to end
// by the local clock without a successful heartbeat (see Do); r.Lost() is
// closed then, before the context is cancelled.
//
// The heartbeats go on until stop is called, the run is lost or the run is
// finished, whatever becomes of ctx: a job whose context was cancelled by a
// shutdown keeps its run while it winds down, and learns of a loss during
// the wind-down from r.Lost() only, since its context was already
// cancelled (see Do for the pattern). Each attempt is bounded by the
// Claimer's HeartbeatTimeout; an attempt that does not answer in time is
// abandoned (pgx then drops its connection) and retried after the
// Claimer's RetryDelay, as is one that fails.
//
// stop ends the heartbeats and waits for the attempts in flight, which it
// cancels; it is safe to call more than once. KeepAlive does not finish the
// run: call Finish after stop.
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
	unwatch := r.watchReplaced(cancel)
	return runCtx, cancel, func() {
		close(stop)
		<-stopped
		unwatch()
	}
}

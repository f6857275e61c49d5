package runclaim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// heartbeats keeps the runs of a Claimer's DoMany calls alive together, on
// a store that is a ManyStore: one HeartbeatMany per heartbeat
// interval for every such run the Claimer holds, instead of one Heartbeat
// per run. Its loop runs while it has runs, and follows the schedule that
// keepAlive follows for one run: an attempt that does not answer within
// the attempt bound is abandoned and retried after the retry delay, as is
// one that fails, so that one slow or failed call loses no run (each run
// is given up only by its own local-clock watch, as under Do). A run that
// the answer leaves out is lost, alone: the others' leases are extended.
// A run finished or lost is left out of the next call.
type heartbeats struct {
	mu   sync.Mutex        // protects the fields below
	runs map[*Run]struct{} // the runs kept alive
	stop chan struct{}     // closes to stop the loop; nil while no loop runs
	done chan struct{}     // closed once that loop has returned
}

// join adds r to the runs c keeps alive together, starting the loop if it
// is not running. leave takes r out, and stops the loop, waiting for it,
// when r was the last run.
func (c *Claimer) joinHeartbeats(r *Run) (leave func()) {
	h := &c.hb
	h.mu.Lock()
	if h.runs == nil {
		h.runs = make(map[*Run]struct{})
	}
	h.runs[r] = struct{}{}
	if h.stop == nil {
		h.stop, h.done = make(chan struct{}), make(chan struct{})
		go c.heartbeatLoop(h.stop, h.done)
	}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.runs, r)
		var stop, done chan struct{}
		if len(h.runs) == 0 && h.stop != nil {
			stop, done = h.stop, h.done
			h.stop, h.done = nil, nil
		}
		h.mu.Unlock()
		if stop != nil {
			close(stop)
			<-done
		}
	}
}

// members returns the runs to extend: those neither finished nor lost.
func (h *heartbeats) members() []*Run {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Run, 0, len(h.runs))
	for r := range h.runs {
		r.mu.Lock()
		live := r.finished == nil && r.lostErr == nil
		r.mu.Unlock()
		if live {
			out = append(out, r)
		}
	}
	return out
}

// beatAnswer is the answer to one HeartbeatMany attempt.
type beatAnswer struct {
	runs []*Run
	sent time.Time
	res  []HeartbeatResult
	err  error
}

// beatLoop is the heartbeat schedule that keepAlive (one run) and
// heartbeatLoop (a Claimer's DoMany runs) both follow: an attempt every
// heartbeat interval, each on its own goroutine under a context of its
// own; one that does not answer within the attempt bound is abandoned
// (its context cancelled, which makes pgx drop the connection), late is
// told, and the next attempt comes after the retry delay, as it does after
// one that fails. A is an attempt's answer.
type beatLoop[A any] struct {
	sched schedule
	// start begins an attempt under ctx, or says there is nothing to send
	// this turn (ok false). The loop runs attempt on a goroutine.
	start func(ctx context.Context) (attempt func() A, ok bool)
	// late is told that the attempt awaited was abandoned.
	late func()
	// answer takes an attempt's answer; awaited is false for one that was
	// abandoned. It says whether the attempt succeeded (the next comes a
	// heartbeat interval later, else a retry delay later), or that the
	// loop must end.
	answer func(a A, awaited bool) (ok, end bool)

	base     context.Context // the attempts' parent, ended when run returns
	attempts sync.WaitGroup  // the goroutines run started
}

// run follows the schedule until stop closes, lost closes (then onLost is
// called) or answer says to end. parent gives the attempts its values, not
// its end. When run returns, every goroutine it started has returned.
func (l *beatLoop[A]) run(parent context.Context, stop, lost <-chan struct{}, onLost func()) {
	base, baseCancel := context.WithCancel(context.WithoutCancel(parent))
	l.base = base
	answers := make(chan beatResult[A])
	exited := make(chan struct{})
	defer func() {
		baseCancel()
		close(exited)
		l.attempts.Wait()
	}()

	next := time.NewTimer(l.sched.heartbeat)
	defer next.Stop()
	late := time.NewTimer(l.sched.attempt)
	late.Stop()
	defer late.Stop()

	seq, current := 0, 0 // current is the attempt awaited, 0 for none
	abandon := func() {}
	for {
		select {
		case <-stop:
			return
		case <-lost:
			onLost()
			return
		case <-next.C:
			actx, acancel := context.WithCancel(base)
			attempt, ok := l.start(actx)
			if !ok {
				acancel()
				next.Reset(l.sched.heartbeat)
				continue
			}
			seq++
			current, abandon = seq, acancel
			n := seq
			l.spawn(func() {
				defer acancel()
				a := attempt()
				select {
				case answers <- beatResult[A]{n, a}:
				case <-exited:
				}
			})
			late.Reset(l.sched.attempt)
		case <-late.C:
			abandon()
			current = 0
			l.late()
			next.Reset(l.sched.retry)
		case res := <-answers:
			awaited := res.seq == current
			ok, end := l.answer(res.a, awaited)
			if end {
				return
			}
			if !awaited {
				continue // abandoned: its retry is already scheduled
			}
			current = 0
			late.Stop()
			if ok {
				next.Reset(l.sched.heartbeat)
			} else {
				next.Reset(l.sched.retry)
			}
		}
	}
}

// spawn runs f on a goroutine that run waits for before it returns.
func (l *beatLoop[A]) spawn(f func()) {
	l.attempts.Add(1)
	go func() {
		defer l.attempts.Done()
		f()
	}()
}

// beatResult is an attempt's answer with the attempt's number.
type beatResult[A any] struct {
	seq int
	a   A
}

// heartbeatLoop extends the leases of c.hb's runs until stop is closed.
// When it returns, every attempt it started has returned.
func (c *Claimer) heartbeatLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	store := c.store.(ManyStore)
	var inFlight []*Run // the runs of the attempt awaited
	var l *beatLoop[beatAnswer]
	l = &beatLoop[beatAnswer]{
		sched: c.sched,
		start: func(ctx context.Context) (func() beatAnswer, bool) {
			runs := c.hb.members()
			if len(runs) == 0 {
				return nil, false
			}
			inFlight = runs
			reqs := make([]HeartbeatRequest, len(runs))
			for i, r := range runs {
				reqs[i] = r.heartbeatRequest()
			}
			return func() beatAnswer {
				sent := time.Now()
				res, err := store.HeartbeatMany(ctx, reqs)
				if err == nil && len(res) != len(reqs) {
					err = fmt.Errorf("runclaim: heartbeat many: the store returned %d results for %d runs", len(res), len(reqs))
				}
				return beatAnswer{runs, sent, res, err}
			}, true
		},
		late: func() {
			err := fmt.Errorf("runclaim: heartbeat %d runs: no answer within %v; abandoned, retrying: %w", len(inFlight), c.sched.attempt, context.DeadlineExceeded)
			for _, r := range inFlight {
				r.failed(err, true)
			}
		},
		answer: func(a beatAnswer, awaited bool) (ok, end bool) {
			if !awaited {
				return false, false
			}
			if a.err != nil {
				for _, r := range a.runs {
					_ = r.heartbeatAnswer(l.base, a.sent, time.Time{}, a.err)
				}
				return false, false
			}
			for i, r := range a.runs {
				res := a.res[i]
				if errors.Is(res.Err, ErrReplaced) {
					// Asked to stop, the lease extended.
					_ = r.heartbeatAnswer(l.base, a.sent, res.LeaseUntil, res.Err)
					continue
				}
				if res.Err != nil && errors.Is(res.Err, ErrLeaseLost) {
					// The answer may wait for a Finish in flight: not on
					// the loop, which the other runs need.
					l.spawn(func() { _ = r.heartbeatAnswer(l.base, a.sent, time.Time{}, res.Err) })
					continue
				}
				_ = r.heartbeatAnswer(l.base, a.sent, res.LeaseUntil, res.Err)
			}
			return true, false
		},
	}
	l.run(context.Background(), stop, nil, nil)
}

// startGroupKeepAlive is startKeepAlive for a run kept alive with the
// Claimer's other DoMany runs: the run joins the Claimer's heartbeats,
// and its context is cancelled with a cause matching ErrLeaseLost once it
// is lost. halt takes it out of the heartbeats and waits for what it
// started.
func (r *Run) startGroupKeepAlive(ctx context.Context) (runCtx context.Context, cancel context.CancelCauseFunc, halt func()) {
	runCtx, cancel = context.WithCancelCause(ctx)
	unwatch := r.watchReplaced(cancel)
	leave := r.claimer.joinHeartbeats(r)
	lost := r.Lost() // closes by the local clock too
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-lost:
			cancel(r.lostCause())
		case <-stop:
		}
	}()
	return runCtx, cancel, func() {
		close(stop)
		<-stopped
		leave()
		unwatch()
	}
}

// watchReplaced cancels the run's context with cause ErrReplaced once a
// heartbeat learns that a claim with Replace asked the run to stop. stop
// ends the watch and waits for it.
func (r *Run) watchReplaced(cancel context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-r.replacedCh:
			cancel(fmt.Errorf("runclaim: run %d of %s: %w", r.ID, quoteForError(r.Source), ErrReplaced))
		case <-done:
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

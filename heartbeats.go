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
	seq  int
	runs []*Run
	sent time.Time
	res  []HeartbeatResult
	err  error
}

// heartbeatLoop extends the leases of c.hb's runs until stop is closed.
// When it returns, every attempt it started has returned.
func (c *Claimer) heartbeatLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	store := c.store.(ManyStore)
	interval, timeout, retry := c.sched.heartbeat, c.sched.attempt, c.sched.retry

	// The attempts' parent, ended only by the loop's return.
	base, baseCancel := context.WithCancel(context.Background())
	answers := make(chan beatAnswer)
	exited := make(chan struct{})
	var attempts sync.WaitGroup
	defer func() {
		baseCancel()
		close(exited)
		attempts.Wait()
	}()

	next := time.NewTimer(interval)
	defer next.Stop()
	late := time.NewTimer(timeout)
	late.Stop()
	defer late.Stop()

	seq, current := 0, 0 // current is the attempt awaited, 0 for none
	var inFlight []*Run  // the runs of the attempt awaited
	abandon := func() {}
	for {
		select {
		case <-stop:
			abandon()
			return
		case <-next.C:
			runs := c.hb.members()
			if len(runs) == 0 {
				next.Reset(interval)
				continue
			}
			seq++
			current, inFlight = seq, runs
			actx, acancel := context.WithCancel(base)
			abandon = acancel
			reqs := make([]HeartbeatRequest, len(runs))
			for i, r := range runs {
				reqs[i] = r.heartbeatRequest()
			}
			attempts.Add(1)
			go func(seq int) {
				defer attempts.Done()
				defer acancel()
				sent := time.Now()
				res, err := store.HeartbeatMany(actx, reqs)
				if err == nil && len(res) != len(reqs) {
					err = fmt.Errorf("runclaim: heartbeat many: the store returned %d results for %d runs", len(res), len(reqs))
				}
				select {
				case answers <- beatAnswer{seq, runs, sent, res, err}:
				case <-exited:
				}
			}(seq)
			late.Reset(timeout)
		case <-late.C:
			abandon()
			current = 0
			err := fmt.Errorf("runclaim: heartbeat %d runs: no answer within %v; abandoned, retrying: %w", len(inFlight), timeout, context.DeadlineExceeded)
			for _, r := range inFlight {
				r.failed(err, true)
			}
			next.Reset(retry)
		case a := <-answers:
			if a.seq != current {
				continue // abandoned: its retry is already scheduled
			}
			current = 0
			late.Stop()
			if a.err != nil {
				for _, r := range a.runs {
					_ = r.heartbeatAnswer(base, a.sent, time.Time{}, a.err)
				}
				next.Reset(retry)
				continue
			}
			for i, r := range a.runs {
				res := a.res[i]
				if res.Err != nil && errors.Is(res.Err, ErrLeaseLost) {
					// The answer may wait for a Finish in flight: not on
					// the loop, which the other runs need.
					attempts.Add(1)
					go func() {
						defer attempts.Done()
						_ = r.heartbeatAnswer(base, a.sent, time.Time{}, res.Err)
					}()
					continue
				}
				_ = r.heartbeatAnswer(base, a.sent, res.LeaseUntil, res.Err)
			}
			next.Reset(interval)
		}
	}
}

// startGroupKeepAlive is startKeepAlive for a run kept alive with the
// Claimer's other DoMany runs: the run joins the Claimer's heartbeats,
// and its context is cancelled with a cause matching ErrLeaseLost once it
// is lost. halt takes it out of the heartbeats and waits for what it
// started.
func (r *Run) startGroupKeepAlive(ctx context.Context) (runCtx context.Context, cancel context.CancelCauseFunc, halt func()) {
	runCtx, cancel = context.WithCancelCause(ctx)
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
	}
}

package runclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// The poll of a waiting claim (see Wait).
const (
	// waitPollMin is the first pause's upper bound, for a hold that ends
	// soon.
	waitPollMin = 50 * time.Millisecond
	// waitPollMax caps the pauses: a waiter claims again at least this
	// often, so it wins within about this long of a holder's Finish. It is
	// also how long a waiting claim of a source its own Claimer's waiting
	// run just ended holds back (see yields).
	waitPollMax = 800 * time.Millisecond
	// waitMargin is how long after a skip's RetryAfter a waiter claims
	// again, so that the store's clock has passed it.
	waitMargin = 5 * time.Millisecond
	// replacePollMax caps the pauses of a claim with Replace: it wins
	// within about this long of the replaced run's Finish.
	replacePollMax = 150 * time.Millisecond
)

// A pollSchedule is the time arithmetic of one waiting claim: how long it
// pauses after each skip. Its zero value, with rand set, starts at
// waitPollMin.
type pollSchedule struct {
	bound time.Duration       // the next pause's upper bound; 0: waitPollMin
	max   time.Duration       // the bound's cap; 0: waitPollMax
	rand  func(n int64) int64 // a random number in [0, n)
}

// newPollSchedule returns the schedule of a waiting claim.
func newPollSchedule() pollSchedule { return pollSchedule{rand: rand.Int64N} }

// pause returns how long to wait, after skip nc seen at now, before
// claiming again: a random time between half and all of the bound, which
// doubles on each call up to waitPollMax; or less, until just after the
// skip's RetryAfter, when that comes first.
func (p *pollSchedule) pause(nc *NotClaimedError, now time.Time) time.Duration {
	bound := p.bound
	if bound <= 0 {
		bound = waitPollMin
	}
	capped := p.max
	if capped <= 0 {
		capped = waitPollMax
	}
	p.bound = min(2*bound, capped)
	d := bound/2 + time.Duration(p.rand(int64(bound/2)+1))
	if !nc.RetryAfter.IsZero() {
		if until := nc.RetryAfter.Sub(now) + waitMargin; until > 0 && until < d {
			d = until
		}
	}
	return d
}

// waitable reports whether waiting can end skip nc, for a claim whose ctx
// ends at deadline (hasDeadline false: no deadline). See Wait; a claim with
// Replace (replace) waits only while the source is held or its keys have
// no room: a pause, a served tick and the interval skip it at once.
func waitable(nc *NotClaimedError, deadline time.Time, hasDeadline, replace bool) bool {
	switch {
	case replace:
		return !errors.Is(nc, ErrPaused) && !errors.Is(nc, ErrTooSoon) && !errors.Is(nc, ErrTickDone)
	case errors.Is(nc, ErrTickDone):
		return false
	case errors.Is(nc, ErrPaused), errors.Is(nc, ErrTooSoon):
		return !nc.RetryAfter.IsZero() && hasDeadline && nc.RetryAfter.Before(deadline)
	}
	// ErrAlreadyRunning, ErrLimited and a reason of a later release: a
	// holder's Finish, or the Finish of a run that counts against a key,
	// can end it at any time.
	return true
}

// yields records, per source, when a run won by a waiting claim of the
// Claimer ended, so that a waiting claim of the source that comes right
// after holds back and lets the other waiters in. Its zero value is
// ready.
type yields struct {
	mu    sync.Mutex           // protects ended
	ended map[string]time.Time // by source: local clock
}

// yieldsKept is how many sources yields keeps before it drops the ended
// entries older than waitPollMax.
const yieldsKept = 256

// ended records that a run of source, won by a waiting claim, ended at now.
func (y *yields) end(source string, now time.Time) {
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.ended == nil {
		y.ended = make(map[string]time.Time)
	}
	if len(y.ended) >= yieldsKept {
		for s, at := range y.ended {
			if now.Sub(at) >= waitPollMax {
				delete(y.ended, s)
			}
		}
	}
	y.ended[source] = now
}

// holdBack returns how long a waiting claim of source starting at now
// holds back: the rest of waitPollMax since such a run of source ended,
// or 0.
func (y *yields) holdBack(source string, now time.Time) time.Duration {
	y.mu.Lock()
	defer y.mu.Unlock()
	at, ok := y.ended[source]
	if !ok {
		return 0
	}
	if d := waitPollMax - now.Sub(at); d > 0 {
		return d
	}
	delete(y.ended, source)
	return 0
}

// A claimWaker is a Store that can tell a waiting claim when a claim of a
// source may win now, so that it claims again at once rather than at its
// next poll. MemoryStore is one; a Store that is not polls alone.
type claimWaker interface {
	// claimWake returns a channel that closes once a claim of source may
	// win: taken before a claim, it closes on any change after it.
	claimWake(source string) <-chan struct{}
}

var _ claimWaker = (*MemoryStore)(nil)

// claimWaiting is Claim with Wait, with the options o.
func (c *Claimer) claimWaiting(ctx context.Context, source string, o claimOptions) (*Run, error) {
	req, err := c.checkedRequest(ctx, source, o)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	deadline, hasDeadline := ctx.Deadline()
	sched := newPollSchedule()
	if o.replace {
		sched.max = replacePollMax
	}
	var last *NotClaimedError // the last skip
	// A claim whose ctx ends before its hold-back would end claims at
	// once: holding back would only make it fail. A claim with Replace
	// takes the source from a run: it does not hold back.
	if d := c.yl.holdBack(source, start); d > 0 && !o.replace && (!hasDeadline || start.Add(d).Before(deadline)) {
		if err := sleepCtx(ctx, d, nil); err != nil {
			return nil, c.waitEnded(ctx, source, start, nil)
		}
	}
	waker, _ := c.store.(claimWaker)
	for {
		var wake <-chan struct{} // nil: poll alone
		if waker != nil {
			wake = waker.claimWake(source)
		}
		sent := time.Now()
		info, err := c.store.Claim(ctx, req)
		took := time.Since(sent)
		if err == nil {
			run := c.newRun(info, sent)
			run.waited = true
			c.claimedAfter(ctx, run, took, sent.Sub(start))
			return run, nil
		}
		var nc *NotClaimedError
		if !errors.As(err, &nc) {
			c.claimFailedAfter(ctx, source, err, took, sent.Sub(start))
			return nil, err
		}
		if !waitable(nc, deadline, hasDeadline, o.replace) {
			c.notClaimedAfter(ctx, source, nc, took, sent.Sub(start))
			return nil, err
		}
		if last == nil {
			c.waiting(source, nc)
		}
		last = nc
		if err := sleepCtx(ctx, sched.pause(nc, time.Now()), wake); err != nil {
			return nil, c.waitEnded(ctx, source, start, last)
		}
	}
}

// waitEnded reports and returns the error of a waiting claim of source,
// started at start, whose ctx ended while it waited after skip last (nil
// if it had not claimed yet). The error matches ctx's.
func (c *Claimer) waitEnded(ctx context.Context, source string, start time.Time, last *NotClaimedError) error {
	waited := time.Since(start)
	var err error
	if last != nil {
		err = fmt.Errorf("runclaim: claim %s: gave up waiting after %v (%s): %w", quoteForError(source), waited.Round(time.Millisecond), last.Error(), ctx.Err())
	} else {
		err = fmt.Errorf("runclaim: claim %s: gave up waiting after %v, before the first claim: %w", quoteForError(source), waited.Round(time.Millisecond), ctx.Err())
	}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		err = fmt.Errorf("%w (cause: %w)", err, cause)
	}
	c.claimFailedAfter(ctx, source, err, 0, waited)
	return err
}

// sleepCtx waits d, or until wake closes (nil: never), or until ctx ends:
// then it returns ctx's error.
func sleepCtx(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waiting logs, once per waiting claim, that it waits after skip nc.
func (c *Claimer) waiting(source string, nc *NotClaimedError) {
	if l := c.cfg.logger; l != nil && l.Enabled(context.Background(), slog.LevelDebug) {
		l.LogAttrs(context.Background(), slog.LevelDebug, "runclaim: waiting",
			slog.String("source", source), slog.String("reason", nc.Error()))
	}
}

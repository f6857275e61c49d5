package runclaim

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// A Ticker delivers the ticks of a Schedule on its channel C, for a loop
// that claims each with Claimer.Claim or Do and ForTick: a replica that names
// the tick, not the time it woke up, runs each tick at most once across
// every replica, whatever their clocks say, with no minimum interval to
// tune.
//
// A Ticker delivers each tick when its clock reaches it. It also catches
// up: when it starts, and when it finds itself late (the process was
// suspended, or its receiver was busy), it delivers the latest tick that
// has passed, if that tick is at most the starting deadline old, and no
// older one. So a service that was down across a tick runs it once when it
// is back within the deadline (a replica that was up has run it already,
// and ForTick skips it with ErrTickDone), and several missed ticks give
// one run, for the latest. A tick older than the deadline is never
// delivered. C holds no tick: a tick that waits for its receiver is
// replaced by a later one, or dropped once it is older than the deadline.
type Ticker struct {
	// C delivers the ticks.
	C <-chan time.Time

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// maxTickerWait bounds one wait of a Ticker, so that it follows a wall
// clock that was set forward.
const maxTickerWait = time.Minute

// NewTicker returns a Ticker of s, which delivers a tick found late only
// if it is at most startingDeadline old (see Ticker). startingDeadline
// must be positive; a second or more allows for a loaded machine's late
// wake-ups, and the period of the schedule catches up any tick missed by a
// restart that took less than a period. Call Stop to release the Ticker.
func NewTicker(s Schedule, startingDeadline time.Duration, opts ...ClockOption) (*Ticker, error) {
	if isNil(s) {
		return nil, errors.New("runclaim: NewTicker: nil Schedule")
	}
	if startingDeadline <= 0 {
		return nil, fmt.Errorf("runclaim: NewTicker: starting deadline must be positive, got %v", startingDeadline)
	}
	now := time.Now
	for _, o := range opts {
		if o.now != nil {
			now = o.now
		}
	}
	c := make(chan time.Time)
	t := &Ticker{C: c, stop: make(chan struct{}), done: make(chan struct{})}
	go t.run(s, startingDeadline, now, c)
	return t, nil
}

// Stop stops the Ticker and waits for its goroutine to end. No tick is
// delivered after it returns. It is safe to call more than once.
func (t *Ticker) Stop() {
	t.stopOnce.Do(func() { close(t.stop) })
	<-t.done
}

func (t *Ticker) run(s Schedule, deadline time.Duration, now func() time.Time, c chan<- time.Time) {
	defer close(t.done)
	// Since Go 1.23 a Reset timer delivers no stale tick: no draining.
	timer := time.NewTimer(maxTickerWait)
	defer timer.Stop()
	var last, pending time.Time // the last tick delivered; the one offered
	for {
		at := now()
		if latest := LatestTick(s, at); !latest.IsZero() && latest.After(last) && at.Sub(latest) <= deadline {
			pending = latest
		}
		if !pending.IsZero() && at.Sub(pending) > deadline {
			pending = time.Time{}
		}
		wait := maxTickerWait
		if next := s.Next(at); !next.IsZero() {
			wait = min(wait, next.Sub(at))
		}
		var out chan<- time.Time
		if !pending.IsZero() {
			out = c
			wait = min(wait, pending.Add(deadline).Sub(at)+time.Nanosecond)
		}
		timer.Reset(max(wait, 0))
		select {
		case out <- pending:
			last, pending = pending, time.Time{}
		case <-timer.C:
		case <-t.stop:
			return
		}
	}
}

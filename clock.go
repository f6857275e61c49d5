package runclaim

import "time"

// A ClockOption gives a MemoryStore or a Ticker another clock than
// time.Now (see WithClock).
type ClockOption struct{ now func() time.Time }

// WithClock makes a MemoryStore or a Ticker read the time from now instead
// of time.Now: tests move a store's time forward without sleeping, and
// give each replica's Ticker a clock of its own. now must be safe for
// concurrent use, and a store's must not go backwards. A Ticker still
// waits with timers of the time package. A nil now leaves time.Now.
func WithClock(now func() time.Time) ClockOption { return ClockOption{now: now} }

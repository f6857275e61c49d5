// Package testclock is a clock that moves only when a test tells it to,
// for runclaim.WithClock in the tests of several packages.
package testclock

import (
	"sync"
	"time"
)

// A Clock reads a time that changes only through Advance. It is safe for
// concurrent use.
type Clock struct {
	mu  sync.Mutex // protects now
	now time.Time
}

// New returns a Clock that reads start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

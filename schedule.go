package runclaim

import "time"

// A Schedule says when a job's ticks are: Next returns the first tick
// strictly after t. A schedule of robfig/cron v3 (cron.Schedule) is one.
// Every replica of a service must use the same Schedule, so that they name
// the same ticks.
type Schedule interface {
	Next(t time.Time) time.Time
}

// Every is the Schedule of the multiples of a period on the wall clock,
// counted as time.Truncate counts them: runclaim.Every(time.Minute) ticks at
// every whole minute, the same moments on every replica whenever it
// started. A period that is not positive has no ticks.
type Every time.Duration

// Next returns the first multiple of the period after t, or the zero time
// for a period that is not positive.
func (e Every) Next(t time.Time) time.Time {
	d := time.Duration(e)
	if d <= 0 {
		return time.Time{}
	}
	return t.Truncate(d).Add(d)
}

// latest returns the last multiple of the period at or before t.
func (e Every) latest(t time.Time) time.Time {
	if d := time.Duration(e); d > 0 {
		return t.Truncate(d)
	}
	return time.Time{}
}

// maxLookBack bounds how far back LatestTick looks for a tick: a little
// over five years, as far as a cron schedule looks ahead for one.
const maxLookBack = 5*366*24*time.Hour + time.Hour

// LatestTick returns the latest tick of s at or before t, or the zero time
// if s has none within five years before t. It finds it with s.Next alone,
// in a few dozen calls for any schedule.
func LatestTick(s Schedule, t time.Time) time.Time {
	if e, ok := s.(Every); ok {
		return e.latest(t)
	}
	if isNil(s) {
		return time.Time{}
	}
	// Find a tick at or before t by looking back ever further, then step
	// forward to the last one.
	for back := time.Second; back <= 2*maxLookBack; back *= 2 {
		p := s.Next(t.Add(-back))
		if p.IsZero() {
			return time.Time{}
		}
		if p.After(t) {
			continue
		}
		for {
			n := s.Next(p)
			if n.IsZero() || n.After(t) || !n.After(p) {
				return p
			}
			p = n
		}
	}
	return time.Time{}
}

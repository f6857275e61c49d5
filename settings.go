package runclaim

import (
	"log/slog"
	"time"
)

// Settings is how a Claimer claims and keeps its runs: what New's options
// (or their defaults) made of it. Adapters that wrap a Claimer read it.
type Settings struct {
	// Owner is the holder name recorded with the Claimer's runs (see
	// WithOwner).
	Owner string
	// Lease is the lease of the Claimer's runs (see WithLease).
	Lease time.Duration
	// HeartbeatInterval is how often Do and DoMany extend a lease (see
	// WithHeartbeat).
	HeartbeatInterval time.Duration
	// ExpiryMargin is how long before a run's lease ends, by this
	// process's own clock, a run without a successful heartbeat in the
	// meantime is given up as lost: Run.Lost closes then, and Do and
	// DoMany cancel the run's context. Work that must be over before
	// another replica can take the source, such as a child process, has
	// that long to stop.
	ExpiryMargin time.Duration
	// HeartbeatTimeout is how long Do and DoMany wait for one heartbeat
	// attempt before they abandon it and retry: long enough for two more
	// attempts before the run is given up (see ExpiryMargin). A link whose
	// round trips are shorter keeps its runs.
	HeartbeatTimeout time.Duration
	// RetryDelay is how long Do and DoMany wait after a failed or
	// abandoned heartbeat attempt before the next.
	RetryDelay time.Duration
	// MinInterval is the minimum interval the Claimer asks for between the
	// starts of two runs of a source (see WithMinInterval); 0 means none.
	MinInterval time.Duration
	// MaxRunTime is how long Do lets a function run before it cancels it
	// with ErrRunTimeout (see WithMaxRunTime); 0 means no limit.
	MaxRunTime time.Duration
	// Logger is the logger set with WithLogger, or nil if there is none.
	// Adapters that wrap a Claimer log through it.
	Logger *slog.Logger
}

// Settings returns the Claimer's settings. Changing the copy changes
// nothing; With makes a Claimer with other settings.
func (c *Claimer) Settings() Settings {
	return Settings{
		Owner:             c.cfg.owner,
		Lease:             c.sched.lease,
		HeartbeatInterval: c.sched.heartbeat,
		ExpiryMargin:      c.sched.margin,
		HeartbeatTimeout:  c.sched.attempt,
		RetryDelay:        c.sched.retry,
		MinInterval:       c.cfg.minInterval,
		MaxRunTime:        c.cfg.maxRunTime,
		Logger:            c.cfg.logger,
	}
}

package runclaim

import (
	"fmt"
	"log/slog"
	"time"
)

// With returns a Claimer on the same Store with the options of c, changed
// by opts: for example a scheduler adapter's claimer with a minimum
// interval of its own. Whatever opts do not set is kept, the owner
// included; a lease changed without WithHeartbeat gets the default
// heartbeat interval, a third of it. c itself is not changed. With returns
// an error, naming the option, if an option is invalid or nil.
func (c *Claimer) With(opts ...Option) (*Claimer, error) {
	cfg := c.cfg
	cfg.errs = nil
	cfg.heartbeat = 0 // tells whether opts set one
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("runclaim: With: nil Option")
		}
		o(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, cfg.errs[0]
	}
	switch {
	case cfg.heartbeat == 0 && cfg.lease == c.cfg.lease:
		cfg.heartbeat = c.cfg.heartbeat
	case cfg.heartbeat == 0:
		cfg.heartbeat = cfg.lease / 3
	case cfg.heartbeat >= cfg.lease/2:
		return nil, fmt.Errorf("runclaim: WithHeartbeat: interval %v must be shorter than half the lease (%v)", cfg.heartbeat, cfg.lease)
	}
	return &Claimer{store: c.store, cfg: cfg}, nil
}

// MinInterval returns the minimum interval this Claimer asks for between
// the starts of two runs of a source (see WithMinInterval); 0 means none.
func (c *Claimer) MinInterval() time.Duration { return c.cfg.minInterval }

// Logger returns the logger set with WithLogger, or nil if there is none.
// Adapters that wrap a Claimer log through it.
func (c *Claimer) Logger() *slog.Logger { return c.cfg.logger }

// ExpiryMargin returns how long before a run's lease ends, by this
// process's own clock, Do and KeepAlive cancel the run's context when no
// heartbeat has succeeded in the meantime (see Do). Work that must be over
// before another replica can take the source, such as a child process,
// has that long to stop once the context is cancelled.
func (c *Claimer) ExpiryMargin() time.Duration {
	return (&Run{claimer: c}).expiryMargin()
}

// HeartbeatTimeout returns how long Do and KeepAlive wait for one heartbeat
// attempt before they abandon it and retry.
func (c *Claimer) HeartbeatTimeout() time.Duration {
	return (&Run{claimer: c}).attemptTimeout()
}

// RetryDelay returns how long Do and KeepAlive wait after a failed or
// abandoned heartbeat attempt before the next.
func (c *Claimer) RetryDelay() time.Duration {
	return (&Run{claimer: c}).retryDelay()
}

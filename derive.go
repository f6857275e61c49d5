package runclaim

import (
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
	base := c.cfg
	base.heartbeat = 0 // tells whether opts set one
	cfg, err := applyOptions(base, opts, "With")
	if err != nil {
		return nil, err
	}
	if cfg.heartbeat == 0 && cfg.lease == c.cfg.lease {
		cfg.heartbeat = c.cfg.heartbeat
	}
	sched, err := newSchedule(cfg.lease, cfg.heartbeat)
	if err != nil {
		return nil, err
	}
	return &Claimer{store: c.store, cfg: cfg, sched: sched}, nil
}

// MinInterval returns the minimum interval this Claimer asks for between
// the starts of two runs of a source (see WithMinInterval); 0 means none.
func (c *Claimer) MinInterval() time.Duration { return c.cfg.minInterval }

// Logger returns the logger set with WithLogger, or nil if there is none.
// Adapters that wrap a Claimer log through it.
func (c *Claimer) Logger() *slog.Logger { return c.cfg.logger }

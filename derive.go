package runclaim

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
	return &Claimer{store: c.store, cfg: cfg, sched: newSchedule(cfg.lease, cfg.heartbeat)}, nil
}

package runclaim

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"
)

// Hooks are functions a Claimer calls as runs are claimed, skipped,
// heartbeated and finished: the place to count metrics. Any field may be
// nil. Hooks run synchronously on the goroutine that caused the event, so
// they must be quick and must not call back into the Claimer. Each gets an
// Event; its doc says which of the Event's fields it fills.
type Hooks struct {
	// Claimed is called after a claim started a run: Event.Run, Source
	// and Duration (how long the claim took).
	Claimed func(Event)
	// Skipped is called after a claim was skipped (ErrNotClaimed):
	// Event.Source, Duration, and Err, the claim's *NotClaimedError.
	// errors.Is on Err tells the reason (ErrAlreadyRunning, ErrTooSoon,
	// ErrTickDone, ErrPaused, ErrLimited: SkipReasons, with their labels);
	// later releases may add reasons, so a listener ranges over
	// SkipReasons, or calls NotClaimedError.Label, and labels an unknown
	// one as such. A claim with Wait reports
	// only the skip it returns, not those of its polls (see Wait).
	Skipped func(Event)
	// ClaimFailed is called after a claim failed with an error that is not
	// a skip: the store's (an unreachable database, a missing table, a
	// permission), the caller's context ending, or invalid input (an
	// invalid source, a nil context), which is a bug worth seeing on a
	// dashboard too. Without it, a database outage would look like a
	// quiet period: no claims and no skips. Event.Source, Err (what the
	// claim returned) and Duration (0 if it was refused before reaching
	// the store).
	ClaimFailed func(Event)
	// Finished is called after a run's outcome was recorded: Event.Run,
	// Source, Status (StatusSucceeded or StatusFailed), Err (the job's
	// error, nil if it succeeded) and Duration (from the claim to the
	// recorded outcome, by the local clock).
	Finished func(Event)
	// HeartbeatFailed is called when a heartbeat fails for a reason other
	// than a lost lease, such as an unreachable database: Event.Run,
	// Source and Err (why; the lease is lost once it ends without a later
	// success).
	HeartbeatFailed func(Event)
	// LeaseLost is called once per run, when its holder learns that the run
	// is no longer its own: Event.Run, Source and Err (matches
	// ErrLeaseLost).
	LeaseLost func(Event)
}

// Event describes what a hook is called for. Each hook fills the fields
// its doc names (see Hooks) and leaves the others zero. Later releases may
// add fields.
type Event struct {
	// Context is the context of the call that made the claim (Claim's,
	// ClaimMany's, Do's), for Claimed, Skipped and ClaimFailed: a hook
	// that traces parents its span on the caller's, and one that logs
	// passes it on. It is context.Background() for a call given a nil
	// context, and nil for the other events, which happen on the run's
	// heartbeat or at its end, when the caller's context may be over
	// (a tracing hook parents them on the run's own span).
	Context  context.Context
	Source   string        // the source claimed, or the run's
	Run      *Run          // the run; nil for a claim that started none
	Err      error         // the skip, failure or cause; nil if none
	Status   Status        // the outcome recorded (Finished)
	Duration time.Duration // how long the claim, or the run, took
	// Waited is, for a claim with Wait, how long it waited before its
	// last claim was sent (Claimed, Skipped), or in all (ClaimFailed);
	// Duration is then that last claim's. Zero for any other event.
	Waited time.Duration
}

// WithHooks adds functions called on the events of a run's life. Given
// more than once, every set is called, in the order given, so that
// metrics, tracing and a program's own hooks work side by side; a nil
// field in one set leaves the others' called. Claimer.With adds the sets
// it is given after the Claimer's own; no option removes a set.
func WithHooks(h Hooks) Option {
	return func(c *config) error {
		c.hooks = joinHooks(c.hooks, h)
		return nil
	}
}

// joinHooks returns hooks that call a's and then b's for each event.
func joinHooks(a, b Hooks) Hooks {
	return Hooks{
		Claimed:         join(a.Claimed, b.Claimed),
		Skipped:         join(a.Skipped, b.Skipped),
		ClaimFailed:     join(a.ClaimFailed, b.ClaimFailed),
		Finished:        join(a.Finished, b.Finished),
		HeartbeatFailed: join(a.HeartbeatFailed, b.HeartbeatFailed),
		LeaseLost:       join(a.LeaseLost, b.LeaseLost),
	}
}

// join returns a function that calls f and then g; either alone if the
// other is nil, so that a single set costs no extra call.
func join[E any](f, g func(E)) func(E) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(e E) {
		f(e)
		g(e)
	}
}

// WithLogger makes the Claimer log what happens to its runs: claims and
// skips at Debug, outcomes at Info (succeeded) or Warn (failed), failed
// heartbeats at Warn, failed claims (see Hooks.ClaimFailed) at Error, or at
// Warn when the caller's context had ended (a shutdown), and lost leases
// at Error. Without it nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		c.logger = l
		return nil
	}
}

// claimed reports a claim, made with ctx, that started run.
func (c *Claimer) claimed(ctx context.Context, run *Run, d time.Duration) {
	c.claimedAfter(ctx, run, d, 0)
}

// callerContext is the context a hook of a claim gets: the claim's, or
// context.Background() for a claim called with none.
func callerContext(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// claimedAfter reports a claim that started run after waiting waited.
func (c *Claimer) claimedAfter(ctx context.Context, run *Run, d, waited time.Duration) {
	ctx = callerContext(ctx)
	if l := c.cfg.logger; l != nil && l.Enabled(ctx, slog.LevelDebug) {
		attrs := []slog.Attr{slog.String("source", run.Source), slog.Int64("run_id", run.ID), slog.Duration("took", d)}
		if waited > 0 {
			attrs = append(attrs, slog.Duration("waited", waited))
		}
		l.LogAttrs(ctx, slog.LevelDebug, "runclaim: claimed", attrs...)
	}
	if f := c.cfg.hooks.Claimed; f != nil {
		f(Event{Context: ctx, Source: run.Source, Run: run, Duration: d, Waited: waited})
	}
}

// notClaimed reports a claim that returned err: a skip or a failure. ctx
// is the claim's; it may be nil.
func (c *Claimer) notClaimed(ctx context.Context, source string, err error, d time.Duration) {
	// A store returns its skips unwrapped: the assertion spares errors.As
	// an allocation on every skip.
	nc, ok := err.(*NotClaimedError)
	if !ok {
		var wrapped *NotClaimedError
		if !errors.As(err, &wrapped) {
			c.claimFailed(ctx, source, err, d)
			return
		}
		nc = wrapped
	}
	c.notClaimedAfter(ctx, source, nc, d, 0)
}

// notClaimedAfter reports skip nc of a claim of source, after waiting
// waited.
func (c *Claimer) notClaimedAfter(ctx context.Context, source string, nc *NotClaimedError, d, waited time.Duration) {
	ctx = callerContext(ctx)
	// The skip's text is formatted only for a logger that keeps Debug: a
	// lost claim is what every replica but one pays on every tick.
	if l := c.cfg.logger; l != nil && l.Enabled(ctx, slog.LevelDebug) {
		l.LogAttrs(ctx, slog.LevelDebug, "runclaim: skipped",
			slog.String("source", source), slog.String("reason", nc.Error()))
	}
	if f := c.cfg.hooks.Skipped; f != nil {
		f(Event{Context: ctx, Source: source, Err: nc, Duration: d, Waited: waited})
	}
}

func (c *Claimer) claimFailed(ctx context.Context, source string, err error, d time.Duration) {
	c.claimFailedAfter(ctx, source, err, d, 0)
}

// claimFailedAfter reports a claim of source that failed with err, after
// waiting waited.
func (c *Claimer) claimFailedAfter(ctx context.Context, source string, err error, d, waited time.Duration) {
	if c.cfg.logger != nil {
		level := slog.LevelError
		if ctx != nil && ctx.Err() != nil {
			level = slog.LevelWarn // the caller called it off
		}
		logged := source
		if len(logged) > MaxSourceLen { // an invalid source may be megabytes
			logged = logged[:MaxSourceLen] + "…"
		}
		c.cfg.logger.LogAttrs(callerContext(ctx), level, "runclaim: claim failed",
			slog.String("source", strings.ToValidUTF8(logged, "\uFFFD")), slog.String("error", err.Error()), slog.Duration("took", d))
	}
	if f := c.cfg.hooks.ClaimFailed; f != nil {
		f(Event{Context: callerContext(ctx), Source: source, Err: err, Duration: d, Waited: waited})
	}
}

func (r *Run) finishedEvent(status Status, jobErr error) {
	c := r.claimer
	d := time.Since(r.claimedAt)
	if c.cfg.logger != nil {
		level := slog.LevelInfo
		attrs := []slog.Attr{slog.String("source", r.Source), slog.Int64("run_id", r.ID), slog.String("status", string(status)), slog.Duration("took", d)}
		if jobErr != nil {
			level = slog.LevelWarn
			attrs = append(attrs, slog.String("error", jobErr.Error()))
		}
		c.cfg.logger.LogAttrs(context.Background(), level, "runclaim: finished", attrs...)
	}
	if f := c.cfg.hooks.Finished; f != nil {
		f(Event{Source: r.Source, Run: r, Status: status, Err: jobErr, Duration: d})
	}
}

// replacedEvent logs, once per run, that a claim with Replace asked the
// run to stop.
func (r *Run) replacedEvent() {
	if l := r.claimer.cfg.logger; l != nil {
		l.LogAttrs(context.Background(), slog.LevelInfo, "runclaim: run asked to stop by a claim with Replace",
			slog.String("source", r.Source), slog.Int64("run_id", r.ID))
	}
}

// lostEvent reports, once per run, that the run is lost.
func (r *Run) lostEvent(err error) {
	c := r.claimer
	if c.cfg.logger != nil {
		c.cfg.logger.LogAttrs(context.Background(), slog.LevelError, "runclaim: lease lost",
			slog.String("source", r.Source), slog.Int64("run_id", r.ID), slog.String("cause", err.Error()))
	}
	if f := c.cfg.hooks.LeaseLost; f != nil {
		f(Event{Source: r.Source, Run: r, Err: err})
	}
}

// failed reports an error from Heartbeat or Finish: a lost lease once
// (closing Lost), any other error as a failed heartbeat (heartbeat true)
// or not at all.
func (r *Run) failed(err error, heartbeat bool) {
	c := r.claimer
	if errors.Is(err, ErrLeaseLost) {
		r.mu.Lock()
		first := r.setLostLocked(err)
		r.mu.Unlock()
		if first {
			r.lostEvent(err)
		}
		return
	}
	if !heartbeat || errors.Is(err, ErrFinished) {
		return
	}
	if c.cfg.logger != nil {
		c.cfg.logger.LogAttrs(context.Background(), slog.LevelWarn, "runclaim: heartbeat failed",
			slog.String("source", r.Source), slog.Int64("run_id", r.ID), slog.String("error", err.Error()))
	}
	if f := c.cfg.hooks.HeartbeatFailed; f != nil {
		f(Event{Source: r.Source, Run: r, Err: err})
	}
}

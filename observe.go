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
// they must be quick and must not call back into the Claimer. The event
// structs may gain fields in later releases.
type Hooks struct {
	// Claimed is called after a claim started a run.
	Claimed func(ClaimedEvent)
	// Skipped is called after a claim was skipped (ErrNotClaimed).
	Skipped func(SkippedEvent)
	// ClaimFailed is called after a claim failed with an error that is not
	// a skip: the store's (an unreachable database, a missing table, a
	// permission), the caller's context ending, or invalid input (an
	// invalid source, a nil context), which is a bug worth seeing on a
	// dashboard too. Without it, a database outage would look like a
	// quiet period: no claims and no skips.
	ClaimFailed func(ClaimFailedEvent)
	// Finished is called after a run's outcome was recorded.
	Finished func(FinishedEvent)
	// HeartbeatFailed is called when a heartbeat fails for a reason other
	// than a lost lease, such as an unreachable database.
	HeartbeatFailed func(HeartbeatFailedEvent)
	// LeaseLost is called once per run, when its holder learns that the run
	// is no longer its own.
	LeaseLost func(LeaseLostEvent)
}

// ClaimedEvent describes a claim that started a run.
type ClaimedEvent struct {
	Run      *Run          // the new run
	Duration time.Duration // how long the claim took
}

// SkippedEvent describes a claim that was skipped. Err is the error the
// claim returned: errors.Is(e.Err, ErrPaused), and so on, tells the reason.
// Later releases may add reasons, so a hook that labels skips by reason
// needs a label for a reason it does not know.
type SkippedEvent struct {
	Source   string           // the source that was not claimed
	Err      *NotClaimedError // Reason says why: ErrAlreadyRunning, ErrTooSoon, ErrTickDone or ErrPaused
	Duration time.Duration    // how long the claim took
}

// ClaimFailedEvent describes a claim that failed: it neither started a run
// nor was skipped.
type ClaimFailedEvent struct {
	Source   string        // the source that was not claimed
	Err      error         // what Claim returned
	Duration time.Duration // how long the claim took; 0 if it was refused before reaching the store
}

// FinishedEvent describes a run whose outcome was recorded.
type FinishedEvent struct {
	Run      *Run          // the finished run
	Status   Status        // StatusSucceeded or StatusFailed
	Err      error         // the job's error, nil if it succeeded
	Duration time.Duration // from the claim to the recorded outcome, by the local clock
}

// HeartbeatFailedEvent describes a heartbeat that failed without losing
// the lease (yet).
type HeartbeatFailedEvent struct {
	Run *Run  // the run whose lease was not extended
	Err error // why; the lease is lost once it ends without a later success
}

// LeaseLostEvent describes a holder learning that its run is lost.
type LeaseLostEvent struct {
	Run   *Run  // the lost run
	Cause error // matches ErrLeaseLost
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

func (c *Claimer) claimed(run *Run, d time.Duration) {
	if l := c.cfg.logger; l != nil && l.Enabled(context.Background(), slog.LevelDebug) {
		l.LogAttrs(context.Background(), slog.LevelDebug, "runclaim: claimed",
			slog.String("source", run.Source), slog.Int64("run_id", run.ID), slog.Duration("took", d))
	}
	if f := c.cfg.hooks.Claimed; f != nil {
		f(ClaimedEvent{Run: run, Duration: d})
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
	// The skip's text is formatted only for a logger that keeps Debug: a
	// lost claim is what every replica but one pays on every tick.
	if l := c.cfg.logger; l != nil && l.Enabled(context.Background(), slog.LevelDebug) {
		l.LogAttrs(context.Background(), slog.LevelDebug, "runclaim: skipped",
			slog.String("source", source), slog.String("reason", nc.Error()))
	}
	if f := c.cfg.hooks.Skipped; f != nil {
		f(SkippedEvent{Source: source, Err: nc, Duration: d})
	}
}

func (c *Claimer) claimFailed(ctx context.Context, source string, err error, d time.Duration) {
	if c.cfg.logger != nil {
		level := slog.LevelError
		if ctx != nil && ctx.Err() != nil {
			level = slog.LevelWarn // the caller called it off
		}
		logged := source
		if len(logged) > MaxSourceLen { // an invalid source may be megabytes
			logged = logged[:MaxSourceLen] + "…"
		}
		c.cfg.logger.LogAttrs(context.Background(), level, "runclaim: claim failed",
			slog.String("source", strings.ToValidUTF8(logged, "\uFFFD")), slog.String("error", err.Error()), slog.Duration("took", d))
	}
	if f := c.cfg.hooks.ClaimFailed; f != nil {
		f(ClaimFailedEvent{Source: source, Err: err, Duration: d})
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
		f(FinishedEvent{Run: r, Status: status, Err: jobErr, Duration: d})
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
		f(LeaseLostEvent{Run: r, Cause: err})
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
		f(HeartbeatFailedEvent{Run: r, Err: err})
	}
}

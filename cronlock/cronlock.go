// Package cronlock makes robfig/cron v3 jobs run on one replica per tick,
// when every replica of a service runs the same cron schedule.
//
// A cron job has no name and no context, so the source to claim is given
// when the job is wrapped:
//
//	claimed, err := cronlock.SkipUnlessClaimed(claimer, "sweep-avito", logger)
//	if err != nil {
//		return err
//	}
//	c := cron.New(cron.WithChain(cron.Recover(logger), claimed))
//	_, err = c.AddFunc("*/5 * * * *", sweep)
//
// or, for a job that wants the run's context (cancelled when the run's lease
// is lost) and its ID (a fencing token), and whose error should be recorded:
//
//	job, err := cronlock.Job(ctx, claimer, "sweep-avito", logger,
//		func(ctx context.Context, run *runclaim.Run) error { return sweep(ctx, run.ID) })
//	if err != nil {
//		return err
//	}
//	_, err = c.AddJob("*/5 * * * *", job)
//
// Job's function gets the run itself, and with it run.Lost(), which closes
// once the run is lost, also after a shutdown has cancelled ctx: a job that
// goes on working after ctx.Done() selects on it (see runclaim.Claimer.Do).
// A job wrapped by SkipUnlessClaimed has no context and cannot learn it.
//
// A chain wraps every job of its Cron, and all of them would then claim the
// one source; to give each job a source of its own, wrap it when adding it:
//
//	claimedCian, err := cronlock.SkipUnlessClaimed(claimer, "sweep-cian", logger)
//	if err != nil {
//		return err
//	}
//	_, err = c.AddJob("*/5 * * * *", claimedCian(cron.FuncJob(sweepCian)))
//
// Both return an error, and nothing else, for a nil or invalid argument
// (an invalid source matches runclaim.ErrInvalidSource), as
// gocronlock.New does.
//
// A skipped tick is logged at Info with the message "skip", as cron's own
// SkipIfStillRunning does. Because a claim keeps the source for the whole
// run, SkipUnlessClaimed also does what SkipIfStillRunning does, across
// replicas.
//
// # Splay
//
// Replicas fire the same tick a few milliseconds apart (their clocks differ
// a little, and so do their goroutines' wake-ups), and a job shorter than
// that would be over before the late replica claims it, which would then
// run the tick again. So once a run starts, other claims of its source are
// skipped with runclaim.ErrTooSoon for the splay window (DefaultSplay,
// 500 ms), counted from the run's start by the database clock, whether or
// not the run is still going; they are logged as "skip" with the reason
// "too soon". The window is the run's minimum interval (see
// runclaim.WithMinInterval): it is recorded with the run and binds every
// claimer of the source. If the Claimer has a longer minimum interval of its
// own, that one applies.
//
// The window must be longer than the splay between replicas and shorter
// than the schedule's period minus that splay, or the next tick is skipped
// too. The default fits every cron spec (a second at the least) on replicas
// whose clocks agree within a few hundred milliseconds. Tune it with
// WithSplay: below half the period for a custom cron.Schedule that fires
// more often; longer for hosts whose clocks drift further apart; 0 to turn
// it off. Prefer specs on the wall clock ("*/5 * * * *"), on which every
// replica ticks at the same time, to "@every 5m", which counts from each
// replica's start.
package cronlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
)

// DefaultSplay is the splay window unless WithSplay sets another: how long
// after a run of a source starts other claims of the source are skipped as
// the same tick.
const DefaultSplay = 500 * time.Millisecond

// An Option configures SkipUnlessClaimed or Job.
type Option func(*config)

type config struct {
	splay time.Duration
}

// WithSplay sets the splay window (DefaultSplay if not set): how long after
// a run of the source starts other claims of it are skipped as the same
// tick. It must be shorter than the schedule's period minus the splay
// between replicas; 0 turns the window off. See the package doc.
func WithSplay(d time.Duration) Option {
	return func(c *config) { c.splay = d }
}

// prepare checks the arguments common to the wrappers, and returns
// claimer, or a Claimer derived from it whose minimum interval is the
// splay window, if that is longer.
func prepare(fn string, claimer *runclaim.Claimer, source string, opts []Option) (*runclaim.Claimer, error) {
	if claimer == nil {
		return nil, errors.New("cronlock: " + fn + ": nil Claimer")
	}
	if err := runclaim.ValidateSource(source); err != nil {
		return nil, fmt.Errorf("cronlock: %s: %w", fn, err)
	}
	cfg := config{splay: DefaultSplay}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("cronlock: " + fn + ": nil Option")
		}
		o(&cfg)
	}
	if cfg.splay < 0 {
		return nil, fmt.Errorf("cronlock: WithSplay: window must not be negative, got %v", cfg.splay)
	}
	if cfg.splay <= claimer.MinInterval() {
		return claimer, nil
	}
	c, err := claimer.With(runclaim.WithMinInterval(cfg.splay))
	if err != nil {
		return nil, fmt.Errorf("cronlock: WithSplay: %w", err)
	}
	return c, nil
}

// SkipUnlessClaimed returns a cron.JobWrapper that runs the wrapped job only
// when claimer claims source, and records the run's end when the job
// returns. A panic in the job is recorded as a failed run and then
// re-panicked, for cron.Recover to catch. The job cannot be stopped when its
// lease is lost; the Claimer's hooks and logger report it (use Job for a job
// that can stop: its function gets the run's context and run.Lost()).
//
// Skips are logged to logger at Info with the message "skip" and the keys
// "source" and "reason", plus "holder" and "run" when the holder is known.
// Failures (the claim failed, or the run could not be recorded) are logged
// at Error. A nil logger means cron.DefaultLogger. The claim runs with
// context.Background. Other claims of source are skipped for the splay
// window after a run starts (see the package doc and WithSplay). It
// returns an error if claimer or an option is nil, an option is invalid,
// or source is not a valid source (runclaim.ErrInvalidSource).
func SkipUnlessClaimed(claimer *runclaim.Claimer, source string, logger cron.Logger, opts ...Option) (cron.JobWrapper, error) {
	claimer, err := prepare("SkipUnlessClaimed", claimer, source, opts)
	if err != nil {
		return nil, err
	}
	logger = orDefault(logger)
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			err := claimer.Do(context.Background(), source, func(context.Context, *runclaim.Run) error {
				j.Run()
				return nil
			})
			logResult(logger, source, err)
		})
	}, nil
}

// Job returns a cron.Job that calls fn with a run of source when claimer
// claims source, and skips the tick otherwise, as Claimer.Do does. ctx is
// the parent of every run's context: cancel it to stop claiming and to
// cancel running runs, for example when the service shuts down. fn's error
// is recorded as the run's outcome and logged at Error, unless it is ctx's
// own, which is logged at Info as "cancelled"; skips are logged as by
// SkipUnlessClaimed, and the splay window applies as there. A nil logger
// means cron.DefaultLogger. It returns an error if ctx, claimer, fn or an
// option is nil, an option is invalid, or source is not a valid source
// (runclaim.ErrInvalidSource).
//
// When ctx is cancelled, fn's context is cancelled too, and the run is kept
// alive until fn returns. A run lost while fn winds down after that shows
// in run.Lost() only, since fn's context was already cancelled: a fn that
// goes on working after its context ends selects on run.Lost() as well.
func Job(ctx context.Context, claimer *runclaim.Claimer, source string, logger cron.Logger, fn func(ctx context.Context, run *runclaim.Run) error, opts ...Option) (cron.Job, error) {
	switch {
	case ctx == nil:
		return nil, errors.New("cronlock: Job: nil Context")
	case fn == nil:
		return nil, errors.New("cronlock: Job: nil function")
	}
	claimer, err := prepare("Job", claimer, source, opts)
	if err != nil {
		return nil, err
	}
	logger = orDefault(logger)
	return cron.FuncJob(func() {
		err := claimer.Do(ctx, source, fn)
		if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			logger.Info("cancelled", "source", source)
			return
		}
		logResult(logger, source, err)
	}), nil
}

func orDefault(l cron.Logger) cron.Logger {
	if l == nil {
		return cron.DefaultLogger
	}
	return l
}

// logResult logs what Claimer.Do returned.
func logResult(logger cron.Logger, source string, err error) {
	var nc *runclaim.NotClaimedError
	switch {
	case err == nil:
	case errors.As(err, &nc):
		kv := []any{"source", source, "reason", reason(nc)}
		if nc.Holder != nil {
			kv = append(kv, "holder", nc.Holder.Owner, "run", nc.Holder.ID)
		}
		logger.Info("skip", kv...)
	default:
		logger.Error(err, "run failed", "source", source)
	}
}

// reason is a short word for why a claim was skipped.
func reason(nc *runclaim.NotClaimedError) string {
	switch {
	case errors.Is(nc.Reason, runclaim.ErrTooSoon):
		return "too soon"
	case nc.Holder == nil:
		return "claim in flight"
	default:
		return "already running"
	}
}

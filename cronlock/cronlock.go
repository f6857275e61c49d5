// Package cronlock makes robfig/cron v3 jobs run on one replica per tick,
// when every replica of a service runs the same cron schedule.
//
// A cron job has no name and no context, so the source to claim is given
// when the job is wrapped:
//
//	c := cron.New(cron.WithChain(
//		cron.Recover(logger),
//		cronlock.SkipUnlessClaimed(claimer, "sweep-avito", logger),
//	))
//	_, err := c.AddFunc("*/5 * * * *", sweep)
//
// or, for a job that wants the run's context (cancelled when the run's lease
// is lost) and its ID (a fencing token), and whose error should be recorded:
//
//	_, err := c.AddJob("*/5 * * * *", cronlock.Job(ctx, claimer, "sweep-avito", logger,
//		func(ctx context.Context, run *runclaim.Run) error { return sweep(ctx, run.ID) }))
//
// A chain wraps every job of its Cron, and all of them would then claim the
// one source; to give each job a source of its own, wrap it when adding it:
//
//	_, err := c.AddJob("*/5 * * * *", cronlock.SkipUnlessClaimed(claimer, "sweep-cian", logger)(cron.FuncJob(sweepCian)))
//
// A skipped tick is logged at Info with the message "skip", as cron's own
// SkipIfStillRunning does. Because a claim keeps the source for the whole
// run, SkipUnlessClaimed also does what SkipIfStillRunning does, across
// replicas.
//
// Replicas tick a few milliseconds apart. A job shorter than that skew
// finishes before the late replica claims, which then runs the tick again.
// Give the Claimer a minimum interval of about half the schedule's period
// (runclaim.WithMinInterval), so that the late claim is skipped. Prefer
// specs on the wall clock ("*/5 * * * *"), on which every replica ticks at
// the same time, to "@every 5m", which counts from each replica's start.
package cronlock

import (
	"context"
	"errors"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
)

// SkipUnlessClaimed returns a cron.JobWrapper that runs the wrapped job only
// when claimer claims source, and records the run's end when the job
// returns. A panic in the job is recorded as a failed run and then
// re-panicked, for cron.Recover to catch. The job cannot be stopped when its
// lease is lost; the Claimer's hooks and logger report it (use Job for a job
// that can stop).
//
// Skips are logged to logger at Info with the message "skip" and the keys
// "source" and "reason", plus "holder" and "run" when the holder is known.
// Failures (the claim failed, or the run could not be recorded) are logged
// at Error, as is an invalid source, on every tick. A nil logger means
// cron.DefaultLogger. The claim runs with context.Background. It panics if
// claimer is nil.
func SkipUnlessClaimed(claimer *runclaim.Claimer, source string, logger cron.Logger) cron.JobWrapper {
	if claimer == nil {
		panic("cronlock: SkipUnlessClaimed: nil Claimer")
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
	}
}

// Job returns a cron.Job that calls fn with a run of source when claimer
// claims source, and skips the tick otherwise, as Claimer.Do does. ctx is
// the parent of every run's context: cancel it to stop claiming and to
// cancel running runs, for example when the service shuts down. fn's error
// is recorded as the run's outcome and logged at Error, unless it is ctx's
// own, which is logged at Info as "cancelled"; skips are logged as by
// SkipUnlessClaimed. A nil logger means cron.DefaultLogger. It panics
// if ctx, claimer or fn is nil.
func Job(ctx context.Context, claimer *runclaim.Claimer, source string, logger cron.Logger, fn func(ctx context.Context, run *runclaim.Run) error) cron.Job {
	switch {
	case ctx == nil:
		panic("cronlock: Job: nil Context")
	case claimer == nil:
		panic("cronlock: Job: nil Claimer")
	case fn == nil:
		panic("cronlock: Job: nil function")
	}
	logger = orDefault(logger)
	return cron.FuncJob(func() {
		err := claimer.Do(ctx, source, fn)
		if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			logger.Info("cancelled", "source", source)
			return
		}
		logResult(logger, source, err)
	})
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

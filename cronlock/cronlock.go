// Package cronlock makes robfig/cron v3 jobs run on one replica per tick,
// when every replica of a service runs the same cron schedule.
//
// A cron job has no name and no context, and does not learn which firing
// it serves, so the source to claim and the job's schedule are given when
// the job is wrapped:
//
//	sched, err := cron.ParseStandard("*/5 * * * *")
//	if err != nil {
//		return err
//	}
//	claimed, err := cronlock.SkipUnlessClaimed(claimer, "sweep-avito", logger, cronlock.WithSchedule(sched))
//	if err != nil {
//		return err
//	}
//	c := cron.New(cron.WithChain(cron.Recover(logger)))
//	c.Schedule(sched, claimed(cron.FuncJob(sweep)))
//
// or, for a job that wants the run's context (cancelled when the run's lease
// is lost) and its ID (a fencing token), and whose error should be recorded:
//
//	job, err := cronlock.Job(ctx, claimer, "sweep-cian", logger,
//		func(ctx context.Context, run *runclaim.Run) error { return sweep(ctx, run.ID) },
//		cronlock.WithSchedule(sched))
//	if err != nil {
//		return err
//	}
//	c.Schedule(sched, job)
//
// Job's function gets the run itself, and with it run.Lost(), which closes
// once the run is lost, also after a shutdown has cancelled ctx: a job that
// goes on working after ctx.Done() selects on it (see runclaim.Claimer.Do).
// A job wrapped by SkipUnlessClaimed has no context and cannot learn it.
//
// A wrapper claims one source on one schedule. A wrapper put in a Cron's
// chain (cron.WithChain) wraps every job of the Cron, and all of them would
// then claim the one source on the one schedule: wrap each job when adding
// it instead, with its own source and schedule.
//
// Both return an error, and nothing else, for a nil or invalid argument
// (an invalid source matches runclaim.ErrInvalidSource), and for a missing
// schedule (ErrNoSchedule), as gocronlock.New does.
//
// A skipped tick is logged at Info with the message "skip", as cron's own
// SkipIfStillRunning does. Because a claim keeps the source for the whole
// run, SkipUnlessClaimed also does what SkipIfStillRunning does, across
// replicas.
//
// # Ticks
//
// Each run claims its tick with runclaim.Claimer.Claim and runclaim.ForTick: a tick that a
// run has served is skipped on every other replica (logged with the reason
// "tick done"), however late it fires there and whatever the replicas'
// clocks say. Cron does not tell a job which firing it serves (its Entry's
// Prev is set only after the job is started, and the job does not know its
// Entry), so the wrapper is given the job's schedule, and names the latest
// tick of that schedule at or before the time the job starts, by the
// process clock, plus half a second, in case the replica's clock was set
// back a little after cron computed the firing. Without a schedule the
// wrappers are not built (ErrNoSchedule): a tick guessed from the time the
// job starts would make a replica whose job starts late (a GC pause, a
// throttled container) name a tick that no replica served, and run the
// firing again.
//
// A configuration is safe, each firing running once on one replica, when:
//
//   - the schedule given is the one the job is added with: pass the same
//     cron.Schedule to WithSchedule and to Cron.Schedule (or parse the spec
//     given to AddFunc or AddJob with the parser of the Cron, in its
//     location);
//   - every replica's job starts less than the time to the job's next
//     firing, less half a second, after its firing by its own clock. For a
//     schedule whose firings are a minute or more apart, a job starting up
//     to 59 s late names the right firing, and a late replica, after the
//     job has finished on an early one, is skipped as "tick done".
//
// A job that starts later still (behind cron.DelayIfStillRunning, say)
// names the next firing: the late replica does not run the firing it was
// late for, and the next firing still runs once. Prefer specs on the wall
// clock ("*/5 * * * *"), on which every replica ticks at the same time, to
// "@every 5m", which counts from each replica's start.
//
// # Catching up
//
// With WithStartingDeadline, a job also catches up after a restart: run it
// once when the service starts, before or after c.Start:
//
//	job, err := cronlock.Job(ctx, claimer, "sweep-cian", logger, sweep,
//		cronlock.WithSchedule(sched), cronlock.WithStartingDeadline(time.Minute))
//	if err != nil {
//		return err
//	}
//	c.Schedule(sched, job)
//	go job.Run() // catch up on a tick missed while the service was down
//
// That run names the latest tick that has passed: if no replica has served
// it and it is at most the deadline old, the job runs it once (several
// missed ticks give one run, for the latest); else it is skipped, logged
// with the reason "missed". A tick that cron fires more than the deadline
// late, as after the process was suspended, is skipped the same way.
package cronlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
)

// tickTolerance is how far ahead of the job's start the tick of a job with
// a schedule may be: a replica whose wall clock was set back a little after
// cron computed its next run starts the job just before the tick.
const tickTolerance = time.Second / 2

// An Option configures SkipUnlessClaimed or Job.
type Option func(*config)

type config struct {
	schedule runclaim.Schedule
	deadline time.Duration // 0: none
	now      func() time.Time
	errs     []string
}

// WithSchedule names the ticks of the job by s, the schedule the job is
// added with (see Ticks in the package doc); cron.Schedule is a
// runclaim.Schedule. Every wrapper needs it: SkipUnlessClaimed and Job
// return ErrNoSchedule without it. s must not be nil.
func WithSchedule(s runclaim.Schedule) Option {
	return func(c *config) {
		if s == nil {
			c.errs = append(c.errs, "WithSchedule: nil Schedule")
		}
		c.schedule = s
	}
}

// WithStartingDeadline skips a tick that is more than d old when the job
// starts (see Catching up in the package doc). d must be positive; without
// the option, any tick is claimed.
func WithStartingDeadline(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Sprintf("WithStartingDeadline: deadline must be positive, got %v", d))
		}
		c.deadline = d
	}
}

// WithClock makes the wrapper name ticks by now instead of time.Now, for
// tests whose cron runs on a clock of their own. now must not be nil.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now == nil {
			c.errs = append(c.errs, "WithClock: nil function")
		}
		c.now = now
	}
}

// prepare checks the arguments common to the wrappers, and applies opts.
func prepare(fn string, claimer *runclaim.Claimer, source string, opts []Option) (config, error) {
	if claimer == nil {
		return config{}, errors.New("cronlock: " + fn + ": nil Claimer")
	}
	if err := runclaim.ValidateSource(source); err != nil {
		return config{}, fmt.Errorf("cronlock: %s: %w", fn, err)
	}
	cfg := config{now: time.Now}
	for _, o := range opts {
		if o == nil {
			return config{}, errors.New("cronlock: " + fn + ": nil Option")
		}
		o(&cfg)
	}
	if len(cfg.errs) > 0 {
		return config{}, errors.New("cronlock: " + cfg.errs[0])
	}
	if cfg.schedule == nil {
		return config{}, fmt.Errorf("cronlock: %s: %w", fn, ErrNoSchedule)
	}
	return cfg, nil
}

// ErrNoSchedule is the error of a wrapper given no schedule (see
// WithSchedule): cron does not tell a job which firing it serves, and the
// wrappers do not guess it.
var ErrNoSchedule = errors.New("no schedule: cron does not tell a job which firing it serves; give the job's schedule with cronlock.WithSchedule")

// errMissed is the skip of a tick older than the starting deadline.
var errMissed = errors.New("cronlock: tick missed: older than the starting deadline")

// doTick runs fn for the tick of a job starting now, as Claimer.Do with ForTick does.
func (cfg config) doTick(ctx context.Context, claimer *runclaim.Claimer, source string, fn func(context.Context, *runclaim.Run) error) error {
	now := cfg.now()
	tick := runclaim.LatestTick(cfg.schedule, now.Add(tickTolerance))
	if tick.IsZero() {
		return fmt.Errorf("cronlock: the job's schedule has no tick before %s", now.Format(time.RFC3339))
	}
	if cfg.deadline > 0 && now.Sub(tick) > cfg.deadline {
		return fmt.Errorf("%w: tick %s, deadline %v: %w", errMissed, tick.Format(time.RFC3339Nano), cfg.deadline, runclaim.ErrNotClaimed)
	}
	return claimer.Do(ctx, source, fn, runclaim.ForTick(tick))
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
// context.Background. Each run claims its tick of the schedule given with
// WithSchedule (see Ticks in the package doc). It returns an error if
// claimer or an option is nil, an option is invalid, no schedule is given
// (ErrNoSchedule), or source is not a valid source
// (runclaim.ErrInvalidSource).
func SkipUnlessClaimed(claimer *runclaim.Claimer, source string, logger cron.Logger, opts ...Option) (cron.JobWrapper, error) {
	cfg, err := prepare("SkipUnlessClaimed", claimer, source, opts)
	if err != nil {
		return nil, err
	}
	logger = orDefault(logger)
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			err := cfg.doTick(context.Background(), claimer, source, func(context.Context, *runclaim.Run) error {
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
// SkipUnlessClaimed, and ticks are claimed as there. A nil logger means
// cron.DefaultLogger. It returns an error if ctx, claimer, fn or an option
// is nil, an option is invalid, no schedule is given (ErrNoSchedule), or
// source is not a valid source (runclaim.ErrInvalidSource).
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
	cfg, err := prepare("Job", claimer, source, opts)
	if err != nil {
		return nil, err
	}
	logger = orDefault(logger)
	return cron.FuncJob(func() {
		err := cfg.doTick(ctx, claimer, source, fn)
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
	case errors.Is(err, errMissed):
		logger.Info("skip", "source", source, "reason", "missed", "detail", err.Error())
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

// reason is a short word for why a claim was skipped: its label (see
// runclaim.SkipReasons), with spaces, and "claim in flight" for a source
// held by no run yet.
func reason(nc *runclaim.NotClaimedError) string {
	if errors.Is(nc.Reason, runclaim.ErrAlreadyRunning) && nc.Holder == nil {
		return "claim in flight"
	}
	return strings.ReplaceAll(nc.Label(), "_", " ")
}

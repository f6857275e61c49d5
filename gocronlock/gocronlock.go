// Package gocronlock makes runclaim the distributed locker, or the leader
// elector, of gocron v2 schedulers, so that a job ticking on every replica
// of a service runs on one replica per tick.
//
//	const spec = "*/5 * * * *"
//	sched, err := cron.ParseStandard(spec) // robfig/cron, which gocron parses specs with
//	if err != nil {
//		return err
//	}
//	locker, err := gocronlock.New(claimer, gocronlock.WithSchedule("sweep-avito", sched))
//	if err != nil {
//		return err
//	}
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//	if err != nil {
//		return err
//	}
//	_, err = s.NewJob(gocron.CronJob(spec, false), gocron.NewTask(sweep),
//		gocron.WithName("sweep-avito")) // the name is the source: keep it stable
//
// On each tick gocron calls Locker.Lock with the job's name; Lock claims the
// tick of the job (see Ticks) with runclaim.Claimer.Claim and runclaim.ForTick, the job's
// name being the source. When another replica holds the source, or has
// already run the tick, Lock returns an error matching
// runclaim.ErrNotClaimed and gocron skips the tick (an AfterLockError event
// listener sees the error). Otherwise the job runs while the lock extends
// the run's lease in the background, and gocron's Unlock finishes the run.
//
// # Ticks
//
// gocron does not tell a Locker which scheduled time it fires for: Lock is
// given the job's name and its context, and nothing in either names the
// firing. (A Job's NextRun may or may not have moved past the firing by
// the time Lock is called, depending on the job's limit mode.) So every job
// locked must be given its schedule with WithSchedule, and Lock names the
// latest tick of that schedule at or before the time it is called, by the
// Locker's clock (the process clock unless WithClock sets another), plus
// half a second, in case the replica's clock was set back a little after
// gocron armed its timer. Lock refuses a job without a schedule with an
// error matching ErrNoSchedule, which it also logs at Error, rather than
// guess its firing from the time: a replica whose Lock comes late (a GC
// pause, a throttled container, a job queued behind gocron's limit mode)
// would name a tick that no replica served, and run the firing again.
//
// A configuration is safe, each firing running once on one replica, when:
//
//   - the schedule given is the one the job is defined with: for a CronJob,
//     the robfig/cron parse of its spec (cron.ParseStandard, or for a
//     CronJob with seconds a cron.NewParser with cron.SecondOptional),
//     in the scheduler's location (a scheduler given gocron.WithLocation
//     needs the spec parsed with "CRON_TZ=" and that location); for a
//     DurationJob started on a round time with gocron.WithStartAt,
//     runclaim.Every(d);
//   - every replica's Lock for a firing comes less than the time to the
//     job's next firing, less half a second, after that firing by its own
//     clock. For a schedule whose firings are a minute or more apart, a
//     Lock up to 59 s late names the right firing; a late replica, after
//     the job has finished on an early one, is skipped with
//     runclaim.ErrTickDone.
//
// A Lock that comes later still, after the job's next firing, names that
// next firing: the late replica does not run the firing it was late for,
// and the next firing still runs once. Replicas' clocks may disagree: each
// names the firing by its own clock, on which its own timer fired.
//
// Duration jobs tick on each replica's own schedule, counted from its start,
// so that their ticks do not line up at all. Start them on a round time with
// gocron.WithStartAt (gocron's own advice), or use a CronJob, which fires on
// the wall clock; or let one replica schedule everything with NewElector.
//
// # Catching up
//
// A job also catches up after a restart:
// start it with gocron.WithStartAt(gocron.WithStartImmediately()). Its first
// Lock, at the scheduler's start, then names the latest tick that has
// passed: if no replica has served it (the service was down across it) and
// it is at most the starting deadline old (WithStartingDeadline), the job
// runs it once; several missed ticks give one run, for the latest. A tick
// older than the deadline, at start or when the process wakes late, is
// skipped with an error matching runclaim.ErrNotClaimed.
//
// # What gocron does not pass on
//
//   - The job's error never reaches the lock, so every run is recorded as
//     succeeded. A job that must record failures should call Claimer.Do
//     itself from an unlocked gocron job instead. (For the run's ID, a
//     fencing token, and for its Lost channel, see Locker.Run.)
//   - The job's function cannot be cancelled by the lock. A lost lease is
//     reported through the Claimer's hooks and logger (runclaim.WithHooks,
//     runclaim.WithLogger), by Unlock's error, which gocron discards, and
//     to the task itself: Locker.Run(ctx) gives a task that takes the
//     job's context its run, whose Lost channel closes once the run is
//     lost, also after a shutdown has cancelled the job's context.
//   - A job without gocron.WithName is named after its function, and the
//     name of a closure ("main.main.func1") changes when the code around it
//     does, so that two versions of a service overlapping in a redeploy would
//     claim different sources. Name every job.
//   - A job whose name is not a valid source (see runclaim.ValidateSource:
//     a control character in it, or a prefix and name longer than
//     runclaim.MaxSourceLen bytes) can never run. Lock returns the error,
//     and logs it at Error on every tick, through the Claimer's logger
//     (runclaim.WithLogger), or slog.Default() if the Claimer has none.
package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/runclaim/runclaim"
)

// tickTolerance is how far ahead of a Lock the tick of a job with a
// schedule may be: a replica whose wall clock was set back a little after
// gocron's timer was armed calls Lock just before the tick.
const tickTolerance = time.Second / 2

// ErrNoSchedule is the error of a Lock of a job that the Locker has no
// schedule for (see WithSchedule): the Locker cannot tell which firing the
// Lock serves, and does not guess it.
var ErrNoSchedule = errors.New("no schedule for the job, so the firing it serves is unknown: give the job's schedule with gocronlock.WithSchedule")

// A Locker is a gocron.Locker that claims each tick of a job, by the job's
// name as a runclaim source. It is safe for concurrent use; one Locker may
// serve several schedulers.
type Locker struct {
	claimer   *runclaim.Claimer
	logger    *slog.Logger
	prefix    string
	now       func() time.Time
	schedules map[string]runclaim.Schedule // by job name
	deadline  time.Duration                // 0: none
	errs      []error

	mu   sync.Mutex                        // protects held
	held map[context.Context]*runclaim.Run // by the context Lock was given
}

var _ gocron.Locker = (*Locker)(nil)

// An Option configures a Locker.
type Option func(*Locker)

// WithPrefix makes the Locker claim prefix+key for the job named key, for
// example to keep the jobs of two services apart in one runs table. The
// prefix must be valid in a source (see runclaim.ValidateSource).
func WithPrefix(prefix string) Option {
	return func(l *Locker) { l.prefix = prefix }
}

// WithSchedule gives the schedule of the job named name (without the
// prefix): its ticks are that schedule's (see Ticks in the package doc),
// and it can catch up. Every job the Locker locks needs one: Lock refuses
// a job without a schedule with ErrNoSchedule. Use the schedule the job is
// defined with, for example the robfig/cron parse of a CronJob's spec, or
// runclaim.Every for a DurationJob started on a round time. A later
// WithSchedule for the same name replaces an earlier one.
func WithSchedule(name string, s runclaim.Schedule) Option {
	return func(l *Locker) {
		if s == nil {
			l.errs = append(l.errs, fmt.Errorf("gocronlock: WithSchedule(%q): nil Schedule", name))
			return
		}
		if l.schedules == nil {
			l.schedules = make(map[string]runclaim.Schedule)
		}
		l.schedules[name] = s
	}
}

// WithStartingDeadline skips a tick that is more than d old when Lock is
// called, as Kubernetes' startingDeadlineSeconds does: a job that catches
// up after a restart runs a missed tick only within d of it. d must be
// positive; without the option, any tick is claimed.
func WithStartingDeadline(d time.Duration) Option {
	return func(l *Locker) {
		if d <= 0 {
			l.errs = append(l.errs, fmt.Errorf("gocronlock: WithStartingDeadline: deadline must be positive, got %v", d))
			return
		}
		l.deadline = d
	}
}

// WithClock makes the Locker name ticks by now instead of time.Now: pass
// the Now of the clock given to gocron.WithClock.
func WithClock(now func() time.Time) Option {
	return func(l *Locker) {
		if now == nil {
			l.errs = append(l.errs, errors.New("gocronlock: WithClock: nil function"))
			return
		}
		l.now = now
	}
}

// New returns a Locker that claims through claimer. The claimer's options
// apply to every lock: its lease, its heartbeat interval
// (runclaim.WithHeartbeat) and its minimum interval. New returns an error
// for a nil claimer or option, or an invalid one.
func New(claimer *runclaim.Claimer, opts ...Option) (*Locker, error) {
	if claimer == nil {
		return nil, errors.New("gocronlock: New: nil Claimer")
	}
	l := &Locker{claimer: claimer, now: time.Now}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("gocronlock: New: nil Option")
		}
		o(l)
	}
	if len(l.errs) > 0 {
		return nil, l.errs[0]
	}
	if l.prefix != "" {
		if err := runclaim.ValidateSource(l.prefix); err != nil {
			return nil, fmt.Errorf("gocronlock: WithPrefix: %w", err)
		}
	}
	l.logger = claimer.Settings().Logger
	if l.logger == nil {
		l.logger = slog.Default()
	}
	return l, nil
}

// tick is the tick of the job named key that a Lock at now names: the
// latest tick of the job's schedule at or before now plus tickTolerance.
// It returns ErrNoSchedule for a job without a schedule.
func (l *Locker) tick(key string, now time.Time) (time.Time, error) {
	s, ok := l.schedules[key]
	if !ok {
		return time.Time{}, ErrNoSchedule
	}
	return runclaim.LatestTick(s, now.Add(tickTolerance)), nil
}

// Lock claims the job's tick (see Ticks in the package doc) of the source
// prefix+key and starts extending its lease in the background (see
// runclaim.Run.KeepAlive). When the claim is skipped it returns an error
// matching runclaim.ErrNotClaimed (and runclaim.ErrAlreadyRunning,
// runclaim.ErrTickDone or runclaim.ErrTooSoon), or the tick is older than
// the starting deadline, which makes gocron skip the tick; any other error
// is a real failure, such as an unreachable database, and gocron skips the
// tick as well. A key that makes an invalid source, or a job without a
// schedule (ErrNoSchedule), is also logged at Error (see the package doc).
// ctx bounds the claim only: the heartbeats go on, whatever becomes of ctx,
// until Unlock or until the run is lost.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	source := l.prefix + key
	if err := runclaim.ValidateSource(source); err != nil {
		err = fmt.Errorf("gocronlock: lock %q: the job's name is not a valid source, so the job never runs: %w", key, err)
		l.logger.LogAttrs(context.Background(), slog.LevelError, "gocronlock: invalid job name",
			slog.String("job", key), slog.String("error", err.Error()))
		return nil, err
	}
	now := l.now()
	tick, err := l.tick(key, now)
	if err != nil {
		err = fmt.Errorf("gocronlock: lock %q: %w", key, err)
		l.logger.LogAttrs(context.Background(), slog.LevelError, "gocronlock: job without a schedule",
			slog.String("job", key), slog.String("error", err.Error()))
		return nil, err
	}
	if tick.IsZero() {
		return nil, fmt.Errorf("gocronlock: lock %q: the job's schedule has no tick before %s", key, now.Format(time.RFC3339))
	}
	if l.deadline > 0 && now.Sub(tick) > l.deadline {
		return nil, fmt.Errorf("gocronlock: lock %q: tick %s is older than the starting deadline of %v: %w", key, tick.Format(time.RFC3339Nano), l.deadline, runclaim.ErrNotClaimed)
	}
	run, err := l.claimer.Claim(ctx, source, runclaim.ForTick(tick))
	if err != nil {
		return nil, fmt.Errorf("gocronlock: lock %q: %w", key, err)
	}
	// gocron cancels ctx, the job's context, when the scheduler shuts down,
	// and then waits for the running job: the run must stay alive meanwhile.
	_, stop := run.KeepAlive(context.WithoutCancel(ctx))
	lk := &lock{locker: l, run: run, stop: stop}
	if ctx != nil && reflect.TypeOf(ctx).Comparable() {
		lk.key = ctx
		l.mu.Lock()
		if l.held == nil {
			l.held = make(map[context.Context]*runclaim.Run)
		}
		l.held[ctx] = run
		l.mu.Unlock()
	}
	return lk, nil
}

// Run returns the run that this Locker holds for the job whose context is
// ctx, or nil if it holds none. gocron passes a job's context both to
// Lock and, when the task's first parameter is a context.Context, to the
// task, so that a task can reach its run from its own context: its ID, a
// fencing token, and its Lost channel, which is closed once the run is
// lost. gocron cancels the job's context at a shutdown and then waits for
// the task, while the lock keeps the run alive; a task that winds down
// after that selects on Lost, which a shutdown does not close:
//
//	task := func(ctx context.Context) error {
//		run := locker.Run(ctx)
//		err := sweep(ctx, run.ID)
//		select {
//		case <-flush(): // the wind-down, after a shutdown
//		case <-run.Lost():
//			return errors.New("run lost: flush abandoned")
//		}
//		return err
//	}
//
// The run is there from Lock until Unlock, which gocron calls after the
// task returns. A job of a scheduler with several Lockers must ask the one
// that locked it.
func (l *Locker) Run(ctx context.Context) *runclaim.Run {
	if ctx == nil || !reflect.TypeOf(ctx).Comparable() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[ctx]
}

// lock is a held claim.
type lock struct {
	locker *Locker
	key    context.Context // the job's context, in locker.held; nil if not kept
	run    *runclaim.Run
	stop   func() // ends the heartbeats and waits for them
}

// forget removes the lock's run from its Locker's held runs.
func (l *lock) forget() {
	if l.key == nil {
		return
	}
	l.locker.mu.Lock()
	defer l.locker.mu.Unlock()
	if l.locker.held[l.key] == l.run {
		delete(l.locker.held, l.key)
	}
}

// Unlock stops the heartbeats, waiting for one in flight, and records the
// run as succeeded (gocron does not tell the lock how the job went). Its
// tick stays done. Unlock returns an error matching
// runclaim.ErrLeaseLost if the run was lost meanwhile. A cancelled ctx does
// not stop it (see runclaim.Run.Finish). Calling Unlock again returns nil
// once a call has succeeded, and retries a Finish that failed otherwise.
func (l *lock) Unlock(ctx context.Context) error {
	l.stop()
	l.forget()
	if err := l.run.Finish(ctx, nil); err != nil {
		return fmt.Errorf("gocronlock: unlock: %w", err)
	}
	return nil
}

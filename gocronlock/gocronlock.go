// Package gocronlock makes runclaim the distributed locker, or the leader
// elector, of gocron v2 schedulers, so that a job ticking on every replica
// of a service runs on one replica per tick.
//
//	locker, err := gocronlock.New(claimer)
//	if err != nil {
//		return err
//	}
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//	if err != nil {
//		return err
//	}
//	_, err = s.NewJob(gocron.CronJob("*/5 * * * *", false), gocron.NewTask(sweep),
//		gocron.WithName("sweep-avito")) // the name is the source: keep it stable
//
// On each tick gocron calls Locker.Lock with the job's name; Lock claims it as
// a runclaim source. When another replica holds the source, or the tick is
// one that another replica has already run (see Splay), Lock returns an error
// matching runclaim.ErrNotClaimed and gocron skips the tick (an
// AfterLockError event listener sees the error). Otherwise the job runs while
// the lock extends the run's lease in the background, and gocron's Unlock
// finishes the run.
//
// # Splay
//
// Replicas fire the same tick a few milliseconds apart (their clocks differ
// a little, and so do their goroutines' wake-ups). gocron's Locker contract
// leaves it to the locker to make sure that a late replica does not run a
// tick again after an early one has already finished it. The Locker does it
// with a window: once a run of a job has started, other claims of the job
// are skipped with runclaim.ErrTooSoon for the splay window (DefaultSplay,
// 500 ms), counted from the run's start by the database clock, whether or not
// the run is still going. The window is the run's minimum interval (see
// runclaim.WithMinInterval): it is recorded with the run and binds every
// claimer of the source. If the Claimer has a longer minimum interval of its
// own, that one applies.
//
// The window must be longer than the splay between replicas and shorter
// than the job's period minus that splay, or the next tick is skipped too.
// The default fits every job that runs at most once a second on replicas
// whose clocks agree within a few hundred milliseconds. Tune it with
// WithSplay: below half the period for a job that runs more often; longer
// for hosts whose clocks drift further apart; 0 to turn it off.
//
// Duration jobs tick on each replica's own schedule, counted from its start,
// so that their ticks do not line up at all. Start them on a round time with
// gocron.WithStartAt (gocron's own advice), or use a CronJob, which fires on
// the wall clock; or let one replica schedule everything with NewElector.
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

// DefaultSplay is the splay window of a Locker unless WithSplay sets
// another: how long after a run of a job starts other claims of the job
// are skipped as the same tick.
const DefaultSplay = 500 * time.Millisecond

// A Locker is a gocron.Locker that claims each job's name as a runclaim
// source. It is safe for concurrent use; one Locker may serve several
// schedulers.
type Locker struct {
	claimer *runclaim.Claimer // with the splay window as its minimum interval
	logger  *slog.Logger
	prefix  string
	splay   time.Duration

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

// WithSplay sets the splay window (DefaultSplay if not set): how long after
// a run of a job starts other claims of the job are skipped as the same
// tick. It must be shorter than the job's period minus the splay between
// replicas; 0 turns the window off. See the package doc.
func WithSplay(d time.Duration) Option {
	return func(l *Locker) { l.splay = d }
}

// New returns a Locker that claims through claimer. The claimer's options
// apply to every lock: its lease, its heartbeat interval
// (runclaim.WithHeartbeat) and its minimum interval, if that is longer than
// the splay window. New returns an error for a nil claimer or option, an
// invalid prefix or a negative splay window.
func New(claimer *runclaim.Claimer, opts ...Option) (*Locker, error) {
	if claimer == nil {
		return nil, errors.New("gocronlock: New: nil Claimer")
	}
	l := &Locker{claimer: claimer, splay: DefaultSplay}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("gocronlock: New: nil Option")
		}
		o(l)
	}
	if l.prefix != "" {
		if err := runclaim.ValidateSource(l.prefix); err != nil {
			return nil, fmt.Errorf("gocronlock: WithPrefix: %w", err)
		}
	}
	if l.splay < 0 {
		return nil, fmt.Errorf("gocronlock: WithSplay: window must not be negative, got %v", l.splay)
	}
	if l.splay > claimer.MinInterval() {
		c, err := claimer.With(runclaim.WithMinInterval(l.splay))
		if err != nil {
			return nil, fmt.Errorf("gocronlock: WithSplay: %w", err)
		}
		l.claimer = c
	}
	l.logger = claimer.Logger()
	if l.logger == nil {
		l.logger = slog.Default()
	}
	return l, nil
}

// Lock claims the source prefix+key and starts extending its lease in the
// background (see runclaim.Run.KeepAlive). When the claim is skipped it
// returns an error matching runclaim.ErrNotClaimed (and
// runclaim.ErrAlreadyRunning or runclaim.ErrTooSoon), which makes gocron
// skip the tick; any other error is a real failure, such as an unreachable
// database, and gocron skips the tick as well. A key that makes an invalid
// source is also logged at Error (see the package doc). ctx bounds the claim
// only: the heartbeats go on, whatever becomes of ctx, until Unlock or until
// the run is lost.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	source := l.prefix + key
	if err := runclaim.ValidateSource(source); err != nil {
		err = fmt.Errorf("gocronlock: lock %q: the job's name is not a valid source, so the job never runs: %w", key, err)
		l.logger.LogAttrs(context.Background(), slog.LevelError, "gocronlock: invalid job name",
			slog.String("job", key), slog.String("error", err.Error()))
		return nil, err
	}
	run, err := l.claimer.Claim(ctx, source)
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
// run as succeeded (gocron does not tell the lock how the job went). The
// source stays closed to other claims until the splay window since the
// run's start has passed. Unlock returns an error matching
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

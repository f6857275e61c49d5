// Package gocronlock makes runclaim the distributed locker of gocron v2
// schedulers, so that a job ticking on every replica of a service runs on one
// replica per tick.
//
//	locker, err := gocronlock.New(claimer)
//	if err != nil {
//		return err
//	}
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//	if err != nil {
//		return err
//	}
//	_, err = s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(sweep),
//		gocron.WithName("sweep-avito")) // the name is the source: keep it stable
//
// On each tick gocron calls Locker.Lock with the job's name; Lock claims it as
// a runclaim source. When another replica holds the source, or the claimer's
// minimum interval has not passed, Lock returns an error matching
// runclaim.ErrNotClaimed and gocron skips the tick (an AfterLockError event
// listener sees the error). Otherwise the job runs while the lock extends the
// run's lease in the background, and gocron's Unlock finishes the run.
//
// What gocron does not pass on, and what to do about it:
//
//   - The job's error never reaches the lock, so every run is recorded as
//     succeeded. A job that must record failures, use the run ID as a fencing
//     token, or stop when its lease is lost, should call Claimer.Do itself
//     from an unlocked gocron job instead.
//   - The job's function cannot be cancelled by the lock. A lost lease is
//     reported through the Claimer's hooks and logger (runclaim.WithHooks,
//     runclaim.WithLogger) and by Unlock's error, which gocron discards.
//   - A job without gocron.WithName is named after its function, and the
//     name of a closure ("main.main.func1") changes when the code around it
//     does, so that two versions of a service overlapping in a redeploy would
//     claim different sources. Name every job.
//   - Replicas tick a few milliseconds apart. A job shorter than that skew
//     finishes before the late replica claims, which then runs the tick
//     again. Give the Claimer a minimum interval of about half the job's
//     period (runclaim.WithMinInterval), so that the late claim is skipped.
package gocronlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-co-op/gocron/v2"
	"github.com/runclaim/runclaim"
)

// A Locker is a gocron.Locker that claims each job's name as a runclaim
// source. It is safe for concurrent use; one Locker may serve several
// schedulers.
type Locker struct {
	claimer *runclaim.Claimer
	prefix  string
}

var _ gocron.Locker = (*Locker)(nil)

// An Option configures a Locker.
type Option func(*Locker)

// WithPrefix makes the Locker claim prefix+key for the job named key, for
// example to keep the jobs of two services apart in one runs table.
func WithPrefix(prefix string) Option {
	return func(l *Locker) { l.prefix = prefix }
}

// New returns a Locker that claims through claimer. The claimer's options
// apply to every lock: its lease, its heartbeat interval (runclaim.WithHeartbeat)
// and its minimum interval. New returns an error for a nil claimer or option.
func New(claimer *runclaim.Claimer, opts ...Option) (*Locker, error) {
	if claimer == nil {
		return nil, errors.New("gocronlock: New: nil Claimer")
	}
	l := &Locker{claimer: claimer}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("gocronlock: New: nil Option")
		}
		o(l)
	}
	return l, nil
}

// Lock claims the source prefix+key and starts extending its lease in the
// background (see runclaim.Run.KeepAlive). When the claim is skipped it
// returns an error matching runclaim.ErrNotClaimed (and
// runclaim.ErrAlreadyRunning or runclaim.ErrTooSoon), which makes gocron
// skip the tick; any other error is a real failure, such as an unreachable
// database, and gocron skips the tick as well. ctx bounds the claim only:
// the heartbeats go on, whatever becomes of ctx, until Unlock or until the
// run is lost.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	run, err := l.claimer.Claim(ctx, l.prefix+key)
	if err != nil {
		return nil, fmt.Errorf("gocronlock: lock %q: %w", key, err)
	}
	// gocron cancels ctx, the job's context, when the scheduler shuts down,
	// and then waits for the running job: the run must stay alive meanwhile.
	_, stop := run.KeepAlive(context.WithoutCancel(ctx))
	return &lock{run: run, stop: stop}, nil
}

// lock is a held claim.
type lock struct {
	run  *runclaim.Run
	stop func() // ends the heartbeats and waits for them
}

// Unlock stops the heartbeats, waiting for one in flight, and records the
// run as succeeded (gocron does not tell the lock how the job went). It
// returns an error matching runclaim.ErrLeaseLost if the run was lost
// meanwhile. A cancelled ctx does not stop it (see runclaim.Run.Finish).
// Calling Unlock again returns nil once a call has succeeded, and retries a
// Finish that failed otherwise.
func (l *lock) Unlock(ctx context.Context) error {
	l.stop()
	if err := l.run.Finish(ctx, nil); err != nil {
		return fmt.Errorf("gocronlock: unlock: %w", err)
	}
	return nil
}

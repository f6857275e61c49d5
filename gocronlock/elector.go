package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-co-op/gocron/v2"
	"github.com/runclaim/runclaim"
)

// ErrElectorClosed is returned by IsLeader after Close.
var ErrElectorClosed = errors.New("gocronlock: elector closed")

// An Elector is a gocron.Elector: of all the schedulers whose Electors
// share one source, only the one holding the source runs jobs, and the
// others skip every tick.
//
//	elector, err := gocronlock.NewElector(claimer, "svc/scheduler-leader")
//	if err != nil {
//		return err
//	}
//	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
//	...
//	err = s.Shutdown()            // waits for running jobs
//	err = elector.Close(ctx)      // then hands leadership over
//
// The leader holds a run of the source, a "leadership run", for as long as
// it keeps the run alive with heartbeats, which it does in the background
// until Close. runclaim's tools show the leader as the running run of the
// source ("runclaim status").
//
// gocron asks IsLeader before each job runs. A scheduler that is not the
// leader tries to claim the source then, so that it takes over once the
// leader has closed, or within one lease of the leader's death (a crash, a
// partition): at its first job after that. A leader that loses its run
// (its heartbeats failed for most of a lease, or an operator released it)
// learns it before the lease ends by its own clock, and from then on
// IsLeader reports an error until it wins the source again. gocron does not
// stop a job that is already running when leadership is lost; keep jobs
// shorter than the lease, or have them watch the leadership run's Lost
// channel (see Run).
//
// An Elector promises that two schedulers never run jobs at once, not that
// each firing runs once: across a hand-over the new leader may run a
// firing that the old one ran just before it closed (one a few hundred
// milliseconds late was seen to). For each firing once, use the Locker
// (New) with a schedule (WithSchedule), which names each firing's tick.
//
// An Elector is safe for concurrent use.
type Elector struct {
	claimer *runclaim.Claimer // without a minimum interval
	source  string

	mu     sync.Mutex    // protects the fields below, and serialises claims
	run    *runclaim.Run // the leadership run, nil when not the leader
	stop   func()        // ends run's heartbeats
	closed bool
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns an Elector that claims source through claimer. The
// claimer's lease and heartbeat interval apply to the leadership run; its
// minimum interval does not, so that leadership can be taken over as soon
// as it is free. NewElector returns an error for a nil claimer or an
// invalid source.
func NewElector(claimer *runclaim.Claimer, source string) (*Elector, error) {
	if claimer == nil {
		return nil, errors.New("gocronlock: NewElector: nil Claimer")
	}
	if err := runclaim.ValidateSource(source); err != nil {
		return nil, fmt.Errorf("gocronlock: NewElector: %w", err)
	}
	if claimer.Settings().MinInterval != 0 {
		c, err := claimer.With(runclaim.WithMinInterval(0))
		if err != nil {
			return nil, fmt.Errorf("gocronlock: NewElector: %w", err)
		}
		claimer = c
	}
	return &Elector{claimer: claimer, source: source}, nil
}

// IsLeader returns nil while this Elector holds the leadership run of its
// source. Otherwise it tries to claim the source, and returns nil if that
// succeeds; if the source is held by another Elector, the error matches
// runclaim.ErrNotClaimed. Other errors are real failures, such as an
// unreachable database; ErrElectorClosed after Close. ctx bounds the claim
// only.
func (e *Elector) IsLeader(ctx context.Context) error {
	if ctx == nil {
		return errors.New("gocronlock: IsLeader: nil Context")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrElectorClosed
	}
	if e.run != nil {
		select {
		case <-e.run.Lost():
		default:
			return nil
		}
		// The run was lost; the Claimer's hooks and logger have reported
		// it. Try to win the source again.
		e.stop()
		e.run, e.stop = nil, nil
	}
	run, err := e.claimer.Claim(ctx, e.source)
	if err != nil {
		return fmt.Errorf("gocronlock: not the leader: %w", err)
	}
	_, e.stop = run.KeepAlive(context.Background())
	e.run = run
	return nil
}

// Run returns the leadership run while this Elector holds one, and nil
// otherwise. A job of the leading scheduler that may outlast its
// leadership selects on the run's Lost channel, which is closed once the
// run is lost (gocron itself does not stop a running job):
//
//	run := elector.Run()
//	select {
//	case <-done:
//	case <-run.Lost(): // another scheduler may lead now
//		return errors.New("leadership lost")
//	}
//
// The run is the one IsLeader last won; after it is lost, Run returns it
// until the next IsLeader.
func (e *Elector) Run() *runclaim.Run {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.run
}

// Close gives leadership up: it stops the heartbeats and finishes the
// leadership run, if this Elector holds one, so that another Elector can
// take over at once. Later IsLeader calls return ErrElectorClosed. Call it
// after the scheduler's Shutdown, which waits for running jobs, so that no
// job of this scheduler still runs when another takes over.
//
// Close returns an error matching runclaim.ErrLeaseLost if the run was lost
// meanwhile, and the store's error if the run could not be finished (its
// lease then runs out); a cancelled ctx does not stop it (see
// runclaim.Run.Finish). Calling Close again retries a Finish that failed,
// and returns nil otherwise.
func (e *Elector) Close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	if e.run == nil {
		return nil
	}
	e.stop()
	err := e.run.Finish(ctx, nil)
	if err != nil && !errors.Is(err, runclaim.ErrLeaseLost) {
		return fmt.Errorf("gocronlock: close elector: %w", err)
	}
	e.run, e.stop = nil, nil
	if err != nil {
		return fmt.Errorf("gocronlock: close elector: %w", err)
	}
	return nil
}

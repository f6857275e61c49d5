package runclaim

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// States: a source may keep one state, a byte string (a page cursor, a
// "since" timestamp) that its runs hand on from one to the next. A run
// reads the state as it was when its claim won (Run.State), and saves a
// new one while it holds its lease (Run.SaveState). A save is a
// checkpoint: the state saved last by a run that held its lease at that
// moment is the source's state, whatever that run's outcome later.

// A StateSaver is a Store that keeps each source's state: its Claim
// returns the source's state in RunInfo.State when it wins, read in the
// claim's own critical section, and SaveState saves a new one for a run
// that holds its lease. PostgresStore and MemoryStore implement it.
// Run.SaveState on a Store that is not one returns an error.
type StateSaver interface {
	Store
	// SaveState makes state the state of run.Source, if run run.ID of
	// that source, started at run.StartedAt by run.Owner (the run is named
	// as Unclaim names it; its other fields are not read), is running and
	// its lease has not ended by the store's clock; it returns
	// ErrLeaseLost otherwise and changes nothing. state is at most
	// MaxStateLen bytes; nil is taken as empty, not as none. A save and a
	// claim that takes over the run are ordered: a claim that wins after
	// a save returns the state saved, and a save after a claim that took
	// the run over is refused. It refuses a malformed call (no run named,
	// an invalid owner, a state too long) before it sends anything.
	SaveState(ctx context.Context, run RunInfo, state []byte) error
}

// checkSave is a SaveState's first check: a context, a run named by its
// ID, source, owner and start, and a state no longer than MaxStateLen.
func checkSave(ctx context.Context, run RunInfo, state []byte) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := validateRunRef(run.ID, run.Source, run.StartedAt); err != nil {
		return err
	}
	if err := validateName(run.Owner, MaxOwnerLen); err != nil {
		return fmt.Errorf("runclaim: invalid owner: %w", err)
	}
	return validateState(state)
}

// validateState returns an error for a state longer than MaxStateLen.
func validateState(state []byte) error {
	if len(state) > MaxStateLen {
		return fmt.Errorf("runclaim: state is %d bytes, more than MaxStateLen (%d)", len(state), MaxStateLen)
	}
	return nil
}

// errNoStates is returned by Run.SaveState on a Store that keeps no
// states.
var errNoStates = errors.New("runclaim: the store keeps no states: it does not implement StateSaver")

// State returns the source's state as it was when the run's claim won: the
// state saved last, by this run's predecessors or by an operator; nil if
// none was ever saved (an empty state saved is empty, not nil). It does
// not change during the run, not even when the run saves a new one: the
// caller keeps its own progress. The slice returned is the caller's.
// Runs won by ClaimMany and DoMany carry their sources' states too (on
// Postgres read in one statement after the claim's, when it won any).
func (r *Run) State() []byte {
	if !r.hasState {
		return nil
	}
	return []byte(r.state)
}

// SaveState makes state the source's state, if the run still holds its
// lease: the next run claimed gets it from State. It is a checkpoint: a
// state saved stays saved whatever the run's outcome later, so a run
// saves the progress it has made, when it has made it (after the writes
// the state stands for are durable).
//
// It returns an error matching ErrLeaseLost, and changes nothing, if the
// run is not running any more or its lease has ended by the store's
// clock, and then closes Lost; ErrFinished after Finish (also when a
// Finish recorded the run while this save was on its way, which closes
// nothing and fires no LeaseLost hook); an error, before
// anything is sent, for a state longer than MaxStateLen or a Store that is
// not a StateSaver; and the store's error, wrapped, otherwise. A nil or
// empty state is saved as an empty state. ctx bounds this call only.
func (r *Run) SaveState(ctx context.Context, state []byte) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := validateState(state); err != nil {
		return fmt.Errorf("runclaim: save state of run %d: %w", r.ID, err)
	}
	ss, ok := r.claimer.store.(StateSaver)
	if !ok {
		return fmt.Errorf("runclaim: save state of run %d: %w", r.ID, errNoStates)
	}
	r.mu.Lock()
	done := r.finished != nil
	r.mu.Unlock()
	if done {
		return fmt.Errorf("runclaim: save state of run %d: %w", r.ID, ErrFinished)
	}
	if state == nil {
		state = []byte{}
	}
	err := ss.SaveState(ctx, RunInfo{ID: r.ID, Source: r.Source, Owner: r.Owner, StartedAt: r.StartedAt}, state)
	if errors.Is(err, ErrLeaseLost) {
		// The run's own Finish may have recorded it while the save was
		// on its way: that is no lost lease.
		if ferr := r.finishedMeanwhile(ctx, "save state of"); ferr != nil {
			return ferr
		}
		r.failed(err, false)
	}
	return err
}

// SavedState is a source's state as an operator reads it.
type SavedState struct {
	State   []byte    // the state; empty is a state
	SavedAt time.Time // when it was saved or set, by the database clock
	RunID   int64     // the run that saved it; 0 when an operator set it
}

package runclaim

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Schema version 9 (sql/009_states.up.sql) adds states: a table of each
// source's state, named after the runs table with statesSuffix, one row
// per source that has one; and an overload of the claim function with one
// more argument, which says to return the state, and one more result, the
// state of the source when the claim won (NULL when it lost, or when the
// source has none).
//
// The overload decides the claim with its own copy of the body of version
// 8's overload with keys (without a batch's parts: a ClaimMany calls that
// overload), rather than a call of it or of the one with a tick, so that a
// claim pays no second PL/pgSQL call frame, which cost a win 1.06x and a
// loss up to 1.08x what they cost on a version 8 table. Then, on a win
// only, it reads the state in a statement of its own: under READ
// COMMITTED that statement takes its snapshot after the claim took the
// source's advisory lock and expired or found finished the run before it,
// so the state it reads is the last one that run saved.
// A save (sql/state.sql) locks the run's row FOR SHARE with Fence's
// predicate (the run's ID, source, owner and start; running; its lease not
// ended by the database clock), so a claim cannot expire a run while one
// of its saves is in flight, and a save after the expiry finds no run. A
// lost claim returns a NULL more and reads nothing more.
//
// The code of version 8 calls the functions it called before, which
// version 9 leaves alone, and never reads the table of states.

var _ StateSaver = (*PostgresStore)(nil)

// SaveState implements StateSaver in one statement. It needs schema
// version 9 and, for the role, INSERT and UPDATE on the table of states
// (see docs/least-privilege.md).
func (s *PostgresStore) SaveState(ctx context.Context, run RunInfo, state []byte) error {
	if err := checkSave(ctx, run, state); err != nil {
		return err
	}
	if state == nil {
		state = []byte{} // a state, not NULL
	}
	var id pgtype.Int8
	err := s.queryRow(ctx, s.sql.saveState, []any{run.ID, run.Source, run.Owner, run.StartedAt, state}, &id)
	what := "save state of run " + strconv.FormatInt(run.ID, 10)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("runclaim: %s: %w", what, ErrLeaseLost)
	case err != nil && pgCode(err) == "42P01": // undefined_table
		return fmt.Errorf("runclaim: %s: the table of states %s is missing: the runs table %s is at a schema version older than %d, which states need; run Migrate (or apply the Migrations): %w",
			what, s.statesTable(), s.Table(), stateFuncVersion, err)
	case err != nil:
		return s.wrap(ctx, what, err)
	}
	return nil
}

// State returns the state of source, and whether it has one: what the
// next run claimed will get from Run.State. It needs schema version 9.
func (s *PostgresStore) State(ctx context.Context, source string) (SavedState, bool, error) {
	if err := checkSourceCall(ctx, source); err != nil {
		return SavedState{}, false, err
	}
	var (
		st    SavedState
		runID pgtype.Int8
	)
	err := s.queryRow(ctx, s.sql.readState, []any{source}, &st.State, &st.SavedAt, &runID)
	if errors.Is(err, pgx.ErrNoRows) {
		return SavedState{}, false, nil
	}
	if err != nil {
		return SavedState{}, false, s.wrap(ctx, "read state of "+quoteForError(source), err)
	}
	if st.State == nil {
		st.State = []byte{}
	}
	st.RunID = runID.Int64
	return st, true, nil
}

// SetState sets the state of source to state (at most MaxStateLen bytes),
// as an operator who must rewind a cursor: the next run claimed gets it.
// Without force it is refused with ErrSourceHeld, and changes nothing,
// while a run of the source holds it. It first waits for the claims of the
// source in flight, which hold its advisory lock until they commit (as
// Pause does; the lock is the store's namespace's, see WithNamespace), so
// a claim that won before it is seen holding the source, and one after it
// gets the new state; claims meanwhile are skipped as in flight. One
// transaction, one round trip. It needs schema version 9.
func (s *PostgresStore) SetState(ctx context.Context, source string, state []byte, force bool) error {
	if err := checkSourceCall(ctx, source); err != nil {
		return err
	}
	if err := validateState(state); err != nil {
		return err
	}
	if state == nil {
		state = []byte{}
	}
	var got string
	err := s.sendBatch(ctx, true, func(b *pgx.Batch) {
		b.Queue(s.sql.operatorLockTimeout)
		b.Queue(s.sql.lockSource, advisoryKey(s.namespace, source))
		b.Queue(s.sql.setState, source, state, !force).QueryRow(func(row pgx.Row) error { return row.Scan(&got) })
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("runclaim: set state of %s: %w (release it, wait for it, or force)", quoteForError(source), ErrSourceHeld)
	}
	if err != nil {
		if pgCode(err) == "55P03" && ctx.Err() == nil {
			return operatorLockError("set state of "+quoteForError(source), err)
		}
		return s.wrap(ctx, "set state of "+quoteForError(source), err)
	}
	return nil
}

// ClearState removes the state of source: the next run claimed gets none
// (Run.State returns nil). It reports whether there was one. Without force
// it is refused with ErrSourceHeld, as SetState, after the same wait for
// the claims in flight. It needs schema version 9.
func (s *PostgresStore) ClearState(ctx context.Context, source string, force bool) (bool, error) {
	if err := checkSourceCall(ctx, source); err != nil {
		return false, err
	}
	var held, deleted bool
	err := s.sendBatch(ctx, true, func(b *pgx.Batch) {
		b.Queue(s.sql.operatorLockTimeout)
		b.Queue(s.sql.lockSource, advisoryKey(s.namespace, source))
		b.Queue(s.sql.clearState, source, !force).QueryRow(func(row pgx.Row) error { return row.Scan(&held, &deleted) })
	})
	if err != nil {
		if pgCode(err) == "55P03" && ctx.Err() == nil {
			return false, operatorLockError("clear state of "+quoteForError(source), err)
		}
		return false, s.wrap(ctx, "clear state of "+quoteForError(source), err)
	}
	if held && !force {
		return false, fmt.Errorf("runclaim: clear state of %s: %w (release it, wait for it, or force)", quoteForError(source), ErrSourceHeld)
	}
	return deleted, nil
}

package runclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// How Fence works. It sends one batch, one round trip, inside the caller's
// transaction (sql/fence.sql, where each statement says what its locks let
// through):
//
//  1. fence_lock locks the run's row FOR KEY SHARE until the transaction
//     ends: no claim can expire the run and take the source over (claims
//     skip the row and report ErrAlreadyRunning), however long the
//     transaction stays open; Heartbeat and Finish, which update no key
//     column, do not wait, and Postgres carries the key-share lock over to
//     the row version they write; Release waits for it, then refuses with
//     ErrFenced.
//  2. Under SAVEPOINT, fence_check locks the row again, FOR SHARE, which
//     waits for a heartbeat or finish in flight and reads the row as it
//     left it (READ COMMITTED), or fails with 40001 when the row changed
//     after the transaction's snapshot (REPEATABLE READ, SERIALIZABLE).
//     Without it, a key-share lock taken over a finish in flight, or in a
//     snapshot older than a finish, would succeed on the row as it was
//     before: the row looks running, the source is free.
//  3. ROLLBACK TO SAVEPOINT drops the FOR SHARE lock again, so heartbeats
//     and finishes wait at most for the batch, never for the caller's
//     transaction.
//
// Releases and claims' expires lock FOR UPDATE before they update the row,
// which Postgres records as an update of the key: a fence that meets one
// waits for it and sees its outcome (READ COMMITTED), or fails with 40001
// (REPEATABLE READ, SERIALIZABLE).

// The savepoint statements, which name no table.
var (
	fenceSavepointSQL = statements["fence_savepoint"]
	fenceRollbackSQL  = statements["fence_rollback"]
	fenceReleaseSQL   = statements["fence_release"]
)

// fenceResult is the check statement's row.
type fenceResult struct {
	source, owner, status pgtype.Text
	startedAt, leaseUntil pgtype.Timestamptz
	now                   time.Time
	isolation             string
	newer                 pgtype.Bool // only when there is no row: a newer run of the source exists
}

// Fence makes tx, a transaction of the caller's on the database that holds
// the runs table, commit only while run holds its source. It checks, by the
// database clock, that run is running and its lease has not ended, and
// locks the run's row for the rest of tx: until tx ends, no claim can expire
// the run and take its source over (claims are skipped as
// ErrAlreadyRunning), while the run's own Heartbeat and Finish still go
// through without waiting for tx. It returns an error matching ErrLeaseLost
// if the run is not running or its lease has ended; the caller should then
// roll tx back.
//
// Call Fence before the writes it guards, or just before the commit, and
// commit (or roll back) tx before the run's Finish: a Finish while a fenced
// transaction is open frees the source at once, and a claim may then start
// a new run before tx commits. Under Do, commit inside the function. Pass
// the run's context to tx's calls, so that a lost run also cancels the
// transaction.
//
// While tx is open, the run holds its source even past the end of its
// lease: a holder paused inside a fenced transaction keeps the source until
// the transaction ends. If the holder's process dies, its connection closes
// and the server rolls tx back at once. If its machine freezes or the
// network drops, the server notices only through TCP keepalives
// (tcp_keepalives_idle, _interval, _count) or, for a session idle inside the
// transaction, idle_in_transaction_session_timeout, which ends the session
// and so the fence. Keep fenced transactions short.
//
// Under REPEATABLE READ or SERIALIZABLE, call Fence first in tx: it fails
// with a serialization error (SQLSTATE 40001; not ErrLeaseLost) if the
// run's row changed after tx's snapshot was taken, even by a heartbeat,
// since tx could not see whether the change ended the run. Roll back and
// retry.
//
// run must come from a Claimer on a PostgresStore of the same table as s,
// and tx must be on the database of that store; Fence returns a plain error
// (not ErrLeaseLost) when it can tell that tx is on another database, and
// the same when the run is not in the database because it failed over to
// a standby that never received the run (asynchronous replication; see
// docs/failover.md): Fence matches the run's source, owner and start as
// well as its ID, so it refuses a lost run even where the new primary has
// handed out its ID again. On any error, roll tx back: a failed statement
// has aborted it. ctx bounds the call, which may wait briefly for a
// heartbeat, finish or release of the run in flight.
func (s *PostgresStore) Fence(ctx context.Context, tx pgx.Tx, run *Run) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	switch {
	case isNil(tx):
		return errors.New("runclaim: fence: nil transaction")
	case run == nil:
		return errors.New("runclaim: fence: nil run")
	case run.claimer == nil:
		return fmt.Errorf("runclaim: fence run %d: the run was not returned by Claim or Do", run.ID)
	}
	what := fmt.Sprintf("fence run %d", run.ID)
	ps, ok := run.claimer.store.(*PostgresStore)
	switch {
	case !ok:
		return fmt.Errorf("runclaim: %s: the run was claimed through a %T, not a PostgresStore", what, run.claimer.store)
	case ps.Table() != s.Table():
		return fmt.Errorf("runclaim: %s: the run is of table %s, not %s", what, ps.Table(), s.Table())
	}
	run.mu.Lock()
	finished := run.finished
	run.mu.Unlock()
	if finished != nil {
		return fmt.Errorf("runclaim: %s: %w: %w as %s", what, ErrLeaseLost, ErrFinished, finished.Status)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("runclaim: %s: %w", what, err)
	}

	var (
		locked bool
		r      fenceResult
	)
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, 5)}
	b.Queue(s.sql.fenceLock, run.ID, run.Source, run.Owner, run.StartedAt).Query(func(rows pgx.Rows) error {
		locked = rows.Next()
		return nil
	})
	b.Queue(fenceSavepointSQL)
	b.Queue(s.sql.fenceCheck, run.ID, run.Source).QueryRow(func(row pgx.Row) error {
		return row.Scan(&r.source, &r.owner, &r.startedAt, &r.status, &r.leaseUntil, &r.now, &r.isolation, &r.newer)
	})
	b.Queue(fenceRollbackSQL)
	b.Queue(fenceReleaseSQL)
	err := tx.SendBatch(ctx, b).Close()
	if err != nil {
		return s.fenceError(ctx, what, err)
	}
	if err := r.verdict(what, run, locked); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			run.failed(err, false)
		}
		return err
	}
	return nil
}

// verdict turns the check's row into Fence's answer.
func (r *fenceResult) verdict(what string, run *Run, locked bool) error {
	snapshot := r.isolation == "repeatable read" || r.isolation == "serializable"
	switch {
	case !r.source.Valid && r.newer.Valid && r.newer.Bool:
		// Prune never deletes a source's newest run: run was here, and
		// is long over.
		return fmt.Errorf("runclaim: %s: %w: the run is gone (pruned) and a newer run of %s exists",
			what, ErrLeaseLost, quoteForError(run.Source))
	case !r.source.Valid && snapshot:
		return fmt.Errorf("runclaim: %s: no such run in the runs table as tx sees it: tx is on another database than the run's, or its %s snapshot predates the claim (begin tx after the claim)",
			what, r.isolation)
	case !r.source.Valid:
		return fmt.Errorf("runclaim: %s: no such run in the runs table as tx sees it: tx is on another database than the run's, or the database failed over to a standby that never received the run (asynchronous replication)", what)
	case r.source.String != run.Source || r.owner.String != run.Owner || !r.startedAt.Time.Equal(run.StartedAt):
		return fmt.Errorf("runclaim: %s: its run %d is another run (source %s, owner %s, started at %s): tx is on another database than the run's, or the database failed over to a standby that never received the run and handed its ID out again (asynchronous replication)",
			what, run.ID, quoteForError(r.source.String), quoteForError(r.owner.String), r.startedAt.Time.Format(time.RFC3339Nano))
	case Status(r.status.String) != StatusRunning:
		return fmt.Errorf("runclaim: %s: %w: the run is %s", what, ErrLeaseLost, r.status.String)
	case !r.leaseUntil.Time.After(r.now):
		return fmt.Errorf("runclaim: %s: %w: its lease ended at %s, by the database clock (now %s)",
			what, ErrLeaseLost, r.leaseUntil.Time.Format(time.RFC3339Nano), r.now.Format(time.RFC3339Nano))
	case !locked:
		// The lock statement ran first and a run never becomes running
		// again, so this cannot happen unless the table was changed under us.
		return fmt.Errorf("runclaim: %s: the run is running but its row could not be locked", what)
	}
	return nil
}

// fenceError explains a failed Fence batch.
func (s *PostgresStore) fenceError(ctx context.Context, what string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001": // serialization_failure
			return s.wrap(ctx, what+": the run's row changed after tx's snapshot; roll back and retry, calling Fence first in the transaction", err)
		case "42P01": // undefined_table
			return s.wrap(ctx, what+": tx cannot see the runs table "+s.Table()+"; is it on the store's database?", err)
		}
	}
	return s.wrap(ctx, what, err)
}

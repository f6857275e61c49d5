package runclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Pauses and triggers on Postgres (schema version 5). They live in a table
// next to the runs table, named after it with controlSuffix: one row per
// source that was ever paused or triggered, with its pause (paused_at,
// pause_until, pause_note; paused_at NULL when it has none) and its
// pending trigger (triggered_at, NULL when it has none). Pause, Resume and
// Trigger are one statement each (sql/control.sql). The claim function
// reads the source's row in the claim's one statement, in the same query
// as the source's running run: first before it tries the advisory lock
// (since version 6), where a pause, or a live holder, skips the claim
// without the lock; and, when it goes on, again after it took the lock,
// with a snapshot taken after it. A pause skips the claim at either read,
// before anything is written; a trigger waives the check of the latest
// tick served and of the minimum interval, and is cleared in the claim's
// transaction just before the run is inserted. Only a claim that holds
// the lock uses a trigger, and it read it after taking the lock, so two
// claims never use one trigger (sql/005_pauses.up.sql,
// sql/006_lost_path.up.sql). Pause takes the same lock before it writes
// (since this release), so it waits for a claim in flight that read no
// pause. The read costs every claim one more index probe, of the control
// table's key.
//
// A claim that the function skipped for a pause returns its row in the
// columns it has had since version 3, which it keeps for the releases
// before: locked false, no running run (run_id NULL), run_owner the
// pause's note (never NULL: an empty note is ''), retry_after the pause's
// end. A release before this one reads that as "another claim in flight",
// a skip too. Nothing else returns run_owner without run_id.

var _ Controller = (*PostgresStore)(nil)

// Pause implements Controller. The end is checked against the database's
// clock: an until that is not after it is refused, and nothing changes.
// It needs schema version 5 (see Migrate) and, for the role, SELECT,
// INSERT and UPDATE on the control table (see docs/least-privilege.md);
// without either it fails with an error that says so, and changes nothing.
// until is stored to the microsecond, rounded down.
//
// Once Pause returns, no claim starts a run of the source until the pause
// ends: Pause first waits for the claims of the source in flight, which
// hold its advisory lock until they commit, and claims made meanwhile are
// skipped as in flight. A claim holds it for milliseconds, longer while
// its commit waits for a synchronous standby or a ClaimMany decides many
// sources; ctx bounds the wait. The lock's key is the store's namespace's
// (WithNamespace): a store with another namespace than the claimers'
// does not wait for their claims. A run already running goes on; see
// Release to end it.
func (s *PostgresStore) Pause(ctx context.Context, source string, until time.Time, note string) error {
	if err := checkPause(ctx, source, until, note); err != nil {
		return err
	}
	what := "pause " + quoteForError(source)
	end := pgtype.Timestamptz{Time: until.Truncate(time.Microsecond), Valid: !until.IsZero()}
	var now time.Time
	var paused bool
	err := s.batchReadCommitted(ctx, func(b *pgx.Batch) {
		b.Queue(s.sql.operatorLockTimeout)
		b.Queue(s.sql.pause, source, end, note, advisoryKey(s.namespace, source)).QueryRow(func(row pgx.Row) error {
			return row.Scan(&now, &paused)
		})
	})
	if err != nil {
		return s.controlError(ctx, what, err)
	}
	if !paused {
		return pastUntil(source, until, now)
	}
	return nil
}

// Resume implements Controller. It needs schema version 5 and, for the
// role, SELECT and UPDATE on the control table.
func (s *PostgresStore) Resume(ctx context.Context, source string) error {
	return s.controlSource(ctx, "resume", s.sql.resume, source)
}

// Trigger implements Controller. It needs schema version 5 and, for the
// role, SELECT, INSERT and UPDATE on the control table.
func (s *PostgresStore) Trigger(ctx context.Context, source string) error {
	return s.controlSource(ctx, "trigger", s.sql.trigger, source)
}

// controlSource sends a control statement (Resume's, Trigger's) of one
// source, whose answer is one boolean, once source is checked.
func (s *PostgresStore) controlSource(ctx context.Context, what, sql, source string) error {
	if err := checkSourceCall(ctx, source); err != nil {
		return err
	}
	var done bool
	if err := s.queryRow(ctx, sql, []any{source}, &done); err != nil {
		return s.controlError(ctx, what+" "+quoteForError(source), err)
	}
	return nil
}

// SourceControl is a source's pause or pending trigger, as Controls
// reports it.
type SourceControl struct {
	Source      string    // the source
	Paused      bool      // paused now
	PausedAt    time.Time // when the pause was made; zero if not paused
	PausedUntil time.Time // the pause's end; zero for a pause until Resume
	Note        string    // the pause's note
	TriggeredAt time.Time // when the pending trigger was made; zero if none
}

// Controls returns the sources that are paused now or have a pending
// trigger, of every source or, if source is not empty, of that one,
// ordered by source, with the database's time of the read. On a table
// older than schema version 5 it returns nothing and no error: no source
// can be paused there.
func (s *PostgresStore) Controls(ctx context.Context, source string) ([]SourceControl, time.Time, error) {
	if err := checkContext(ctx); err != nil {
		return nil, time.Time{}, err
	}
	arg := pgtype.Text{String: source, Valid: source != ""}
	if source != "" {
		if err := ValidateSource(source); err != nil {
			return nil, time.Time{}, err
		}
	}
	rows, err := s.db.Query(ctx, s.sql.controls, arg)
	if err != nil {
		if pgCode(err) == "42P01" {
			return s.controlsWithoutTable(ctx, err)
		}
		return nil, time.Time{}, s.controlError(ctx, "read pauses and triggers", err)
	}
	defer rows.Close()
	var out []SourceControl
	var now time.Time
	for rows.Next() {
		var c SourceControl
		var pausedAt, until, triggered pgtype.Timestamptz
		if err := rows.Scan(&c.Source, &c.Paused, &pausedAt, &until, &c.Note, &triggered, &now); err != nil {
			return nil, time.Time{}, s.wrap(ctx, "read pauses and triggers", err)
		}
		if c.Paused {
			c.PausedAt, c.PausedUntil = pausedAt.Time, until.Time
		} else {
			c.Note = ""
		}
		c.TriggeredAt = triggered.Time
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		if pgCode(err) == "42P01" {
			return s.controlsWithoutTable(ctx, err)
		}
		return nil, time.Time{}, s.controlError(ctx, "read pauses and triggers", err)
	}
	if len(out) == 0 {
		// No row carried the clock: read it.
		if err := s.db.QueryRow(ctx, s.sql.clock).Scan(&now); err != nil {
			return nil, time.Time{}, s.wrap(ctx, "read pauses and triggers", err)
		}
	}
	return out, now, nil
}

// controlsWithoutTable answers Controls on a table without the control
// table, if the schema is indeed older than version 5.
func (s *PostgresStore) controlsWithoutTable(ctx context.Context, err error) ([]SourceControl, time.Time, error) {
	st, serr := s.schemaState(ctx)
	if serr != nil || !st.tableExists || st.commentVersion() >= controlVersion {
		return nil, time.Time{}, s.controlError(ctx, "read pauses and triggers", err)
	}
	var now time.Time
	if err := s.db.QueryRow(ctx, s.sql.clock).Scan(&now); err != nil {
		return nil, time.Time{}, s.wrap(ctx, "read the clock", err)
	}
	return nil, now, nil
}

// errControlSchema says that the table has no pauses and triggers yet.
var errControlSchema = errors.New("pauses and triggers need schema version 5: run Migrate (or apply the Migrations, or 'runclaim migrate') as the table's owner")

// controlError explains an error of Pause, Resume, Trigger or Controls.
func (s *PostgresStore) controlError(ctx context.Context, what string, err error) error {
	if ctx.Err() == nil {
		switch pgCode(err) {
		case "55P03": // lock_not_available
			return operatorLockError(what, err)
		case "42P01": // undefined_table
			return fmt.Errorf("runclaim: %s: the table %s is missing; %w (%w)", what, s.controlTable(), errControlSchema, err)
		case "42501": // insufficient_privilege
			return fmt.Errorf("runclaim: %s: this role may not change pauses and triggers: it needs SELECT, INSERT and UPDATE on %s (a role that only claims needs SELECT and UPDATE (triggered_at); see docs/least-privilege.md): %w",
				what, s.controlTable(), err)
		}
	}
	return s.wrap(ctx, what, err)
}

// operatorLockError is the error of an operator's call whose wait for a
// lock ran out: another session held the source's advisory lock (or a row
// the call writes) for operatorLockWait. Nothing was changed.
func operatorLockError(what string, err error) error {
	return fmt.Errorf("runclaim: %s: another session held the source's lock for %v, far longer than a claim holds it "+
		"(a stuck session, or a role that can connect and takes the lock on purpose: see docs/security.md); nothing was changed; try again: %w",
		what, operatorLockWait, err)
}

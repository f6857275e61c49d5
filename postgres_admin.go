package runclaim

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func scanRecords(rows pgx.Rows) ([]RunRecord, error) {
	defer rows.Close()
	var out []RunRecord
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Running returns the running runs, of every source or, if source is not
// empty, of that one, ordered by source, with the database's time of the
// read so that ages and leases left can be told without trusting the local
// clock. It reads them with RunningFunc, into a slice; for many running
// runs, call RunningFunc.
func (s *PostgresStore) Running(ctx context.Context, source string) ([]RunRecord, time.Time, error) {
	var records []RunRecord
	now, err := s.RunningFunc(ctx, source, func(r RunRecord, _ time.Time) error {
		records = append(records, r)
		return nil
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	return records, now, nil
}

// RunningFunc calls fn with each running run, of every source or, if
// source is not empty, of that one, ordered by source, as it reads them
// from the database: memory use does not grow with the number of runs.
// It reads the database's clock first, and gives fn that time with every
// run, so that ages and leases left can be told without trusting the
// local clock; it returns that time too, which a caller needs when no run
// is running. It stops at the first error fn returns and returns that
// error as it is. fn runs while the query holds one of the pool's
// connections, so it must not wait for another query on a pool that may
// have no other connection to give.
func (s *PostgresStore) RunningFunc(ctx context.Context, source string, fn func(r RunRecord, now time.Time) error) (time.Time, error) {
	if err := checkContext(ctx); err != nil {
		return time.Time{}, err
	}
	if source != "" {
		if err := ValidateSource(source); err != nil {
			return time.Time{}, err
		}
	}
	if fn == nil {
		return time.Time{}, errors.New("runclaim: running: nil function")
	}
	const what = "list running runs"
	var now time.Time
	if err := s.db.QueryRow(ctx, s.sql.clock).Scan(&now); err != nil {
		return time.Time{}, s.wrap(ctx, what, err)
	}
	ticks, err := s.recordsTicks(ctx)
	if err != nil {
		return time.Time{}, s.wrap(ctx, what, err)
	}
	rows, err := s.db.Query(ctx, withTicks(s.sql.running, s.sql.runningTick, ticks), source)
	if err != nil {
		return time.Time{}, s.wrap(ctx, what, err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return time.Time{}, s.wrap(ctx, what, err)
		}
		if err := fn(r, now); err != nil {
			return time.Time{}, err
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, s.wrap(ctx, what, err)
	}
	return now, nil
}

// History returns the latest runs of source, newest first, at most limit
// of them (limit must be positive). It reads them with HistoryFunc, into a
// slice; for a long history, call HistoryFunc.
func (s *PostgresStore) History(ctx context.Context, source string, limit int) ([]RunRecord, error) {
	var records []RunRecord
	err := s.HistoryFunc(ctx, source, limit, func(r RunRecord) error {
		records = append(records, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return records, nil
}

// HistoryFunc calls fn with each of the latest runs of source, newest
// first, at most limit of them (limit must be positive), as it reads them
// from the database: memory use does not grow with limit. It stops at the
// first error fn returns and returns that error as it is. fn runs while
// the query holds one of the pool's connections, so it must not wait for
// another query on a pool that may have no other connection to give.
func (s *PostgresStore) HistoryFunc(ctx context.Context, source string, limit int, fn func(RunRecord) error) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := ValidateSource(source); err != nil {
		return err
	}
	if limit <= 0 {
		return fmt.Errorf("runclaim: history: limit must be positive, got %d", limit)
	}
	if fn == nil {
		return errors.New("runclaim: history: nil function")
	}
	what := "history of " + quoteForError(source)
	ticks, err := s.recordsTicks(ctx)
	if err != nil {
		return s.wrap(ctx, what, err)
	}
	rows, err := s.db.Query(ctx, withTicks(s.sql.history, s.sql.historyTick, ticks), source, limit)
	if err != nil {
		return s.wrap(ctx, what, err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return s.wrap(ctx, what, err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return s.wrap(ctx, what, err)
	}
	return nil
}

// scanRecord reads the row rows is on, selected as the ten columns of
// sql/admin.sql.
func scanRecord(rows pgx.Rows) (RunRecord, error) {
	var (
		r        RunRecord
		status   string
		finished *time.Time
		tick     *time.Time
	)
	if err := rows.Scan(&r.ID, &r.Source, &r.Owner, &r.StartedAt, &r.LeaseUntil, &status, &r.HeartbeatAt, &finished, &r.Error, &tick); err != nil {
		return RunRecord{}, err
	}
	r.Status = Status(status)
	if finished != nil {
		r.FinishedAt = *finished
	}
	if tick != nil {
		r.Tick = *tick
	}
	return r, nil
}

// recordsTicks reports whether the runs table has the tick column (schema
// version 4), reading the schema's state from the catalogs when the store
// does not know it yet: the operator commands then read and keep ticks
// with the "_tick" twins of their statements.
func (s *PostgresStore) recordsTicks(ctx context.Context) (bool, error) {
	if v := s.schemaVer.version.Load(); v != 0 {
		return v >= tickFuncVersion, nil
	}
	st, err := s.schemaState(ctx)
	return st.version() >= tickFuncVersion, err
}

// withTicks returns q, or its twin that reads ticks if ticks.
func withTicks(q, twin string, ticks bool) string {
	if ticks {
		return twin
	}
	return q
}

// Release ends a running run as released, for an operator freeing a stuck
// source before its lease ends. The run's holder learns it at its next
// Heartbeat or Finish (ErrLeaseLost). Give the run's ID, or 0 and the source.
// It returns the released run, or ErrNotRunning.
//
// Release respects a fence: while a transaction fenced with Fence is open on
// the run, releasing it would let a new run start before that transaction's
// writes commit. So Release waits up to a second for the run's row and then
// returns an error matching ErrFenced, having changed nothing. Retry once the
// transaction has ended, or end it (pg_terminate_backend) if its holder is
// stuck.
func (s *PostgresStore) Release(ctx context.Context, id int64, source string) (RunRecord, error) {
	if err := checkContext(ctx); err != nil {
		return RunRecord{}, err
	}
	what := "release run " + strconv.FormatInt(id, 10)
	switch {
	case id < 0 || id == 0 && source == "":
		return RunRecord{}, errors.New("runclaim: release: give a positive run ID or a source")
	case id == 0:
		if err := ValidateSource(source); err != nil {
			return RunRecord{}, err
		}
		what = "release " + quoteForError(source)
	}
	ticks, err := s.recordsTicks(ctx)
	if err != nil {
		return RunRecord{}, s.wrap(ctx, what, err)
	}
	release := withTicks(s.sql.release, s.sql.releaseTick, ticks)
	// One transaction: the lock timeout is local to it.
	var records []RunRecord
	err = s.batchReadCommitted(ctx, func(b *pgx.Batch) {
		records = nil // a retry in the explicit form reads them again
		b.Queue(s.sql.releaseLockTimeout)
		b.Queue(release, id, source).Query(func(rows pgx.Rows) (err error) {
			records, err = scanRecords(rows)
			return err
		})
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01"):
		// lock_not_available: lock_timeout. deadlock_detected: a fence that
		// waited for a heartbeat in flight while Release waited for it.
		return RunRecord{}, fmt.Errorf("runclaim: %s: %w: its row stayed locked; retry once that transaction ends (%w)",
			what, ErrFenced, err)
	case err != nil:
		return RunRecord{}, s.wrap(ctx, what, err)
	case len(records) == 0:
		return RunRecord{}, fmt.Errorf("runclaim: %s: %w", what, ErrNotRunning)
	}
	return records[0], nil
}

// RequestStop asks source's running run to stop, for an operator, as a
// claim with Replace does (see Replace) but without keeping the source for
// anyone: the run's holder learns at its next heartbeat (ErrReplaced; Do
// cancels its function's context), keeps its lease until it finishes, and
// is recorded StatusReplaced; the next claim after that wins. It returns
// the run asked, or an error matching ErrNotRunning if no run of source
// holds a live lease. It needs schema version 13, and UPDATE on the runs
// table.
func (s *PostgresStore) RequestStop(ctx context.Context, source string) (RunRecord, error) {
	if err := checkContext(ctx); err != nil {
		return RunRecord{}, err
	}
	if err := ValidateSource(source); err != nil {
		return RunRecord{}, err
	}
	what := "request the stop of " + quoteForError(source)
	rows, err := s.db.Query(ctx, s.sql.requestStop, source)
	if err != nil {
		return RunRecord{}, s.wrap(ctx, what, err)
	}
	records, err := scanRecords(rows)
	if err != nil {
		return RunRecord{}, s.wrap(ctx, what, err)
	}
	if len(records) == 0 {
		return RunRecord{}, fmt.Errorf("runclaim: %s: %w", what, ErrNotRunning)
	}
	return records[0], nil
}

// PruneOptions says which finished runs PruneRuns deletes: those that
// finished more than OlderThan ago and are not among the KeepLast newest
// runs of their source. Running runs and the newest run of each source are
// never deleted.
type PruneOptions struct {
	// OlderThan keeps every run that finished less than this long ago, by
	// the database clock. 0 keeps none for its age. It must not be
	// negative.
	OlderThan time.Duration
	// KeepLast keeps the KeepLast runs of each source that started last,
	// whatever their age or status (as Kubernetes' successfulJobsHistoryLimit
	// does). 0 and 1 both keep the newest run only, which the minimum
	// interval is measured from. It must be between 0 and MaxKeepLast.
	KeepLast int
}

// Validate returns an error if the options are out of range.
func (o PruneOptions) Validate() error {
	if o.OlderThan < 0 {
		return fmt.Errorf("runclaim: prune: OlderThan must not be negative, got %v", o.OlderThan)
	}
	if o.KeepLast < 0 || o.KeepLast > MaxKeepLast {
		return fmt.Errorf("runclaim: prune: KeepLast must be between 0 and %d, got %d", MaxKeepLast, o.KeepLast)
	}
	return nil
}

// Prune deletes finished runs that finished more than olderThan ago, except
// the newest run of each source and, from schema version 4 on, the finished
// run of the latest tick each source has served: PruneRuns with
// PruneOptions{OlderThan: olderThan}.
func (s *PostgresStore) Prune(ctx context.Context, olderThan time.Duration) (int64, error) {
	return s.PruneRuns(ctx, PruneOptions{OlderThan: olderThan})
}

// PruneRuns deletes the finished runs that opts select. It goes through
// the runs in the order of their IDs, PruneBatchSize rows at a time,
// whatever it deletes of them, each batch one statement and its own short
// transaction, so that it never holds locks a
// claim waits for. It never deletes a running run, nor the newest run of
// any source (which the minimum interval is measured from), nor, from schema
// version 4 on, the finished run of the latest tick its source has served
// (which keeps that tick and the older ones done), nor, with
// opts.KeepLast, any of the KeepLast runs of a source that started last
// (runs that started at the same instant count as one). It skips, without
// waiting, a row another transaction has locked, such as a run finished
// while a transaction fenced on it was still open (see Fence); a later
// prune deletes it. It returns how many runs it deleted; when ctx ends it
// stops between batches and returns the count so far with ctx's error.
//
// Each batch looks at up to PruneBatchSize runs and, for each, reads up to
// KeepLast entries of the index on (source, started_at), so its cost is
// bounded whatever the history's size.
func (s *PostgresStore) PruneRuns(ctx context.Context, opts PruneOptions) (int64, error) {
	if err := checkContext(ctx); err != nil {
		return 0, err
	}
	if err := opts.Validate(); err != nil {
		return 0, err
	}
	// A run is not among its source's n newest when n runs of its source
	// started after it: see the prune statement.
	skip := max(opts.KeepLast, 1) - 1
	ticks, err := s.recordsTicks(ctx)
	if err != nil {
		return 0, s.wrap(ctx, "prune", err)
	}
	prune := withTicks(s.sql.prune, s.sql.pruneTick, ticks)
	var total, after int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("runclaim: prune: %w", err)
		}
		var deleted, picked, last int64
		if err := s.queryRow(ctx, prune, []any{after, opts.OlderThan.Microseconds(), PruneBatchSize, skip}, &deleted, &picked, &last); err != nil {
			return total, s.wrap(ctx, "prune", err)
		}
		total += deleted
		if picked < PruneBatchSize {
			return total, nil
		}
		after = last
	}
}

var (
	//go:embed sql/source_state.sql
	sourceStateSQL string
	//go:embed sql/source_state_one.sql
	sourceStateOneSQL string
	//go:embed sql/source_state_all.sql
	sourceStateAllSQL string
)

// Check tells whether source's newest succeeded run started within maxAge,
// by the database's clock: the answer of a dead man's switch, for a
// service's health endpoint or a monitoring probe ('runclaim check' gives
// the same). It sends one query, which reads at most CheckScanLimit + 4 of
// the source's runs through the history index, however long the history.
// It returns the source's state (SourceStates' row of it), with MaxAge and
// Healthy set: String says why in one line.
//
// A source that never ran, never succeeded, or did not succeed in its
// CheckScanLimit newest runs is not healthy. An error (an invalid source, a
// maxAge that is not positive, an unreachable database, a missing table)
// means Check could not tell.
func (s *PostgresStore) Check(ctx context.Context, source string, maxAge time.Duration) (SourceState, error) {
	if err := checkContext(ctx); err != nil {
		return SourceState{}, err
	}
	if err := ValidateSource(source); err != nil {
		return SourceState{}, err
	}
	if maxAge <= 0 {
		return SourceState{}, fmt.Errorf("runclaim: check: maxAge must be positive, got %v", maxAge)
	}
	states, err := s.sourceStates(ctx, s.sql.sourceStateOne, source)
	if err != nil {
		return SourceState{}, s.wrap(ctx, "check "+quoteForError(source), err)
	}
	st := SourceState{Source: source}
	if len(states) == 1 {
		st = states[0]
	}
	st.MaxAge, st.Healthy = maxAge, !st.Overdue(maxAge)
	return st, nil
}

// SourceStates returns the state of every source in the runs table,
// ordered by source, read in one query at the same database time: for a
// scrape-time collector, or a list of the overdue sources. The query
// visits each source with one probe of the history index and then reads at
// most CheckScanLimit + 4 of its runs, so its cost grows with the number
// of sources, not with the history. With more than MaxSourceStates sources
// it returns an error.
func (s *PostgresStore) SourceStates(ctx context.Context) ([]SourceState, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	states, err := s.sourceStates(ctx, s.sql.sourceStateAll, int64(MaxSourceStates+1))
	if err != nil {
		return nil, s.wrap(ctx, "source states", err)
	}
	if len(states) > MaxSourceStates {
		return nil, fmt.Errorf("runclaim: source states: %w: more than %d sources", errTooManySources, MaxSourceStates)
	}
	return states, nil
}

// sourceStates runs q, a form of sourceStateSQL with first as $1, and
// gathers its rows by source.
func (s *PostgresStore) sourceStates(ctx context.Context, q string, first any) ([]SourceState, error) {
	rows, err := s.db.Query(ctx, q, first, int64(CheckScanLimit))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SourceState
	for rows.Next() {
		var (
			now      time.Time
			source   string
			kind     *string
			id       *int64
			owner    *string
			started  *time.Time
			lease    *time.Time
			status   *string
			hb       *time.Time
			finished *time.Time
			errText  *string
		)
		if err := rows.Scan(&now, &source, &kind, &id, &owner, &started, &lease, &status, &hb, &finished, &errText); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].Source != source {
			out = append(out, SourceState{Source: source, CheckedAt: now})
		}
		st := &out[len(out)-1]
		if kind == nil { // a source without runs: only Check asks for one
			continue
		}
		r := &RunRecord{
			RunInfo: RunInfo{ID: *id, Source: source, Owner: *owner, StartedAt: *started, LeaseUntil: *lease},
			Status:  Status(*status), HeartbeatAt: *hb,
		}
		if finished != nil {
			r.FinishedAt = *finished
		}
		if errText != nil {
			r.Error = *errText
		}
		// A kind may name several (sql/source_state_all.sql): one run
		// that is the newest, the newest finished and the newest
		// succeeded is sent once.
		for k := range strings.SplitSeq(*kind, ",") {
			switch k {
			case "latest":
				st.Latest = r
			case "finished":
				st.LastFinished = r
			case "succeeded":
				st.LastSuccess = r
			case "unread":
				st.SuccessUnread = true
			}
		}
	}
	return out, rows.Err()
}

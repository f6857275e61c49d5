package runclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// AdvisoryKey returns the 64-bit key of the transaction-scoped advisory lock
// that serialises claims of source: FNV-64a over namespace, a NUL byte and
// source. The derivation is fixed across releases so that replicas on
// different versions agree.
func AdvisoryKey(namespace, source string) int64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(namespace); i++ {
		h ^= uint64(namespace[i])
		h *= prime64
	}
	h *= prime64 // the NUL separator: h ^= 0 is a no-op
	for i := 0; i < len(source); i++ {
		h ^= uint64(source[i])
		h *= prime64
	}
	return int64(h)
}

// On a table with the claim function (schema version 3, claimfunc.go) a
// claim is one call of it. On a table without it (version 2: this release
// starting before Migrate has run, or a step undone) the claim is the batch
// below, as the previous release sends it: one pgx.Batch, one network
// write, one round trip, one implicit transaction that ends at the batch's
// Sync.
//
//  1. lockSQL takes the advisory lock, only under READ COMMITTED, and
//     records in a transaction-local setting whether it did. Under another
//     isolation level the snapshot of the re-check would predate the lock,
//     so the statement refuses and reports the level; the store then
//     switches to the explicit form, which wraps the same statements in
//     BEGIN ISOLATION LEVEL READ COMMITTED ... COMMIT. It also bounds how
//     long the later statements may wait for a table lock (claimLockTimeout,
//     or the session's own lock_timeout if that is shorter): a claim waits
//     for nothing but DDL or maintenance on the runs table, and for that
//     only so long.
//  2. expireSQL, a later statement and so a fresh snapshot, marks a running
//     run whose lease has ended as expired, but only when the claim will go
//     on to insert: not when the minimum interval has not passed, so that a
//     skip writes nothing. It is a separate statement so that the unique
//     index on running runs no longer holds the old row when 3 inserts. It
//     skips a row that another transaction has locked (its holder's late
//     finish, an operator's release, a fenced transaction): the claim then
//     reports the source as running instead of waiting.
//  3. claimSQL re-checks under the lock and inserts the run, or returns why
//     not. The minimum interval is the longer of the claimer's and the one
//     recorded with the source's latest run, so an interval binds every
//     later claimer. Every time is clock_timestamp(), the database's clock
//     when the statement runs.
//
// A lost claim updates and inserts nothing, so it assigns no transaction ID
// and its commit flushes no WAL.
const (
	lockSQL = `SELECT pg_catalog.set_config('runclaim.locked',
	CASE WHEN pg_catalog.current_setting('transaction_isolation') = 'read committed'
	     THEN pg_catalog.pg_try_advisory_xact_lock($1::bigint)::text
	     ELSE 'false' END, true)::bool,
	pg_catalog.current_setting('transaction_isolation'),
	pg_catalog.set_config('lock_timeout', CASE
		WHEN pg_catalog.current_setting('lock_timeout')::interval > interval '0'
		 AND pg_catalog.current_setting('lock_timeout')::interval < $2::bigint * interval '1 millisecond'
		THEN pg_catalog.current_setting('lock_timeout')
		ELSE $2::bigint::text END, true)`

	expireSQL = `UPDATE %[1]s SET status = 'expired', finished_at = pg_catalog.clock_timestamp()
WHERE id IN (
	SELECT id FROM %[1]s
	WHERE source = $1 AND status = 'running' AND lease_until <= pg_catalog.clock_timestamp()
	  AND pg_catalog.current_setting('runclaim.locked')::bool
	  AND NOT EXISTS (
		SELECT FROM (SELECT started_at, min_interval FROM %[1]s WHERE source = $1 ORDER BY started_at DESC LIMIT 1) AS last
		WHERE last.started_at + greatest(last.min_interval, $2::bigint * interval '1 microsecond') > pg_catalog.clock_timestamp())
	FOR UPDATE SKIP LOCKED)`

	claimSQL = `WITH st AS MATERIALIZED (
	SELECT pg_catalog.current_setting('runclaim.locked')::bool AS locked, pg_catalog.clock_timestamp() AS now
), cur AS MATERIALIZED (
	SELECT id, owner, started_at, lease_until FROM %[1]s WHERE source = $1 AND status = 'running'
), last AS MATERIALIZED (
	SELECT started_at + greatest(min_interval, $4::bigint * interval '1 microsecond') AS next
	FROM %[1]s WHERE source = $1 ORDER BY started_at DESC LIMIT 1
), ins AS (
	INSERT INTO %[1]s (source, status, owner, started_at, lease_until, heartbeat_at, min_interval)
	SELECT $1, 'running', $2, st.now, st.now + $3::bigint * interval '1 microsecond', st.now, $4::bigint * interval '1 microsecond' FROM st
	WHERE st.locked
	  AND NOT EXISTS (SELECT FROM cur)
	  AND NOT EXISTS (SELECT FROM last WHERE last.next > st.now)
	RETURNING id, started_at, lease_until
)
SELECT st.now, ins.id, ins.started_at, ins.lease_until,
	cur.id, cur.owner, cur.started_at, cur.lease_until, last.next
FROM st LEFT JOIN ins ON true LEFT JOIN cur ON true LEFT JOIN last ON true`

	beginSQL  = `BEGIN ISOLATION LEVEL READ COMMITTED`
	commitSQL = `COMMIT`
)

// claimLockTimeout bounds how long a claim waits for a lock on the runs
// table (DDL, VACUUM FULL, an explicit LOCK TABLE): it then fails with
// SQLSTATE 55P03. It is shorter than claimGrace, so that a claim whose
// caller gave up always ends on the server before the grace does.
const claimLockTimeout = time.Second

// errNeedExplicit says the session's isolation level is not READ COMMITTED,
// so the claim wrote nothing and must be sent in the explicit form.
var errNeedExplicit = errors.New("runclaim: session isolation is not read committed")

// claimResult holds what a claim returns, in either form: the lock
// statement's row and the claim statement's row of the batch, or the
// function's row. The nullable columns scan into pgtype values rather than
// pointers, which spares pgx an allocation per column for the scan plan
// and another per non-NULL value; and one claimResult is one allocation
// where separate scan targets were one each.
type claimResult struct {
	locked    bool   // the claim took the advisory lock
	isolation string // the transaction's isolation level

	now                  pgtype.Timestamptz // the database clock when the claim decided
	insID                pgtype.Int8
	insStarted, insLease pgtype.Timestamptz
	curID                pgtype.Int8
	curOwner             pgtype.Text
	curStarted, curLease pgtype.Timestamptz
	retryAfter           pgtype.Timestamptz

	// The schema version read with the claim, when probe is set.
	probe                     bool
	schemaExists, tableExists bool
	comment                   string

	// What the function form sends and scans into, kept here so that they
	// cost no allocations of their own.
	isolationText        pgtype.Text
	won                  bool
	runID                pgtype.Int8
	runOwner             pgtype.Text
	runStarted, runLease pgtype.Timestamptz
	tick, doneTick       pgtype.Timestamptz // the tick claimed; the latest tick served, when read
	args                 [7]any
	dest                 [10]any
}

// claim runs the claim protocol once, in the implicit form or, with
// explicit, inside BEGIN ISOLATION LEVEL READ COMMITTED ... COMMIT: as one
// call of the claim function when the table has it (schema version 3),
// else as the batch.
func (s *PostgresStore) claim(ctx context.Context, req ClaimRequest, explicit bool) (RunInfo, error) {
	r := &claimResult{}
	var err error
	if !req.Tick.IsZero() || s.schemaVer.useTickFunc() {
		// A tick claim calls the function of ticks whatever the store
		// believes of the schema: on an older table it is missing, and
		// the claim fails with an error that says so.
		err = s.callClaim(ctx, req, explicit, r, true)
		switch {
		case err == nil && !s.schemaVer.useTickFunc():
			s.schemaVer.set(tickFuncVersion)
		case err != nil && pgCode(err) == "42883" && !req.Tick.IsZero():
			s.schemaVer.forget()
			return RunInfo{}, fmt.Errorf("runclaim: claim %s for a tick: the runs table %s is at a schema version older than %d, which ticks need; run Migrate (or apply the Migrations): %w",
				quoteForError(req.Source), s.Table(), tickFuncVersion, err)
		case err != nil && pgCode(err) == "42883": // the table has lost the function of ticks
			s.schemaVer.forget()
			*r = claimResult{}
			err = s.batchClaim(ctx, req, explicit, r)
		}
	} else if s.schemaVer.useFunc() {
		err = s.callClaim(ctx, req, explicit, r, false)
		if err != nil && pgCode(err) == "42883" { // undefined_function: the table has lost its function
			s.schemaVer.forget()
			*r = claimResult{}
			err = s.batchClaim(ctx, req, explicit, r)
		}
	} else {
		err = s.batchClaim(ctx, req, explicit, r)
	}
	if err != nil {
		switch pgCode(err) {
		case "23505": // unique_violation: two running runs, or two runs of a tick
			return RunInfo{}, fmt.Errorf("runclaim: claim %s: a concurrent claim inserted a running run of it, or a run of the same tick, without waiting for this store's advisory lock; "+
				"every store on %s must use the same namespace (WithNamespace; this one uses %q), and nothing else may insert running runs: %w",
				quoteForError(req.Source), s.Table(), s.namespace, err)
		case "42501": // insufficient_privilege
			if s.schemaVer.useFunc() || !req.Tick.IsZero() {
				args := claimFuncArgs
				if s.schemaVer.useTickFunc() || !req.Tick.IsZero() {
					args = tickFuncArgs
				}
				return RunInfo{}, fmt.Errorf("runclaim: claim %s: %w (the role needs EXECUTE on function %s%s as well as SELECT, INSERT and UPDATE on %s; see Least privilege in the README)",
					quoteForError(req.Source), err, s.claimFunc(), args, s.Table())
			}
		}
		return RunInfo{}, s.wrap(ctx, "claim "+quoteForError(req.Source), err)
	}
	if r.probe {
		v := 0
		if r.tableExists {
			v = parseSchemaVersion(r.comment)
		}
		s.schemaVer.set(v)
	}
	return r.outcome(req, explicit)
}

// callClaim sends one call of the claim function: of version 4, with the
// tick (NULL for a plain claim), if ticks, else of version 3.
func (s *PostgresStore) callClaim(ctx context.Context, req ClaimRequest, explicit bool, r *claimResult, ticks bool) error {
	r.args = [7]any{AdvisoryKey(s.namespace, req.Source), req.Source, req.Owner,
		req.Lease.Microseconds(), req.MinInterval.Microseconds(), claimLockTimeout.Milliseconds()}
	r.dest = [10]any{&r.locked, &r.isolationText, &r.now, &r.won, &r.runID, &r.runOwner, &r.runStarted, &r.runLease, &r.retryAfter, &r.doneTick}
	sql, args, dest := s.sql.call, r.args[:6], r.dest[:9]
	if ticks {
		r.tick = pgtype.Timestamptz{Time: req.Tick, Valid: !req.Tick.IsZero()}
		r.args[6] = &r.tick
		sql, args, dest = s.sql.callTick, r.args[:], r.dest[:]
	}
	var err error
	if !explicit {
		err = s.db.QueryRow(ctx, sql, args...).Scan(dest...)
	} else {
		err = s.explicitQueryRow(ctx, sql, args, dest...)
	}
	// The function names the level only when it refuses to claim under it,
	// and returns one run: the one it inserted, or the source's running one.
	r.isolation = "read committed"
	if r.isolationText.Valid {
		r.isolation = r.isolationText.String
	}
	if r.won {
		r.insID, r.insStarted, r.insLease = r.runID, r.runStarted, r.runLease
	} else {
		r.curID, r.curOwner, r.curStarted, r.curLease = r.runID, r.runOwner, r.runStarted, r.runLease
	}
	return err
}

// batchClaim sends the claim as the batch of lockSQL, expireSQL and
// claimSQL, with the schema probe when the store's knowledge of the
// version is missing or stale.
func (s *PostgresStore) batchClaim(ctx context.Context, req ClaimRequest, explicit bool, r *claimResult) error {
	key := AdvisoryKey(s.namespace, req.Source)
	lease, minInterval := req.Lease.Microseconds(), req.MinInterval.Microseconds()
	r.probe = s.schemaVer.stale()

	n := 3
	if explicit {
		n += 3
	}
	if r.probe {
		n++
	}
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, n)}
	if explicit {
		s.queueBegin(b)
	}
	b.Queue(lockSQL, key, claimLockTimeout.Milliseconds())
	b.Queue(s.sql.expire, req.Source, minInterval)
	b.Queue(s.sql.claim, req.Source, req.Owner, lease, minInterval)
	if r.probe {
		b.Queue(schemaStateSQL, s.schema, s.table)
	}
	if explicit {
		b.Queue(commitSQL)
	}

	br := s.db.SendBatch(ctx, b)
	err := func() error {
		if explicit {
			if err := s.readBegin(br); err != nil {
				return err
			}
		}
		// The third column, the lock_timeout set, is not needed: nil skips it.
		if err := br.QueryRow().Scan(&r.locked, &r.isolation, nil); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&r.now, &r.insID, &r.insStarted, &r.insLease, &r.curID, &r.curOwner, &r.curStarted, &r.curLease, &r.retryAfter); err != nil {
			return err
		}
		if r.probe {
			if err := br.QueryRow().Scan(&r.schemaExists, &r.tableExists, &r.comment); err != nil {
				return err
			}
		}
		if explicit {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// outcome turns what a claim returned into its answer. The reasons are
// decided here, in the same order for both forms: a live holder, then too
// soon, then a lapsed holder that could not be expired, then a claim in
// flight.
func (r *claimResult) outcome(req ClaimRequest, explicit bool) (RunInfo, error) {
	if !r.locked && r.isolation != "read committed" {
		if explicit {
			return RunInfo{}, fmt.Errorf("runclaim: claim: transaction isolation is %q inside BEGIN ISOLATION LEVEL READ COMMITTED", r.isolation)
		}
		return RunInfo{}, errNeedExplicit
	}
	tick := NormalTick(req.Tick)
	if r.insID.Valid {
		return RunInfo{ID: r.insID.Int64, Source: req.Source, Owner: req.Owner, StartedAt: r.insStarted.Time, LeaseUntil: r.insLease.Time, Tick: tick}, nil
	}
	nc := &NotClaimedError{Source: req.Source, Reason: ErrAlreadyRunning, Tick: tick}
	tooSoon := r.locked && r.retryAfter.Valid && r.retryAfter.Time.After(r.now.Time)
	tickDone := r.locked && !tick.IsZero() && r.doneTick.Valid && !r.doneTick.Time.Before(tick)
	live := r.curID.Valid && r.curLease.Time.After(r.now.Time)
	switch {
	case tickDone && !live:
		nc.Reason, nc.DoneTick = ErrTickDone, r.doneTick.Time
	case r.curID.Valid && (live || !tooSoon):
		// A live holder; or a lapsed run that the claim did not expire: it
		// was locked by another transaction (a late finish, a release, a
		// fence), or the interval passed between two statements.
		nc.Holder = &RunInfo{ID: r.curID.Int64, Source: req.Source, Owner: r.curOwner.String, StartedAt: r.curStarted.Time, LeaseUntil: r.curLease.Time}
		nc.RetryAfter = r.curLease.Time
	case tooSoon:
		nc.Reason, nc.RetryAfter = ErrTooSoon, r.retryAfter.Time
	case r.locked:
		// Locked, nothing running, not too soon, yet no insert: cannot happen
		// unless the table was changed under us.
		return RunInfo{}, fmt.Errorf("runclaim: claim %s: the claim statement inserted nothing without a reason", quoteForError(req.Source))
	}
	return RunInfo{}, nc
}

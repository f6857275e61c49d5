package runclaim

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"

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
// starting before Migrate has run, or a step undone) the claim is the
// batch of sql/claim_batch.sql, as the previous release sends it: one
// pgx.Batch, one network write, one round trip, one implicit transaction
// that ends at the batch's Sync. Its lock statement takes the advisory
// lock under READ COMMITTED only and bounds the wait for a table lock;
// expire frees the source of a lapsed run, only when the claim will go on;
// claim re-checks under the lock and inserts the run, or returns why not.
// A lost claim updates and inserts nothing, so it assigns no transaction
// ID and its commit flushes no WAL.

// The explicit form's transaction control, around the claim's statements
// and the other one-row statements (see queryRow).
const (
	beginSQL  = `BEGIN ISOLATION LEVEL READ COMMITTED`
	commitSQL = `COMMIT`
)

// boundedPrepare prepares the batch's statements that touch the runs
// table on a connection before the batch's first use there, inside a
// transaction whose lock_timeout is the claim's bound. It is a
// pgx.QueryRewriter queued with the batch's first statement: pgx calls it
// with the connection before it sends anything. Without it, pgx's default
// mode would prepare them in a round trip of its own before the batch, and
// parsing a statement waits for a lock on the table it reads, with no
// bound, before the batch's first statement has set one. In the modes that
// parse each statement in the batch's own transaction, in order (exec and
// simple protocol), there is nothing to do. pgx uses a statement prepared
// under its own SQL as its name in a batch in every other mode.
type boundedPrepare struct {
	stmts []string // the statements to prepare

	mu    sync.RWMutex                        // protects conns
	conns map[weak.Pointer[pgx.Conn]]struct{} // the connections that have them
}

// RewriteQuery implements pgx.QueryRewriter, changing nothing of the query.
func (p *boundedPrepare) RewriteQuery(ctx context.Context, conn *pgx.Conn, sql string, args []any) (string, []any, error) {
	w := weak.Make(conn)
	p.mu.RLock()
	_, done := p.conns[w]
	p.mu.RUnlock()
	if done {
		return sql, args, nil
	}
	switch conn.Config().DefaultQueryExecMode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
	default:
		if err := p.prepare(ctx, conn); err != nil {
			return "", nil, err
		}
	}
	p.mu.Lock()
	if p.conns == nil {
		p.conns = make(map[weak.Pointer[pgx.Conn]]struct{})
	}
	if _, ok := p.conns[w]; !ok {
		p.conns[w] = struct{}{}
		runtime.AddCleanup(conn, p.forget, w)
	}
	p.mu.Unlock()
	return sql, args, nil
}

// forget drops a connection that has been garbage collected.
func (p *boundedPrepare) forget(w weak.Pointer[pgx.Conn]) {
	p.mu.Lock()
	delete(p.conns, w)
	p.mu.Unlock()
}

// prepare prepares p's statements on conn under the claim's lock bound.
// Prepared statements outlive the transaction.
func (p *boundedPrepare) prepare(ctx context.Context, conn *pgx.Conn) (err error) {
	if _, err := conn.Exec(ctx, statements["prepare_begin"]); err != nil {
		return err
	}
	defer func() {
		end := "COMMIT"
		if err != nil {
			end = "ROLLBACK"
		}
		if _, eerr := conn.Exec(ctx, end); err == nil {
			err = eerr
		}
	}()
	for _, q := range p.stmts {
		if _, err := conn.Prepare(ctx, q, q); err != nil {
			return err
		}
	}
	return nil
}

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

	// The schema state read with the claim, when probe is set.
	probe bool
	state schemaState

	// What the function form sends and scans into, kept here so that they
	// cost no allocations of their own.
	isolationText        pgtype.Text
	won                  bool
	runID                pgtype.Int8
	runOwner             pgtype.Text
	runStarted, runLease pgtype.Timestamptz
	args                 [6]any
	dest                 [9]any
}

// claim runs the claim protocol once, in the implicit form or, with
// explicit, inside BEGIN ISOLATION LEVEL READ COMMITTED ... COMMIT: as one
// call of the claim function when the table has it (schema version 3),
// else as the batch.
func (s *PostgresStore) claim(ctx context.Context, req ClaimRequest, explicit bool) (RunInfo, error) {
	r := &claimResult{}
	var err error
	if s.schemaVer.useFunc() {
		err = s.callClaim(ctx, req, explicit, r)
		if err != nil && missingFunc(err) {
			// No function: a table at version 2, or one that lost it (a
			// step undone, under load too; a table moved or restored
			// without it). The call wrote nothing; the batch decides.
			s.schemaVer.noFunc()
			*r = claimResult{}
			err = s.batchClaim(ctx, req, explicit, r)
		}
	} else {
		err = s.batchClaim(ctx, req, explicit, r)
	}
	if err != nil {
		switch pgCode(err) {
		case "23505": // unique_violation: two running runs
			return RunInfo{}, fmt.Errorf("runclaim: claim %s: a concurrent claim inserted a running run of it without waiting for this store's advisory lock; "+
				"every store on %s must use the same namespace (WithNamespace; this one uses %q), and nothing else may insert running runs: %w",
				quoteForError(req.Source), s.Table(), s.namespace, err)
		case "42501": // insufficient_privilege
			if s.schemaVer.useFunc() {
				return RunInfo{}, fmt.Errorf("runclaim: claim %s: %w (the role needs EXECUTE on function %s%s as well as SELECT, INSERT and UPDATE on %s; see Least privilege in the README)",
					quoteForError(req.Source), err, s.claimFunc(), claimFuncArgs, s.Table())
			}
		}
		return RunInfo{}, s.wrap(ctx, "claim "+quoteForError(req.Source), err)
	}
	if r.probe {
		s.schemaVer.set(r.state.version())
	}
	return r.outcome(req, explicit)
}

// callClaim sends one call of the claim function.
func (s *PostgresStore) callClaim(ctx context.Context, req ClaimRequest, explicit bool, r *claimResult) error {
	r.args = [6]any{AdvisoryKey(s.namespace, req.Source), req.Source, req.Owner,
		req.Lease.Microseconds(), req.MinInterval.Microseconds(), claimLockTimeout.Milliseconds()}
	r.dest = [9]any{&r.locked, &r.isolationText, &r.now, &r.won, &r.runID, &r.runOwner, &r.runStarted, &r.runLease, &r.retryAfter}
	var err error
	if !explicit {
		err = s.db.QueryRow(ctx, s.sql.call, r.args[:]...).Scan(r.dest[:]...)
	} else {
		err = s.explicitQueryRow(ctx, s.sql.call, r.args[:], r.dest[:]...)
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

// batchClaim sends the claim as the batch of lock, expire and claim
// (sql/claim_batch.sql), with the schema probe when the store's knowledge of the
// version is missing or stale.
func (s *PostgresStore) batchClaim(ctx context.Context, req ClaimRequest, explicit bool, r *claimResult) error {
	key := AdvisoryKey(s.namespace, req.Source)
	lease, minInterval := req.Lease.Microseconds(), req.MinInterval.Microseconds()
	r.probe = s.schemaVer.stale()

	n := 3
	if explicit {
		n += 2
	}
	if r.probe {
		n++
	}
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, n)}
	if explicit {
		b.Queue(beginSQL, &s.prepared)
		b.Queue(s.sql.lock, key, claimLockTimeout.Milliseconds())
	} else {
		b.Queue(s.sql.lock, &s.prepared, key, claimLockTimeout.Milliseconds())
	}
	b.Queue(s.sql.expire, req.Source, minInterval)
	b.Queue(s.sql.claim, req.Source, req.Owner, lease, minInterval)
	if r.probe {
		b.Queue(schemaStateSQL, s.schemaStateArgs()...)
	}
	if explicit {
		b.Queue(commitSQL)
	}

	br := s.db.SendBatch(ctx, b)
	err := func() error {
		if explicit {
			if _, err := br.Exec(); err != nil {
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
			if err := br.QueryRow().Scan(r.state.dest()...); err != nil {
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
	if r.insID.Valid {
		return RunInfo{ID: r.insID.Int64, Source: req.Source, Owner: req.Owner, StartedAt: r.insStarted.Time, LeaseUntil: r.insLease.Time}, nil
	}
	nc := &NotClaimedError{Source: req.Source, Reason: ErrAlreadyRunning}
	tooSoon := r.locked && r.retryAfter.Valid && r.retryAfter.Time.After(r.now.Time)
	switch {
	case r.curID.Valid && (r.curLease.Time.After(r.now.Time) || !tooSoon):
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

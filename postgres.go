package runclaim

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Querier is what the Postgres store needs of a connection pool.
// *pgxpool.Pool implements it. Pass a pool, not a single connection
// (*pgx.Conn, *pgxpool.Conn) or a transaction, which NewPostgresStore
// refuses: the store runs its own short transactions, relies on none of
// them being inside another, and relies on the pool to drop a connection
// that a failed call left inside a transaction.
type Querier interface {
	// SendBatch sends a claim: one network write, one implicit transaction.
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	// QueryRow runs a heartbeat, a finish or a prune batch.
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	// Query runs the operator commands' reads.
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	// Exec runs Migrate.
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

var _ Querier = (*pgxpool.Pool)(nil)

// A PostgresOption configures a PostgresStore. Options are validated by
// NewPostgresStore.
type PostgresOption func(*PostgresStore) error

// WithTable sets the schema and name of the runs table (DefaultSchema and
// DefaultTable if not set). Both are always quoted, so any valid UTF-8 name
// of up to 63 bytes (55 for the table) without NUL bytes is taken verbatim.
func WithTable(schema, table string) PostgresOption {
	return func(s *PostgresStore) error {
		if err := validateName(schema, 63); err != nil {
			return fmt.Errorf("runclaim: WithTable: schema: %w", err)
		}
		if err := validateName(table, maxTableLen); err != nil {
			return fmt.Errorf("runclaim: WithTable: table: %w", err)
		}
		s.schema, s.table = schema, table
		return nil
	}
}

// WithNamespace sets the namespace mixed into the advisory lock keys
// (DefaultNamespace if not set). Every replica that claims the same sources
// must use the same namespace; services that share a database but not their
// sources should use different ones, so that their claims never contend.
func WithNamespace(ns string) PostgresOption {
	return func(s *PostgresStore) error {
		if err := validateName(ns, 255); err != nil {
			return fmt.Errorf("runclaim: WithNamespace: %w", err)
		}
		s.namespace = ns
		return nil
	}
}

// WithSynchronousCommit sets synchronous_commit for the store's own write
// transactions (claim, heartbeat, finish, the deletion of a claim given up,
// Release and Prune), and for nothing else: the store sends each of them
// inside BEGIN ISOLATION LEVEL READ COMMITTED ... COMMIT with SET LOCAL
// synchronous_commit, in the same single round trip. level is one of the
// server's values: "remote_apply", "on", "remote_write", "local" or "off".
//
// On a primary with synchronous standbys (synchronous_standby_names set),
// "on" or "remote_apply" makes a claim's answer wait until a standby has
// the run, so that a failover to that standby loses no acknowledged claim,
// whatever the cluster's default is (see docs/failover.md). Without
// synchronous standbys, "on" waits only for the local WAL flush. The
// transactions of Fence are the caller's own: set synchronous_commit there.
func WithSynchronousCommit(level string) PostgresOption {
	return func(s *PostgresStore) error {
		switch level {
		case "remote_apply", "on", "remote_write", "local", "off":
		default:
			return fmt.Errorf("runclaim: WithSynchronousCommit: level %s is not one of remote_apply, on, remote_write, local, off", quoteForError(level))
		}
		s.syncCommit = "SET LOCAL synchronous_commit TO " + level
		return nil
	}
}

// PostgresStore is the Store backed by a Postgres table. It keeps no session
// state between transactions, so it works behind PgBouncer in transaction
// pooling mode. It is safe for concurrent use.
type PostgresStore struct {
	db        Querier
	schema    string
	table     string
	namespace string
	// migrateLockWait, when not zero, bounds Migrate's wait for the
	// migration lock in place of migrateLockWait (for tests).
	migrateLockWait time.Duration
	// previousKeyLocks makes the store lock keys as the release before
	// this one did (tests only: a replica of it in a rolling deploy).
	previousKeyLocks bool
	// syncCommit is the SET LOCAL statement of WithSynchronousCommit, or "".
	syncCommit string
	// sql holds the statements of sql/, filled in for the store's table.
	sql struct {
		heartbeat, finish, unclaim, readRun                            string
		heartbeatStop, finishStop, heartbeatManyStop, callReplace      string // schema version 13
		requestStop                                                    string
		unclaimRun, unclaimRunKeys, unclaimTrigger, unclaimManyTrigger string
		call, callMany, callManyKeys                                   string // the claim on the current version
		callPrev, callManyPrev, callManyKeysPrev                       string // on the version before
		unclaimMany, heartbeatMany                                     string // ClaimMany's and HeartbeatMany's
		fenceLock, fenceCheck                                          string
		clock, running, history, releaseLockTimeout, release, prune    string
		runningTick, historyTick, releaseTick, pruneTick               string
		pause, resume, trigger, controls, operatorLockTimeout          string
		sourceStateOne, sourceStateAll                                 string // Check's and SourceStates'
		unclaimStarts                                                  string // claims that name keys
		lockKeys, lockRunKeys                                          string // before starts are deleted
		setLimit, deleteLimit, cooldown, endCooldown, keysState        string // Limiter's, and Keys
		saveState, readState, setState, clearState                     string // states (version 9)
		lockSource                                                     string // SetState's and ClearState's wait for claims in flight
	}
	// schemaVer is what the store knows of its table's schema version.
	schemaVer schemaCache
	// explicit is set once a session is seen whose default isolation level
	// is not READ COMMITTED; from then on claims, heartbeats and finishes
	// use the explicit BEGIN ISOLATION LEVEL READ COMMITTED form.
	explicit atomic.Bool
	// probed is the proof that the database's advisory locks exclude
	// (lock.go), made once.
	probed probeState
}

var (
	_ Store     = (*PostgresStore)(nil)
	_ ManyStore = (*PostgresStore)(nil)
	_ unclaimer = (*PostgresStore)(nil)
)

// NewPostgresStore returns a Store that keeps runs in a Postgres table,
// through db (usually a *pgxpool.Pool, which stays the caller's to close).
// Call Migrate, or apply the Migrations with a migration tool, before the
// first claim. It returns an error, naming the option, if an option is invalid.
func NewPostgresStore(db Querier, opts ...PostgresOption) (*PostgresStore, error) {
	if isNil(db) {
		return nil, errors.New("runclaim: NewPostgresStore: nil pool")
	}
	if _, ok := db.(pgx.Tx); ok {
		// A claim inside the caller's transaction would hold its lock and
		// hide its row until that transaction ends.
		return nil, errors.New("runclaim: NewPostgresStore: got a transaction; pass a pool, such as a *pgxpool.Pool")
	}
	switch db.(type) {
	case interface{ PgConn() *pgconn.PgConn }, interface{ Conn() *pgx.Conn }:
		// One session for everything: a claim that fails in the explicit
		// BEGIN ... COMMIT form would leave it in an aborted transaction for
		// every later call, and concurrent calls would queue on it.
		return nil, errors.New("runclaim: NewPostgresStore: got a single connection; pass a pool, such as a *pgxpool.Pool")
	}
	s := &PostgresStore{db: db, schema: DefaultSchema, table: DefaultTable, namespace: DefaultNamespace}
	s.schemaVer.recheck = schemaRecheck
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("runclaim: NewPostgresStore: nil PostgresOption")
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	s.sql.call = s.statement("call")
	s.sql.callMany = s.statement("call_many")
	s.sql.callManyKeys = s.statement("call_many_keys")
	s.sql.callPrev = s.prevStatement("call")
	s.sql.callManyPrev = s.prevStatement("call_many")
	s.sql.callManyKeysPrev = s.prevStatement("call_many_keys")
	s.sql.unclaimMany = s.statement("unclaim_many")
	s.sql.heartbeatMany = s.statement("heartbeat_many")
	s.sql.heartbeat = s.statement("heartbeat")
	s.sql.finish = s.statement("finish")
	s.sql.finishStop = s.statement("finish_stop")
	s.sql.heartbeatStop = withStopColumn(s.sql.heartbeat, "RETURNING lease_until")
	s.sql.heartbeatManyStop = withStopColumn(s.sql.heartbeatMany, "RETURNING r.id, r.source, r.started_at, r.lease_until")
	s.sql.callReplace = s.statement("call_replace")
	s.sql.requestStop = s.statement("request_stop")
	s.sql.unclaim = s.statement("unclaim")
	s.sql.unclaimRun = s.statement("unclaim_run")
	s.sql.unclaimRunKeys = s.statement("unclaim_run_keys")
	s.sql.unclaimTrigger = s.statement("unclaim_trigger")
	s.sql.unclaimManyTrigger = s.statement("unclaim_many_trigger")
	s.sql.readRun = s.statement("read_run")
	s.sql.fenceLock = s.statement("fence_lock")
	s.sql.fenceCheck = s.statement("fence_check")
	s.sql.clock = s.statement("clock")
	s.sql.running = s.statement("running")
	s.sql.history = s.statement("history")
	s.sql.releaseLockTimeout = s.statement("release_lock_timeout")
	s.sql.release = s.statement("release")
	s.sql.prune = s.statement("prune")
	s.sql.runningTick = s.statement("running_tick")
	s.sql.historyTick = s.statement("history_tick")
	s.sql.releaseTick = s.statement("release_tick")
	s.sql.pruneTick = s.statement("prune_tick")
	s.sql.pause = s.statement("pause")
	s.sql.resume = s.statement("resume")
	s.sql.trigger = s.statement("trigger")
	s.sql.controls = s.statement("controls")
	s.sql.operatorLockTimeout = s.statement("operator_lock_timeout")
	s.sql.unclaimStarts = s.statement("unclaim_starts")
	s.sql.lockKeys = s.statement("lock_keys")
	s.sql.lockRunKeys = s.statement("lock_run_keys")
	s.sql.setLimit = s.statement("set_limit")
	s.sql.deleteLimit = s.statement("delete_limit")
	s.sql.cooldown = s.statement("cooldown")
	s.sql.endCooldown = s.statement("end_cooldown")
	s.sql.keysState = s.statement("keys_state")
	s.sql.saveState = s.statement("save_state")
	s.sql.readState = s.statement("read_state")
	s.sql.lockSource = s.statement("lock_source")
	s.sql.setState = s.statement("set_state")
	s.sql.clearState = s.statement("clear_state")
	s.sql.sourceStateOne = fmt.Sprintf(sourceStateSQL, s.Table(), sourceStateOneSQL)
	s.sql.sourceStateAll = fmt.Sprintf(sourceStateAllSQL, s.Table())
	return s, nil
}

// Table returns the quoted, schema-qualified name of the runs table.
func (s *PostgresStore) Table() string {
	return pgx.Identifier{s.schema, s.table}.Sanitize()
}

// Unclaim takes back a run that a claim has just won (see ManyStore), in
// one statement: it deletes the run's row and the starts it recorded for
// the keys its row names, so that they count against no key's MaxStarts.
// A statement before it, in the same transaction and round trip, takes the
// locks of those keys, as a claim does: deleting a start renumbers the
// key's later ones. A trigger that the claim used up stays used up: the
// row does not record it. Claim and ClaimMany, which know the trigger,
// give it back when their caller gave up.
func (s *PostgresStore) Unclaim(ctx context.Context, run RunInfo) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := validateRunRef(run.ID, run.Source, run.StartedAt); err != nil {
		return err
	}
	if s.schemaVer.version.Load() == 0 {
		if _, err := s.schemaState(ctx); err != nil {
			return s.wrap(ctx, "unclaim run "+strconv.FormatInt(run.ID, 10), err)
		}
	}
	sql := s.sql.unclaimRun
	if s.schemaVer.version.Load() >= keysVersion {
		sql = s.sql.unclaimRunKeys
	}
	args := []any{run.ID, run.Source, run.StartedAt}
	var gone int64
	var err error
	if s.schemaVer.version.Load() >= keySeqVersion {
		// The locks of the run's keys first, in the same transaction,
		// as a claim takes them: the deletion of its starts renumbers
		// the others.
		err = s.batchReadCommitted(ctx, func(b *pgx.Batch) {
			b.Queue(s.sql.lockRunKeys, args...)
			b.Queue(sql, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&gone) })
		})
	} else {
		err = s.queryRow(ctx, sql, args, &gone)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("runclaim: unclaim run %d: %w", run.ID, ErrLeaseLost)
	}
	if err != nil {
		return s.wrap(ctx, "unclaim run "+strconv.FormatInt(run.ID, 10), err)
	}
	return nil
}

// Heartbeat implements Store in one statement.
func (s *PostgresStore) Heartbeat(ctx context.Context, req HeartbeatRequest) (time.Time, error) {
	if err := checkRequest(ctx, req); err != nil {
		return time.Time{}, err
	}
	var until pgtype.Timestamptz // not a time.Time, which pgx would wrap in an allocation
	var stop bool
	err := s.withStop(func(withStop bool) error {
		if withStop {
			return s.queryRow(ctx, s.sql.heartbeatStop, []any{req.ID, req.Source, req.Lease.Microseconds(), req.StartedAt}, &until, &stop)
		}
		return s.queryRow(ctx, s.sql.heartbeat, []any{req.ID, req.Source, req.Lease.Microseconds(), req.StartedAt}, &until)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, fmt.Errorf("runclaim: heartbeat run %d: %w", req.ID, ErrLeaseLost)
	}
	if err != nil {
		return time.Time{}, s.wrap(ctx, "heartbeat run "+strconv.FormatInt(req.ID, 10), err)
	}
	if stop {
		// Asked to stop (Replace): the lease is extended all the same.
		return until.Time, fmt.Errorf("runclaim: heartbeat run %d: %w", req.ID, ErrReplaced)
	}
	return until.Time, nil
}

// Finish implements Store in one statement; two when it raced another
// Finish of the same run (see below).
func (s *PostgresStore) Finish(ctx context.Context, req FinishRequest) error {
	if err := checkRequest(ctx, req); err != nil {
		return err
	}
	var errText *string
	if req.Status == StatusFailed {
		errText = &req.Error
	}
	what := "finish run " + strconv.FormatInt(req.ID, 10)
	// One allocation for all scan targets; pgtype.Text rather than *string
	// spares pgx an allocation per column (see claimDecision).
	var r struct {
		newStatus, oldStatus, oldError pgtype.Text
	}
	err := s.withStop(func(withStop bool) error {
		q := s.sql.finish
		if withStop {
			q = s.sql.finishStop
		}
		return s.queryRow(ctx, q, []any{req.ID, req.Source, string(req.Status), errText, req.StartedAt}, &r.newStatus, &r.oldStatus, &r.oldError)
	})
	if err != nil {
		return s.wrap(ctx, what, err)
	}
	return s.finishAnswer(ctx, req, what, r.newStatus, r.oldStatus, r.oldError)
}

// finishAnswer is what a Finish's row says: the outcome recorded, or why
// not.
func (s *PostgresStore) finishAnswer(ctx context.Context, req FinishRequest, what string, newStatus, oldStatus, oldError pgtype.Text) error {
	switch {
	case newStatus.Valid && Status(newStatus.String) == StatusExpired:
		return fmt.Errorf("runclaim: %s: %w: its lease had ended by the database clock; recorded as expired", what, ErrLeaseLost)
	case newStatus.Valid:
		return nil
	case oldStatus.Valid && Status(oldStatus.String) == StatusRunning:
		// The row was running in the statement's snapshot, yet the UPDATE,
		// which waited for another transaction's lock on it, found it no
		// longer running: another Finish (or a takeover, or a release)
		// committed meanwhile. Read what it committed.
		if err := s.queryRow(ctx, s.sql.readRun, []any{req.ID, req.Source, req.StartedAt}, &oldStatus, &oldError); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return s.wrap(ctx, what, err)
		}
	}
	return finishConflict(req, textPtr(oldStatus), textPtr(oldError))
}

// sendBatch sends the statements queue adds as one batch, one
// transaction: implicit, or, with explicit, inside BEGIN ISOLATION LEVEL
// READ COMMITTED ... COMMIT (with WithSynchronousCommit's SET LOCAL, see
// queueBegin). Each statement's result is read by the callback queue set
// on it (pgx.QueuedQuery), in the order queued; a statement without one is
// only checked for an error.
func (s *PostgresStore) sendBatch(ctx context.Context, explicit bool, queue func(*pgx.Batch)) error {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, 7)}
	if explicit {
		s.queueBegin(b)
	}
	queue(b)
	if explicit {
		b.Queue(commitSQL)
	}
	return s.db.SendBatch(ctx, b).Close()
}

// batchReadCommitted sends the statements that queue adds as sendBatch
// does, in the explicit form under the same rule as queryRow: once the
// store has seen a session whose default isolation is not READ COMMITTED,
// with WithSynchronousCommit, or when the implicit form fails with a
// serialization error.
func (s *PostgresStore) batchReadCommitted(ctx context.Context, queue func(*pgx.Batch)) error {
	explicit := s.useExplicit()
	for {
		err := s.sendBatch(ctx, explicit, queue)
		if explicit || pgCode(err) != "40001" {
			return err
		}
		s.explicit.Store(true)
		explicit = true
	}
}

// queryRow runs a one-row statement and scans its row into dest: as an
// implicit transaction, or, once the store has seen a session whose default
// isolation level is not READ COMMITTED, inside BEGIN ISOLATION LEVEL READ
// COMMITTED ... COMMIT, sent as one batch. Under REPEATABLE READ or
// SERIALIZABLE a statement that meets a row changed by a concurrent
// transaction fails with a serialization error (40001) where READ
// COMMITTED would see the committed row; so such a failure also switches
// the store to the explicit form, and the statement, which wrote nothing,
// is sent again in it.
func (s *PostgresStore) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	if !s.useExplicit() {
		err := s.db.QueryRow(ctx, sql, args...).Scan(dest...)
		if pgCode(err) != "40001" {
			return err
		}
		s.explicit.Store(true)
	}
	return s.explicitQueryRow(ctx, sql, args, dest...)
}

// explicitQueryRow runs a one-row statement inside BEGIN ISOLATION LEVEL
// READ COMMITTED ... COMMIT, sent as one batch, and scans its row into dest.
func (s *PostgresStore) explicitQueryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, 4)}
	s.queueBegin(b)
	b.Queue(sql, args...)
	b.Queue(commitSQL)
	br := s.db.SendBatch(ctx, b)
	err := s.readBegin(br)
	if err == nil {
		err = br.QueryRow().Scan(dest...)
		if err == nil || errors.Is(err, pgx.ErrNoRows) {
			if _, cerr := br.Exec(); cerr != nil {
				err = cerr
			}
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// useExplicit reports whether the store's transactions go inside BEGIN
// ISOLATION LEVEL READ COMMITTED ... COMMIT: once a session's default
// isolation level was seen not to be READ COMMITTED, and always with
// WithSynchronousCommit, whose SET LOCAL needs a transaction block.
func (s *PostgresStore) useExplicit() bool {
	return s.syncCommit != "" || s.explicit.Load()
}

// queueBegin queues the start of an explicit transaction: BEGIN, and the
// SET LOCAL of WithSynchronousCommit if it is set.
func (s *PostgresStore) queueBegin(b *pgx.Batch) {
	b.Queue(beginSQL)
	if s.syncCommit != "" {
		b.Queue(s.syncCommit)
	}
}

// readBegin reads the results of what queueBegin queued.
func (s *PostgresStore) readBegin(br pgx.BatchResults) error {
	if _, err := br.Exec(); err != nil {
		return err
	}
	if s.syncCommit != "" {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

// textPtr returns a pointer to t's string, or nil if t is NULL.
func textPtr(t pgtype.Text) *string {
	if !t.Valid {
		return nil
	}
	return &t.String
}

// finishConflict explains why a Finish changed nothing, given the row's
// status and error before it (nil if there is no such run).
func finishConflict(req FinishRequest, oldStatus, oldError *string) error {
	if oldStatus != nil && Status(*oldStatus) == req.Status && (oldError == nil && req.Error == "" || oldError != nil && *oldError == req.Error) {
		return nil // the same Finish again: its first attempt committed
	}
	if oldStatus != nil && Status(*oldStatus) == StatusReplaced {
		return nil // a replaced run: recorded so whatever its outcome
	}
	if oldStatus != nil && (Status(*oldStatus) == StatusSucceeded || Status(*oldStatus) == StatusFailed) {
		return fmt.Errorf("runclaim: finish run %d: %w as %s", req.ID, ErrFinished, *oldStatus)
	}
	return fmt.Errorf("runclaim: finish run %d: %w", req.ID, ErrLeaseLost)
}

// wrap adds a prefix to a database error. When ctx has ended, the error says
// so, whatever the driver made of the cancellation. An error that a table
// older than this release needs would give says so too.
func (s *PostgresStore) wrap(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("runclaim: %s: %w (%w)", what, ctxErr, err)
	}
	switch pgCode(err) {
	case "42703", "42883": // undefined column, undefined function
		return fmt.Errorf("runclaim: %s: %w (%w)", what, err, errSchemaHint)
	case "42501": // insufficient_privilege
		return fmt.Errorf("runclaim: %s: %w (%s)", what, err, privilegeHint(err))
	case "53200": // out_of_memory: the shared lock table is full
		return fmt.Errorf("runclaim: %s: %w (the server's shared lock table is full: every session shares max_locks_per_transaction × max_connections slots, and a claim holds an advisory lock per source and per key until it commits; raise max_locks_per_transaction, or claim fewer sources at once: see MaxClaimMany)", what, err)
	}
	return fmt.Errorf("runclaim: %s: %w", what, err)
}

// deniedObject matches the server's message of a privilege refused: the
// kind of object and its name.
var deniedObject = regexp.MustCompile(`^permission denied for (schema|table|function|sequence) (.+)$`)

// privilegeHint says which grant the server refused in err (a 42501), by
// the object its message names.
func privilegeHint(err error) string {
	var pgErr *pgconn.PgError
	errors.As(err, &pgErr)
	m := deniedObject.FindStringSubmatch(pgErr.Message)
	switch {
	case m == nil:
		return "the role lacks a privilege: docs/least-privilege.md lists what each call needs"
	case m[1] == "schema":
		return fmt.Sprintf("the role needs USAGE on schema %s, and CREATE on it to run Migrate; or choose a schema it may use with WithTable", m[2])
	case m[1] == "function":
		return fmt.Sprintf("the role needs EXECUTE on function %s", m[2])
	case m[1] == "sequence":
		return fmt.Sprintf("the role needs USAGE on sequence %s", m[2])
	}
	return fmt.Sprintf("the role lacks a privilege on %s %s: docs/least-privilege.md lists what each call needs", m[1], m[2])
}

// pgCode returns the SQLSTATE of the *pgconn.PgError in err's chain, or "".
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// withStopColumn is a heartbeat statement whose RETURNING clause, ret,
// also returns whether the run was asked to stop (schema version 13).
func withStopColumn(q, ret string) string {
	if !strings.Contains(q, ret) {
		panic("runclaim: heartbeat statement without " + ret)
	}
	col := "stop_requested_at"
	if strings.HasPrefix(ret, "RETURNING r.") {
		col = "r." + col
	}
	return strings.Replace(q, ret, ret+", "+col+" IS NOT NULL", 1)
}

// withStop sends a holder's statement in the form of schema version 13,
// which reads a stop request (Replace), or, on a table at the version
// before, which has no such column, in that version's form: send is
// called with true first, unless the store knows the table is at the
// version before, and again with false if the table lacks the column.
func (s *PostgresStore) withStop(send func(withStop bool) error) error {
	if s.schemaVer.previous() {
		return send(false)
	}
	err := send(true)
	if pgCode(err) == "42703" && strings.Contains(err.Error(), "stop_requested_at") {
		return send(false)
	}
	return err
}

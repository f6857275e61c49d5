package runclaim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of the Postgres store options.
const (
	// DefaultSchema is the schema of the runs table unless WithTable sets another.
	DefaultSchema = "public"
	// DefaultTable is the name of the runs table unless WithTable sets another.
	DefaultTable = "runclaim_runs"
	// DefaultNamespace is mixed into every advisory lock key (see
	// AdvisoryKey) unless WithNamespace sets another.
	DefaultNamespace = "runclaim"
	// maxTableLen leaves room for the index name suffixes within
	// Postgres's 63-byte identifier limit.
	maxTableLen = 63 - len("_running")
)

// Querier is what the Postgres store needs of a connection pool.
// *pgxpool.Pool implements it. Pass a pool, not a single connection or a
// transaction: the store runs its own short transactions and relies on
// none of them being inside another.
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

// PostgresStore is the Store backed by a Postgres table. It keeps no session
// state between transactions, so it works behind PgBouncer in transaction
// pooling mode. It is safe for concurrent use.
type PostgresStore struct {
	db        Querier
	schema    string
	table     string
	namespace string
	sql       struct {
		expire, claim, heartbeat, finish, unclaim string
	}
	// explicit is set once a session is seen whose default isolation level
	// is not READ COMMITTED; from then on claims use the explicit form.
	explicit atomic.Bool
}

var _ Store = (*PostgresStore)(nil)

// NewPostgresStore returns a Store that keeps runs in a Postgres table,
// through db (usually a *pgxpool.Pool, which stays the caller's to close).
// Call Migrate, or apply SchemaSQL with a migration tool, before the first
// claim. It returns an error, naming the option, if an option is invalid.
func NewPostgresStore(db Querier, opts ...PostgresOption) (*PostgresStore, error) {
	if isNil(db) {
		return nil, errors.New("runclaim: NewPostgresStore: nil pool")
	}
	if _, ok := db.(pgx.Tx); ok {
		// A claim inside the caller's transaction would hold its lock and
		// hide its row until that transaction ends.
		return nil, errors.New("runclaim: NewPostgresStore: got a transaction; pass a pool, such as a *pgxpool.Pool")
	}
	s := &PostgresStore{db: db, schema: DefaultSchema, table: DefaultTable, namespace: DefaultNamespace}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("runclaim: NewPostgresStore: nil PostgresOption")
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	t := s.Table()
	s.sql.expire = fmt.Sprintf(expireSQL, t)
	s.sql.claim = fmt.Sprintf(claimSQL, t)
	s.sql.heartbeat = fmt.Sprintf(heartbeatSQL, t)
	s.sql.finish = fmt.Sprintf(finishSQL, t)
	s.sql.unclaim = fmt.Sprintf(unclaimSQL, t)
	return s, nil
}

// Table returns the quoted, schema-qualified name of the runs table.
func (s *PostgresStore) Table() string {
	return pgx.Identifier{s.schema, s.table}.Sanitize()
}

// SchemaSQL returns the idempotent DDL that Migrate runs: the runs table and
// its indexes. Users of goose, atlas or golang-migrate can apply it with
// their tool instead of calling Migrate.
func (s *PostgresStore) SchemaSQL() string {
	if s.schema == DefaultSchema {
		return s.tableSQL()
	}
	return fmt.Sprintf("CREATE SCHEMA IF NOT EXISTS %s;\n", pgx.Identifier{s.schema}.Sanitize()) + s.tableSQL()
}

// tableSQL is SchemaSQL without the CREATE SCHEMA statement.
func (s *PostgresStore) tableSQL() string {
	t := s.Table()
	running := pgx.Identifier{s.table + "_running"}.Sanitize()
	history := pgx.Identifier{s.table + "_history"}.Sanitize()
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	source       text NOT NULL,
	status       text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'expired', 'released')),
	owner        text NOT NULL,
	started_at   timestamptz NOT NULL,
	lease_until  timestamptz NOT NULL,
	heartbeat_at timestamptz NOT NULL,
	finished_at  timestamptz,
	error        text
);
CREATE UNIQUE INDEX IF NOT EXISTS %s ON %s (source) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS %s ON %s (source, started_at DESC);
`, t, running, t, history, t)
}

// migrateKey is the advisory lock Migrate holds so that replicas migrating
// at once do not race on the catalog.
var migrateKey = AdvisoryKey("runclaim.migrate", "")

// Migrate creates the runs table and its indexes if they do not exist. It is
// idempotent and safe to call from every replica at once: callers queue on a
// transaction-scoped advisory lock. ctx bounds the whole migration.
//
// It sends CREATE SCHEMA only when the schema is missing, so a role that
// owns (or may create in) an existing schema needs no CREATE privilege on
// the database; and it sends the lock and the DDL as one multi-statement
// query, one implicit transaction that never sits idle between round trips.
func (s *PostgresStore) Migrate(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	ddl := s.SchemaSQL()
	if s.schema != DefaultSchema {
		var exists bool
		err := s.db.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1)", s.schema).Scan(&exists)
		if err != nil {
			return s.wrap(ctx, "migrate", err)
		}
		if exists {
			ddl = s.tableSQL()
		}
	}
	// No arguments: pgx sends it with the simple protocol, as one
	// transaction, whatever the pool's query mode.
	if _, err := s.db.Exec(ctx, fmt.Sprintf("SELECT pg_catalog.pg_advisory_xact_lock(%d);\n%s", migrateKey, ddl)); err != nil {
		return s.wrap(ctx, "migrate", err)
	}
	return nil
}

// Claim implements Store. It sends the whole claim as one batch: one round
// trip once pgx has prepared its statements on the connection.
func (s *PostgresStore) Claim(ctx context.Context, req ClaimRequest) (RunInfo, error) {
	if err := checkContext(ctx); err != nil {
		return RunInfo{}, err
	}
	if err := req.Validate(); err != nil {
		return RunInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return RunInfo{}, fmt.Errorf("runclaim: claim %s: %w", quoteForError(req.Source), err)
	}
	// Once sent, a claim commits at the server whether or not its answer is
	// read. Were it abandoned when ctx ends, a run won that way would hold
	// the source for a whole lease with nobody to run it. So the claim runs
	// on a context that ctx's end does not cancel until claimGrace later,
	// and a run won after ctx ended is deleted again: the claim then returns
	// ctx's error and, as any failed claim, leaves no row (G8).
	cctx := ctx
	if ctx.Done() != nil { // a context that can end
		var cancel context.CancelFunc
		cctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(ctx, func() { time.AfterFunc(claimGrace, cancel) })
		defer stop()
	}

	explicit := s.explicit.Load()
	info, err := s.claim(cctx, req, explicit)
	if err == errNeedExplicit {
		s.explicit.Store(true)
		info, err = s.claim(cctx, req, true)
	}
	what := "claim " + quoteForError(req.Source)
	switch ctxErr := ctx.Err(); {
	case ctxErr == nil:
		return info, err
	case err == nil:
		if _, derr := s.db.Exec(cctx, s.sql.unclaim, info.ID); derr != nil {
			return RunInfo{}, fmt.Errorf("runclaim: %s: %w; and run %d, won meanwhile, could not be deleted: %w", what, ctxErr, info.ID, derr)
		}
		return RunInfo{}, fmt.Errorf("runclaim: %s: %w", what, ctxErr)
	case errors.Is(err, ctxErr):
		return info, err
	default:
		return RunInfo{}, fmt.Errorf("runclaim: %s: %w (%w)", what, ctxErr, err)
	}
}

// claimGrace is how long a claim already under way may go on after its
// context ends, to learn whether it won (see Claim).
const claimGrace = 5 * time.Second

// unclaimSQL deletes a run its claimer won after giving up on the claim.
const unclaimSQL = `DELETE FROM %[1]s WHERE id = $1 AND status = 'running'`

// heartbeatSQL reads the clock once, so that lease_until - heartbeat_at is
// exactly the lease.
const heartbeatSQL = `UPDATE %[1]s
SET lease_until = c.now + $2::bigint * interval '1 microsecond', heartbeat_at = c.now
FROM (SELECT pg_catalog.clock_timestamp() AS now) AS c
WHERE id = $1 AND status = 'running'
RETURNING lease_until`

// Heartbeat implements Store in one statement.
func (s *PostgresStore) Heartbeat(ctx context.Context, req HeartbeatRequest) (time.Time, error) {
	if err := checkContext(ctx); err != nil {
		return time.Time{}, err
	}
	if err := req.Validate(); err != nil {
		return time.Time{}, err
	}
	var until pgtype.Timestamptz // not a time.Time, which pgx would wrap in an allocation
	err := s.db.QueryRow(ctx, s.sql.heartbeat, req.ID, req.Lease.Microseconds()).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, fmt.Errorf("runclaim: heartbeat run %d: %w", req.ID, ErrLeaseLost)
	}
	if err != nil {
		return time.Time{}, s.wrap(ctx, "heartbeat run "+strconv.FormatInt(req.ID, 10), err)
	}
	return until.Time, nil
}

// finishSQL updates a running run and reports the row as it was before, so
// that a repeated Finish can be told from a lost run in one statement.
const finishSQL = `WITH old AS (
	SELECT status, error FROM %[1]s WHERE id = $1
), upd AS (
	UPDATE %[1]s SET status = $2, error = $3, finished_at = pg_catalog.clock_timestamp()
	WHERE id = $1 AND status = 'running'
	RETURNING 1
)
SELECT (SELECT count(*) FROM upd), old.status, old.error
FROM (SELECT) AS one LEFT JOIN old ON true`

// Finish implements Store in one statement.
func (s *PostgresStore) Finish(ctx context.Context, req FinishRequest) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	var errText *string
	if req.Status == StatusFailed {
		errText = &req.Error
	}
	// One allocation for all three scan targets; pgtype.Text rather than
	// *string spares pgx an allocation per column (see claimResult).
	var r struct {
		updated             int64
		oldStatus, oldError pgtype.Text
	}
	err := s.db.QueryRow(ctx, s.sql.finish, req.ID, string(req.Status), errText).Scan(&r.updated, &r.oldStatus, &r.oldError)
	if err != nil {
		return s.wrap(ctx, "finish run "+strconv.FormatInt(req.ID, 10), err)
	}
	if r.updated == 1 {
		return nil
	}
	return finishConflict(req, textPtr(r.oldStatus), textPtr(r.oldError))
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
	if oldStatus != nil && (Status(*oldStatus) == StatusSucceeded || Status(*oldStatus) == StatusFailed) {
		return fmt.Errorf("runclaim: finish run %d: %w as %s", req.ID, ErrFinished, *oldStatus)
	}
	return fmt.Errorf("runclaim: finish run %d: %w", req.ID, ErrLeaseLost)
}

// wrap adds a prefix to a database error. When ctx has ended, the error says
// so, whatever the driver made of the cancellation.
func (s *PostgresStore) wrap(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("runclaim: %s: %w (%w)", what, ctxErr, err)
	}
	return fmt.Errorf("runclaim: %s: %w", what, err)
}

// quoteForError quotes a source for an error message, cut to 64 bytes.
func quoteForError(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}

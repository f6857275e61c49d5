package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// This file tests the Postgres store itself (Migrate, table names, Finish,
// database errors) and holds the helpers the other database tests share.

// ---------------------------------------------------------------------------
// Helpers

// migratedStore returns a store on pool whose table has been migrated.
var migratedStore = sharedtest.MigratedStore

// migratedDB returns a database of the test's own whose default table is
// migrated: a copy of one migrated once (pgtest.Template), for a third of
// what migrating it costs the server.
var migratedDB = sharedtest.MigratedDB

// storeOn returns a store on pool, whose table is migrated already.
var storeOn = sharedtest.Store

// newClaimer returns a Claimer on store or fails the test.
var newClaimer = sharedtest.NewClaimer

// sameReason makes cmp compare NotClaimedError.Reason by identity: it is one
// of the sentinels.
var sameReason = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Reason" },
	cmp.Comparer(func(a, b error) bool { return a == b }))

// runRow is one row of the runs table.
type runRow struct {
	ID          int64
	Source      string
	Status      string
	Owner       string
	StartedAt   time.Time
	LeaseUntil  time.Time
	HeartbeatAt time.Time
	FinishedAt  *time.Time
	Error       *string
}

// loadRun reads run id from table.
func loadRun(t *testing.T, pool *pgxpool.Pool, table string, id int64) runRow {
	t.Helper()
	var r runRow
	err := pool.QueryRow(t.Context(), `SELECT id, source, status, owner, started_at, lease_until, heartbeat_at, finished_at, error
FROM `+table+` WHERE id = $1`, id).Scan(&r.ID, &r.Source, &r.Status, &r.Owner, &r.StartedAt, &r.LeaseUntil, &r.HeartbeatAt, &r.FinishedAt, &r.Error)
	if err != nil {
		t.Fatalf("load run %d: %v", id, err)
	}
	return r
}

// info is the RunInfo that a row describes.
func (r runRow) info() runclaim.RunInfo {
	return runclaim.RunInfo{ID: r.ID, Source: r.Source, Owner: r.Owner, StartedAt: r.StartedAt, LeaseUntil: r.LeaseUntil}
}

// runInfo is the RunInfo of a claimed run.
func runInfo(r *runclaim.Run) runclaim.RunInfo {
	return runclaim.RunInfo{ID: r.ID, Source: r.Source, Owner: r.Owner, StartedAt: r.StartedAt, LeaseUntil: r.LeaseUntil}
}

// tableState is what a claim that writes nothing must leave unchanged.
type tableState struct {
	Rows    int64
	MaxID   int64
	Running int64
}

func readState(t *testing.T, pool *pgxpool.Pool, table string) tableState {
	t.Helper()
	var s tableState
	err := pool.QueryRow(t.Context(), `SELECT count(*), coalesce(max(id), 0), count(*) FILTER (WHERE status = 'running') FROM `+table).
		Scan(&s.Rows, &s.MaxID, &s.Running)
	if err != nil {
		t.Fatalf("read table state: %v", err)
	}
	return s
}

// advisoryLocks counts the advisory locks held or awaited in pool's
// database, by any session.
func advisoryLocks(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_catalog.pg_locks
WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())`).Scan(&n)
	if err != nil {
		t.Fatalf("count advisory locks: %v", err)
	}
	return n
}

// dbNow reads the database clock.
func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(t.Context(), "SELECT pg_catalog.clock_timestamp()").Scan(&now); err != nil {
		t.Fatalf("read the database clock: %v", err)
	}
	return now
}

// alterDatabase sets a default for new sessions of db's database. Pools
// opened afterwards see it; existing connections do not.
func alterDatabase(t *testing.T, db *pgtest.DB, setting, value string) {
	t.Helper()
	sql := fmt.Sprintf("ALTER DATABASE %s SET %s = '%s'", pgx.Identifier{db.Name}.Sanitize(), setting, value)
	if _, err := db.Pool.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// poolWithIsolation sets the database's default transaction isolation to
// level and returns a new pool whose sessions have it, checked with SHOW.
func poolWithIsolation(t *testing.T, db *pgtest.DB, level string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	alterDatabase(t, db, "default_transaction_isolation", level)
	pool := db.NewPool(t, configure)
	var got string
	if err := pool.QueryRow(t.Context(), "SHOW transaction_isolation").Scan(&got); err != nil {
		t.Fatalf("SHOW transaction_isolation: %v", err)
	}
	if got != level {
		t.Fatalf("default transaction isolation of a new session is %q, want %q", got, level)
	}
	return pool
}

// waitUntil calls cond every interval until it returns true, and fails the
// test if that takes longer than timeout.
func waitUntil(t *testing.T, timeout, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = sharedtest.Scale(t, timeout) // a bound, not an assertion
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

// countingPool opens a pool on db that counts its wire traffic, without TLS
// (so that a write is one protocol write) and without the pool's liveness
// pings (so that only the library's own traffic is counted).
func countingPool(t *testing.T, db *pgtest.DB, maxConns int32) (*pgxpool.Pool, *sharedtest.Wire) {
	t.Helper()
	w := &sharedtest.Wire{}
	pool := db.NewPool(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = maxConns
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
		cfg.ConnConfig.TLSConfig = nil
		cfg.ConnConfig.Fallbacks = nil
		cfg.ConnConfig.DialFunc = w.Dial
	})
	return pool, w
}

// sqlRecorder is a pgx tracer that records the SQL text a pool sends: each
// batch as the list of its statements, and each single query.
type sqlRecorder struct {
	mu      sync.Mutex // protects the fields below
	batches [][]string
	queries []string
}

func (r *sqlRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.queries = append(r.queries, d.SQL)
	r.mu.Unlock()
	return ctx
}

func (r *sqlRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *sqlRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var stmts []string
	for _, q := range d.Batch.QueuedQueries {
		stmts = append(stmts, q.SQL)
	}
	r.mu.Lock()
	r.batches = append(r.batches, stmts)
	r.mu.Unlock()
	return ctx
}

func (r *sqlRecorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *sqlRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// take returns what was recorded since the last call and forgets it.
func (r *sqlRecorder) take() (batches [][]string, queries []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	batches, queries = r.batches, r.queries
	r.batches, r.queries = nil, nil
	return batches, queries
}

// recordingPool opens a pool on db whose SQL is recorded.
func recordingPool(t *testing.T, db *pgtest.DB) (*pgxpool.Pool, *sqlRecorder) {
	t.Helper()
	rec := &sqlRecorder{}
	pool := db.NewPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = rec })
	return pool, rec
}

// pgCode returns the SQLSTATE of the *pgconn.PgError in err's chain, or "".
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// checkRealError fails the test unless err is a real failure: not nil, not
// a skip, not a lost lease, and prefixed as the library's error for what.
func checkRealError(t *testing.T, err error, prefix string) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("got no error, want a %q error", prefix)
	case errors.Is(err, runclaim.ErrNotClaimed):
		t.Errorf("a database failure is reported as a skip: %v", err)
	case errors.Is(err, runclaim.ErrLeaseLost):
		t.Errorf("a database failure is reported as a lost lease: %v", err)
	case errors.Is(err, runclaim.ErrFinished):
		t.Errorf("a database failure is reported as a finished run: %v", err)
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("error %q does not start with %q", err, prefix)
	}
}

// ---------------------------------------------------------------------------
// Migrate and the schema

// TestMigrateConcurrent: 8 replicas migrating an empty database at once all
// succeed (they queue on Migrate's advisory lock), the result has the
// columns and indexes docs/schema.md lists, and Migrate
// and SchemaSQL are idempotent afterwards.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		schema, table string
		opts          []runclaim.PostgresOption
	}{
		{name: "default", schema: runclaim.DefaultSchema, table: runclaim.DefaultTable},
		{name: "quoted", schema: "My Schema", table: `runs "x"; DROP TABLE y--`,
			opts: []runclaim.PostgresOption{runclaim.WithTable("My Schema", `runs "x"; DROP TABLE y--`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.New(t)
			pool := db.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 10 })

			const replicas = 8
			start := make(chan struct{})
			errs := make(chan error, replicas)
			var wg sync.WaitGroup
			for range replicas {
				s, err := runclaim.NewPostgresStore(pool, tc.opts...)
				if err != nil {
					t.Fatalf("NewPostgresStore: %v", err)
				}
				wg.Go(func() {
					<-start
					errs <- s.Migrate(ctx)
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("concurrent Migrate: %v", err)
				}
			}

			store, err := runclaim.NewPostgresStore(pool, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			before := describeSchema(t, pool, tc.schema, tc.table)
			if diff := cmp.Diff(wantSchema(tc.table), before); diff != "" {
				t.Errorf("schema after Migrate (-want +got):\n%s", diff)
			}

			// Idempotent: Migrate again, and apply SchemaSQL as a migration
			// tool would, twice.
			if err := store.Migrate(ctx); err != nil {
				t.Fatalf("second Migrate: %v", err)
			}
			for range 2 {
				if _, err := pool.Exec(ctx, store.SchemaSQL()); err != nil {
					t.Fatalf("apply SchemaSQL again: %v", err)
				}
			}
			if diff := cmp.Diff(before, describeSchema(t, pool, tc.schema, tc.table)); diff != "" {
				t.Errorf("schema changed by a repeated migration (-first +again):\n%s", diff)
			}
		})
	}
}

// schemaDesc describes a runs table as the catalog sees it.
type schemaDesc struct {
	Columns   []columnDesc
	Indexes   []string // index definitions with the index name cut out
	Names     []string // index names
	Functions []string // the schema's functions: name(argument types)
}

type columnDesc struct {
	Name     string
	Type     string
	Nullable bool
	Identity string // "ALWAYS" for a GENERATED ALWAYS identity
}

func describeSchema(t *testing.T, pool *pgxpool.Pool, schema, table string) schemaDesc {
	t.Helper()
	ctx := t.Context()
	var d schemaDesc
	rows, err := pool.Query(ctx, `SELECT column_name, data_type, is_nullable = 'YES', coalesce(identity_generation, '')
FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, schema, table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c columnDesc
		if err := rows.Scan(&c.Name, &c.Type, &c.Nullable, &c.Identity); err != nil {
			t.Fatal(err)
		}
		d.Columns = append(d.Columns, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = pool.Query(ctx, `SELECT indexname, indexdef FROM pg_catalog.pg_indexes WHERE schemaname = $1 AND tablename = $2 ORDER BY indexdef`, schema, table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		d.Names = append(d.Names, name)
		// "CREATE [UNIQUE] INDEX <name> ON <table> USING ..." -> without name and table.
		on := strings.Index(def, " ON ")
		using := strings.Index(def, " USING ")
		idx := strings.Index(def, "INDEX ")
		if on < 0 || using < 0 || idx < 0 {
			t.Fatalf("unexpected index definition %q", def)
		}
		d.Indexes = append(d.Indexes, def[:idx+len("INDEX")]+def[using:])
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(d.Indexes)
	slices.Sort(d.Names)
	rows, err = pool.Query(ctx, `SELECT p.proname || '(' || pg_catalog.oidvectortypes(p.proargtypes) || ')'
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	if d.Functions, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	return d
}

// wantSchema is the table docs/schema.md lists.
func wantSchema(table string) schemaDesc {
	return schemaDesc{
		Columns: []columnDesc{
			{Name: "id", Type: "bigint", Identity: "ALWAYS"},
			{Name: "source", Type: "text"},
			{Name: "status", Type: "text"},
			{Name: "owner", Type: "text"},
			{Name: "started_at", Type: "timestamp with time zone"},
			{Name: "lease_until", Type: "timestamp with time zone"},
			{Name: "heartbeat_at", Type: "timestamp with time zone"},
			{Name: "finished_at", Type: "timestamp with time zone", Nullable: true},
			{Name: "error", Type: "text", Nullable: true},
			{Name: "min_interval", Type: "interval"},
			{Name: "tick", Type: "timestamp with time zone", Nullable: true},
			{Name: "keys", Type: "ARRAY", Nullable: true},
			{Name: "stop_requested_at", Type: "timestamp with time zone", Nullable: true},
			{Name: "replaced_by", Type: "text", Nullable: true},
		},
		Indexes: []string{
			"CREATE INDEX USING btree (keys) WHERE ((status = 'running'::text) AND (cardinality(keys) = 1))",
			"CREATE INDEX USING btree (source, started_at DESC)",
			"CREATE INDEX USING btree (source, tick DESC) WHERE ((tick IS NOT NULL) AND (status = 'replaced'::text))",
			"CREATE INDEX USING gin (keys) WITH (fastupdate=off) WHERE ((status = 'running'::text) AND (cardinality(keys) > 1))",
			"CREATE UNIQUE INDEX USING btree (id)",
			"CREATE UNIQUE INDEX USING btree (source) WHERE (status = 'running'::text)",
			"CREATE UNIQUE INDEX USING btree (source, tick DESC) WHERE ((tick IS NOT NULL) AND (status = ANY (ARRAY['running'::text, 'succeeded'::text, 'failed'::text])))",
		},
		Names: []string{table + "_history", table + "_keyed", table + "_keyset", table + "_pkey", table + "_replcd", table + "_running", table + "_tick"},
		Functions: []string{
			table + "_claim(bigint, text, text, bigint, bigint, bigint)",
			table + "_claim(bigint, text, text, bigint, bigint, bigint, timestamp with time zone)",
			table + "_claim(bigint, text, text, bigint, bigint, bigint, timestamp with time zone, text[], bigint[], boolean)",
			table + "_claim(bigint, text, text, bigint, bigint, bigint, timestamp with time zone, text[], bigint[], text[], integer[])",
			table + "_claim11(bigint, text, text, bigint, bigint, bigint, timestamp with time zone, text[], bigint[], boolean, text[], integer[])",
			table + "_claim12(bigint, text, text, bigint, bigint, bigint, timestamp with time zone, text[], bigint[], boolean, text[], integer[])",
			table + "_claim13(bigint, text, text, bigint, bigint, bigint, timestamp with time zone, text[], bigint[], boolean, text[], integer[], text)",
			table + "_keylock(text)",
			table + "_number()",
			table + "_renum()",
			table + "_top(text)",
		},
	}
}

// TestQuotedTableName: a schema and table name that need quoting (and would
// inject SQL if they were not quoted) work end to end, and the table exists
// under exactly that name.
func TestQuotedTableName(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	const schema, table = "My Schema", `runs "x"; DROP TABLE y--`
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE y (v int)"); err != nil {
		t.Fatal(err)
	}
	store := migratedStore(t, db.Pool, runclaim.WithTable(schema, table))
	if got, want := store.Table(), `"My Schema"."runs ""x""; DROP TABLE y--"`; got != want {
		t.Errorf("Table() = %s, want %s", got, want)
	}

	var n int
	err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
WHERE ns.nspname = $1 AND c.relname = $2 AND c.relkind = 'r'`, schema, table).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("table %q.%q in pg_class: count %d, err %v", schema, table, n, err)
	}

	a := newClaimer(t, store, runclaim.WithOwner("a"))
	b := newClaimer(t, store, runclaim.WithOwner("b"))
	run, err := a.Claim(ctx, "src")
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if _, err := b.Claim(ctx, "src"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Errorf("second Claim: %v, want ErrAlreadyRunning", err)
	}
	if err := run.Heartbeat(ctx); err != nil {
		t.Errorf("Heartbeat: %v", err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Errorf("Finish: %v", err)
	}
	if got := loadRun(t, db.Pool, store.Table(), run.ID); got.Status != "succeeded" || got.Owner != "a" {
		t.Errorf("row after Finish: %+v", got)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM y").Scan(&n); err != nil {
		t.Errorf("table y is gone: %v", err)
	}
}

// TestTableNameLimits: the longest table name accepted still gives both
// indexes and the claim function their full names (Postgres would silently
// cut an identifier over 63 bytes), and invalid names are refused with an
// error naming WithTable.
func TestTableNameLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		schema, table string
	}{
		{"empty table", "public", ""},
		{"empty schema", "", "runs"},
		{"NUL in table", "public", "ru\x00ns"},
		{"NUL in schema", "pub\x00lic", "runs"},
		{"100-byte table", "public", strings.Repeat("t", 100)},
		{"56-byte table", "public", strings.Repeat("t", 56)},
		{"64-byte schema", strings.Repeat("s", 64), "runs"},
		{"invalid UTF-8", "public", "runs\xff"},
	} {
		_, err := runclaim.NewPostgresStore(&pgxpool.Pool{}, runclaim.WithTable(tc.schema, tc.table))
		if err == nil || !strings.Contains(err.Error(), "WithTable") {
			t.Errorf("%s: NewPostgresStore error %v, want one naming WithTable", tc.name, err)
		}
	}

	db := pgtest.New(t)
	long := strings.Repeat("é", 27) + "x" // 55 bytes
	store := migratedStore(t, db.Pool, runclaim.WithTable("public", long))
	got := describeSchema(t, db.Pool, "public", long)
	if diff := cmp.Diff(wantSchema(long).Names, got.Names); diff != "" {
		t.Errorf("index names of a 55-byte table (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSchema(long).Functions, got.Functions); diff != "" {
		t.Errorf("the claim function of a 55-byte table (-want +got):\n%s", diff)
	}
	if runclaim.ClaimSchema(store) != runclaim.LatestSchemaVersion {
		t.Errorf("the store claims by version %d, want %d: the function", runclaim.ClaimSchema(store), runclaim.LatestSchemaVersion)
	}
	run, err := newClaimer(t, store).Claim(t.Context(), "src")
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if err := run.Finish(t.Context(), nil); err != nil {
		t.Fatalf("Finish: %v", err)
	}
}

// TestStoreOptionErrors: other invalid store options are refused, naming
// the option.
func TestStoreOptionErrors(t *testing.T) {
	t.Parallel()
	pool := &pgxpool.Pool{} // never used: the options fail first
	for _, tc := range []struct {
		name string
		db   runclaim.Querier
		opts []runclaim.PostgresOption
		want string
	}{
		{"nil pool", nil, nil, "nil pool"},
		{"typed nil pool", (*pgxpool.Pool)(nil), nil, "nil pool"},
		{"nil option", pool, []runclaim.PostgresOption{nil}, "nil PostgresOption"},
		{"empty namespace", pool, []runclaim.PostgresOption{runclaim.WithNamespace("")}, "WithNamespace"},
		{"NUL namespace", pool, []runclaim.PostgresOption{runclaim.WithNamespace("a\x00b")}, "WithNamespace"},
		{"empty synchronous_commit", pool, []runclaim.PostgresOption{runclaim.WithSynchronousCommit("")}, "WithSynchronousCommit"},
		{"unknown synchronous_commit", pool, []runclaim.PostgresOption{runclaim.WithSynchronousCommit("remote")}, "WithSynchronousCommit"},
		{"upper-case synchronous_commit", pool, []runclaim.PostgresOption{runclaim.WithSynchronousCommit("ON")}, "WithSynchronousCommit"},
		{"injected synchronous_commit", pool, []runclaim.PostgresOption{runclaim.WithSynchronousCommit("on; DROP TABLE x")}, "WithSynchronousCommit"},
	} {
		s, err := runclaim.NewPostgresStore(tc.db, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || s != nil {
			t.Errorf("%s: NewPostgresStore = %v, %v; want nil and an error containing %q", tc.name, s, err, tc.want)
		}
	}
}

// ---------------------------------------------------------------------------
// Finish at the store level

// TestStoreFinishIdempotent: repeating a Finish with the same outcome
// returns nil and changes nothing; another outcome returns ErrFinished; a
// run that is gone or was expired returns ErrLeaseLost.
func TestStoreFinishIdempotent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	claim := func(source string) runclaim.RunInfo {
		t.Helper()
		info, err := store.Claim(ctx, runclaim.ClaimRequest{Source: source, Owner: "o", Lease: time.Minute})
		if err != nil {
			t.Fatalf("Claim %s: %v", source, err)
		}
		return info
	}

	ok := claim("ok")
	succeeded := runclaim.FinishRequest{ID: ok.ID, Source: ok.Source, StartedAt: ok.StartedAt, Status: runclaim.StatusSucceeded}
	if err := store.Finish(ctx, succeeded); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	row := loadRun(t, db.Pool, store.Table(), ok.ID)
	if err := store.Finish(ctx, succeeded); err != nil {
		t.Errorf("repeated Finish, same outcome: %v, want nil", err)
	}
	err := store.Finish(ctx, runclaim.FinishRequest{ID: ok.ID, Source: ok.Source, StartedAt: ok.StartedAt, Status: runclaim.StatusFailed, Error: "boom"})
	if !errors.Is(err, runclaim.ErrFinished) {
		t.Errorf("Finish as failed after succeeded: %v, want ErrFinished", err)
	}
	if diff := cmp.Diff(row, loadRun(t, db.Pool, store.Table(), ok.ID)); diff != "" {
		t.Errorf("row changed by repeated Finish calls (-before +after):\n%s", diff)
	}

	bad := claim("bad")
	failed := runclaim.FinishRequest{ID: bad.ID, Source: bad.Source, StartedAt: bad.StartedAt, Status: runclaim.StatusFailed, Error: "boom"}
	if err := store.Finish(ctx, failed); err != nil {
		t.Fatalf("Finish failed: %v", err)
	}
	row = loadRun(t, db.Pool, store.Table(), bad.ID)
	if row.Status != "failed" || row.Error == nil || *row.Error != "boom" || row.FinishedAt == nil {
		t.Errorf("failed row: %+v", row)
	}
	if err := store.Finish(ctx, failed); err != nil {
		t.Errorf("repeated failed Finish, same text: %v, want nil", err)
	}
	for _, other := range []runclaim.FinishRequest{
		{ID: bad.ID, Source: bad.Source, StartedAt: bad.StartedAt, Status: runclaim.StatusFailed, Error: "another text"},
		{ID: bad.ID, Source: bad.Source, StartedAt: bad.StartedAt, Status: runclaim.StatusSucceeded},
	} {
		if err := store.Finish(ctx, other); !errors.Is(err, runclaim.ErrFinished) {
			t.Errorf("Finish %+v after failed: %v, want ErrFinished", other, err)
		}
	}
	if diff := cmp.Diff(row, loadRun(t, db.Pool, store.Table(), bad.ID)); diff != "" {
		t.Errorf("row changed by repeated Finish calls (-before +after):\n%s", diff)
	}

	if err := store.Finish(ctx, runclaim.FinishRequest{ID: 1 << 40, Source: "ok", StartedAt: time.Now(), Status: runclaim.StatusSucceeded}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Finish of a run that does not exist: %v, want ErrLeaseLost", err)
	}
	gone := claim("gone")
	if _, err := db.Pool.Exec(ctx, "UPDATE "+store.Table()+" SET status = 'released', finished_at = clock_timestamp() WHERE id = $1", gone.ID); err != nil {
		t.Fatal(err)
	}
	if err := store.Finish(ctx, runclaim.FinishRequest{ID: gone.ID, Source: gone.Source, StartedAt: gone.StartedAt, Status: runclaim.StatusSucceeded}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Finish of a released run: %v, want ErrLeaseLost", err)
	}
	if _, err := store.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: gone.ID, Source: gone.Source, StartedAt: gone.StartedAt, Lease: time.Minute}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Heartbeat of a released run: %v, want ErrLeaseLost", err)
	}
}

// ---------------------------------------------------------------------------
// Database errors are wrapped, never reported as skips (G8)

// TestClosedPool: every call on a closed pool fails with the library's
// prefix, not as a skip or a lost lease.
func TestClosedPool(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	pool := db.NewPool(t, nil)
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	run, err := newClaimer(t, store).Claim(ctx, "src")
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	pool.Close()

	_, err = newClaimer(t, store).Claim(ctx, "other")
	checkRealError(t, err, "runclaim: claim")
	checkRealError(t, run.Heartbeat(ctx), "runclaim: heartbeat")
	checkRealError(t, run.Finish(ctx, nil), "runclaim: finish")
	checkRealError(t, store.Migrate(ctx), "runclaim: migrate")
	if got := readState(t, db.Pool, store.Table()); got.Rows != 1 {
		t.Errorf("rows after the failed claim: %+v, want the one run", got)
	}
}

// TestReadOnlyDefault: with default_transaction_read_only on, claims,
// heartbeats and finishes fail with the server's error 25006 (wrapped, so
// errors.As finds it) and write nothing.
func TestReadOnlyDefault(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	rw := storeOn(t, db.Pool)
	held, err := newClaimer(t, rw).Claim(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	before := readState(t, db.Pool, rw.Table())

	alterDatabase(t, db, "default_transaction_read_only", "on")
	pool := db.NewPool(t, nil)
	ro, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	_, err = newClaimer(t, ro).Claim(ctx, "src")
	checkRealError(t, err, "runclaim: claim")
	if code := pgCode(err); code != "25006" { // read_only_sql_transaction
		t.Errorf("Claim error %v has SQLSTATE %q, want 25006", err, code)
	}
	_, err = ro.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: held.ID, Source: held.Source, StartedAt: held.StartedAt, Lease: time.Minute})
	checkRealError(t, err, "runclaim: heartbeat")
	if code := pgCode(err); code != "25006" {
		t.Errorf("Heartbeat error %v has SQLSTATE %q, want 25006", err, code)
	}
	err = ro.Finish(ctx, runclaim.FinishRequest{ID: held.ID, Source: held.Source, StartedAt: held.StartedAt, Status: runclaim.StatusSucceeded})
	checkRealError(t, err, "runclaim: finish")
	if code := pgCode(err); code != "25006" {
		t.Errorf("Finish error %v has SQLSTATE %q, want 25006", err, code)
	}
	if diff := cmp.Diff(before, readState(t, db.Pool, rw.Table())); diff != "" {
		t.Errorf("table changed (-before +after):\n%s", diff)
	}
	if n := advisoryLocks(t, db.Pool); n != 0 {
		t.Errorf("%d advisory locks held after the failed claim", n)
	}
}

// blockedClaims prepares claims that block inside the database. It returns
// a store on a new pool of one connection on which a claim and a finish
// have already run (so its statements are prepared: the next claim's batch
// goes out at once), the runs table and its state, and a function that
// ends a transaction that now holds the table locked (as a migration or an
// operator might) until it is called, so that the batch's statements wait
// for the lock. The table holds one running run, of source "held".
func blockedClaims(t *testing.T, db *pgtest.DB) (store *runclaim.PostgresStore, before tableState, unlock func()) {
	t.Helper()
	ctx := t.Context()
	if _, err := newClaimer(t, migratedStore(t, db.Pool)).Claim(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	pool := db.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	// The warm-up claim runs without the database's timeouts, which the
	// tests set short: on a loaded machine a first claim (its plans, the
	// function's compilation) can take longer than them. The pool's one
	// connection gets them back once it is warm.
	if _, err := pool.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	warm, err := newClaimer(t, store).Claim(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "RESET statement_timeout"); err != nil {
		t.Fatal(err)
	}
	before = readState(t, db.Pool, store.Table())
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+store.Table()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() { once.Do(func() { _ = tx.Rollback(context.Background()) }) }
	t.Cleanup(unlock)
	return store, before, unlock
}

// TestStatementTimeout: a claim cut off by the server's statement_timeout
// returns the server's error (57014), wrapped, and leaves no row and no
// lock.
func TestStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	alterDatabase(t, db, "statement_timeout", "200ms")
	store, before, unlock := blockedClaims(t, db)
	table := store.Table()

	_, err := newClaimer(t, store).Claim(ctx, "src")
	checkRealError(t, err, "runclaim: claim")
	if code := pgCode(err); code != "57014" { // query_canceled
		t.Errorf("Claim error %v has SQLSTATE %q, want 57014", err, code)
	}
	unlock()
	if diff := cmp.Diff(before, readState(t, db.Pool, table)); diff != "" {
		t.Errorf("table changed (-before +after):\n%s", diff)
	}
	if n := advisoryLocks(t, db.Pool); n != 0 {
		t.Errorf("%d advisory locks held after the failed claim", n)
	}
}

// TestCancelledContext: a claim with a cancelled context returns an error
// matching context.Canceled, not a skip, and writes nothing; so do
// Heartbeat and Migrate.
func TestCancelledContext(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	run, err := newClaimer(t, store).Claim(t.Context(), "held")
	if err != nil {
		t.Fatal(err)
	}
	before := readState(t, db.Pool, store.Table())

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = newClaimer(t, store).Claim(ctx, "src")
	checkRealError(t, err, "runclaim: claim")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Claim with a cancelled context: %v, want context.Canceled", err)
	}
	err = run.Heartbeat(ctx)
	checkRealError(t, err, "runclaim: heartbeat")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Heartbeat with a cancelled context: %v, want context.Canceled", err)
	}
	if err := store.Migrate(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Migrate with a cancelled context: %v, want context.Canceled", err)
	}
	if diff := cmp.Diff(before, readState(t, db.Pool, store.Table())); diff != "" {
		t.Errorf("table changed (-before +after):\n%s", diff)
	}
	// Finish survives a cancelled context (a deferred Finish of a cancelled
	// job must still record it).
	if err := run.Finish(ctx, ctx.Err()); err != nil {
		t.Errorf("Finish with a cancelled context: %v", err)
	}
	if got := loadRun(t, db.Pool, store.Table(), run.ID); got.Status != "failed" {
		t.Errorf("status after Finish with a cancelled context: %s, want failed", got.Status)
	}
}

// TestCancelDuringClaim: a claim whose context is cancelled while the
// server works on it returns context.Canceled, not a skip.
func TestCancelDuringClaim(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	store, before, unlock := blockedClaims(t, db)
	table := store.Table()
	// A claim waits for the table lock at most its lock timeout (1 s). On
	// a loaded machine that can end before the test sees the claim wait,
	// or before its cancellation reaches the claim: the claim then fails
	// with the lock timeout's error (SQLSTATE 55P03), having written
	// nothing, and the test tries again, up to five times.
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := newClaimer(t, store).Claim(ctx, "src")
			done <- err
		}()
		// Wait until the claim waits for the table lock (or has ended),
		// then cancel it.
		waitUntil(t, 10*time.Second, 5*time.Millisecond, "the claim to block on the table lock", func() bool {
			return len(done) > 0 || lockWaiters(t, db.Pool) > 0
		})
		endedFirst := len(done) > 0
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Claim did not return within 10s of the cancellation")
		}
		if attempt < 5 && (endedFirst || !errors.Is(err, context.Canceled) && pgCode(err) == "55P03") {
			t.Logf("attempt %d: the claim's wait for the table lock timed out before its cancellation: %v", attempt, err)
			continue
		}
		checkRealError(t, err, "runclaim: claim")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Claim cancelled in flight: %v, want context.Canceled", err)
		}
		break
	}
	unlock()
	// The server may still be working on the abandoned claim; wait until
	// no session of this database waits for a lock or runs a statement
	// any more, then look at what it left.
	waitUntil(t, 10*time.Second, 5*time.Millisecond, "the abandoned claim to end on the server", func() bool {
		var n int
		err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_catalog.pg_stat_activity
WHERE datname = pg_catalog.current_database() AND pid <> pg_catalog.pg_backend_pid() AND state <> 'idle'`).Scan(&n)
		return err == nil && n == 0
	})
	// Nothing written (G8): the claim waited for the table lock at most
	// its lock timeout, less than the grace it has after its context ends,
	// so it ended on the server before it returned, and left nothing.
	if after := readState(t, db.Pool, table); after != before {
		t.Errorf("after a cancelled claim the table went from %+v to %+v", before, after)
	}
	if n := advisoryLocks(t, db.Pool); n != 0 {
		t.Errorf("%d advisory locks held after the cancelled claim", n)
	}
}

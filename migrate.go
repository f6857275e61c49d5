package runclaim

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// LatestSchemaVersion is the version of the runs table's schema that this
// release's PostgresStore needs and Migrate creates.
//
//   - Version 1: the runs table, its unique index on running runs and its
//     history index, as the first release created them.
//   - Version 2: the min_interval column, the minimum interval each run's
//     claimer asked for, which binds every later claimer of the source.
//   - Version 3: the claim function, named after the table with the suffix
//     "_claim", which makes a claim one statement (the store keeps sending
//     the three-statement batch of version 2 to a table without it).
//   - Version 4: ticks (ClaimTick): the tick column, a unique index of the
//     ticks served named after the table with the suffix "_tick", and the
//     claim function's overload that takes a tick. Plain claims go on as
//     before on an older table; a tick claim there fails with an error
//     that says to run Migrate.
const LatestSchemaVersion = 4

// A Migration is one step of the runs table's schema, for users of goose,
// atlas or golang-migrate who apply schema changes with their own tool
// instead of calling Migrate.
//
// Every step is additive: the code of the release before it keeps working
// on a table that has it, so that old and new replicas can run side by side
// during a rolling deploy. Apply a step before the release that needs it
// starts, and remove it only after no replica of that release runs.
type Migration struct {
	// Version is the schema version the step brings the table to.
	Version int
	// Name says what the step does.
	Name string
	// Up applies the step. It is idempotent, and it records the version in
	// the table's comment ("runclaim schema version N"), from which
	// SchemaVersion reads it.
	Up string
	// Down undoes the step and records the version before it. Run it only
	// once no replica needs the step any more: rolling back the code does
	// not need it, because the older release works on the newer schema.
	Down string
}

// versionComment is the table comment that records a schema version.
const versionComment = "runclaim schema version "

var versionCommentRE = regexp.MustCompile("^" + versionComment + "([0-9]+)$")

// Migrations returns the steps of the schema, oldest first, written for the
// store's table and schema (see WithTable). Applying every Up in order is
// what Migrate does.
func (s *PostgresStore) Migrations() []Migration {
	t := s.Table()
	comment := s.versionCommentSQL
	v1 := s.tableSQL() + comment(1)
	if s.schema != DefaultSchema {
		v1 = fmt.Sprintf("CREATE SCHEMA IF NOT EXISTS %s;\n", pgx.Identifier{s.schema}.Sanitize()) + v1
	}
	return []Migration{
		{
			Version: 1,
			Name:    "create the runs table and its indexes",
			Up:      v1,
			Down:    fmt.Sprintf("DROP TABLE IF EXISTS %s;\n", t),
		},
		{
			Version: 2,
			Name:    "record each run's minimum interval",
			// A constant default makes ADD COLUMN a change of the catalog
			// only: no rewrite of the table, and the previous release's
			// inserts, which do not name the column, record 0.
			Up: fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS min_interval interval NOT NULL DEFAULT '0';\n", t) +
				comment(2),
			Down: fmt.Sprintf("ALTER TABLE %s DROP COLUMN IF EXISTS min_interval;\n", t) + comment(1),
		},
		{
			Version: 3,
			Name:    "add the claim function",
			// Creating a function takes no lock on the table; only the
			// comment does, briefly. A store of this release that meets a
			// table without the function sends the batch instead.
			Up:   s.claimFuncSQL() + comment(3),
			Down: fmt.Sprintf("DROP FUNCTION IF EXISTS %s%s;\n", s.claimFunc(), claimFuncArgs) + comment(2),
		},
		{
			Version: 4,
			Name:    "record the tick each run serves",
			// The column has no default: ADD COLUMN changes the catalog
			// only, and the previous release's inserts record NULL, a
			// plain claim. Building the index scans the table while it
			// holds off writes; on a large table, create it first with
			// CREATE UNIQUE INDEX CONCURRENTLY (the same definition), and
			// this step finds it there.
			Up:   s.tickStepSQL() + comment(4),
			Down: s.tickStepDownSQL() + comment(3),
		},
	}
}

// SchemaSQL returns the DDL of every step of the schema (see Migrations),
// in order, as one idempotent script that brings a table of any version to
// LatestSchemaVersion.
func (s *PostgresStore) SchemaSQL() string {
	var b strings.Builder
	for _, m := range s.Migrations() {
		b.WriteString(m.Up)
	}
	return b.String()
}

// versionCommentSQL is the statement that records schema version v in the
// table's comment.
func (s *PostgresStore) versionCommentSQL(v int) string {
	return fmt.Sprintf("COMMENT ON TABLE %s IS '%s%d';\n", s.Table(), versionComment, v)
}

// tableSQL is the DDL of version 1 without the CREATE SCHEMA statement.
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

// schemaStateSQL reads, from the catalogs only, whether the schema and the
// table exist and the table's comment. It takes no lock on the table.
const schemaStateSQL = `SELECT n.oid IS NOT NULL, c.oid IS NOT NULL, coalesce(pg_catalog.obj_description(c.oid, 'pg_class'), '')
FROM (SELECT) AS one
LEFT JOIN pg_catalog.pg_namespace AS n ON n.nspname = $1
LEFT JOIN pg_catalog.pg_class AS c ON c.relnamespace = n.oid AND c.relname = $2 AND c.relkind IN ('r', 'p')`

// SchemaVersion returns the schema version of the runs table in the
// database (have) and the one this release needs (want, which is
// LatestSchemaVersion). have is 0 when there is no runs table, and 1 for a
// table that records no version, as the first release created them. It
// reads the catalogs only and takes no lock on the table.
func (s *PostgresStore) SchemaVersion(ctx context.Context) (have, want int, err error) {
	if err := checkContext(ctx); err != nil {
		return 0, LatestSchemaVersion, err
	}
	have, _, err = s.schemaVersion(ctx)
	if err != nil {
		return 0, LatestSchemaVersion, s.wrap(ctx, "schema version", err)
	}
	return have, LatestSchemaVersion, nil
}

func (s *PostgresStore) schemaVersion(ctx context.Context) (version int, schemaExists bool, err error) {
	var tableExists bool
	var comment string
	if err := s.db.QueryRow(ctx, schemaStateSQL, s.schema, s.table).Scan(&schemaExists, &tableExists, &comment); err != nil {
		return 0, false, err
	}
	if !tableExists {
		s.schemaVer.set(0)
		return 0, schemaExists, nil
	}
	v := parseSchemaVersion(comment)
	s.schemaVer.set(v)
	return v, true, nil
}

// parseSchemaVersion returns the version a runs table's comment records:
// 1 when it records none, as the first release's tables.
func parseSchemaVersion(comment string) int {
	if m := versionCommentRE.FindStringSubmatch(comment); m != nil {
		if v, err := strconv.Atoi(m[1]); err == nil && v >= 1 {
			return v
		}
	}
	return 1
}

// migrateKey is the advisory lock Migrate holds so that replicas migrating
// at once do not race on the catalog.
var migrateKey = AdvisoryKey("runclaim.migrate", "")

// Bounds of Migrate's DDL. A step that waits for a lock on the runs table
// makes every claim, heartbeat and finish queue behind it, so it waits at
// most migrateLockTimeout (less than a claim's own lock timeout) and is
// tried migrateAttempts times, migrateRetryDelay apart, letting the queued
// statements through in between.
const (
	migrateLockTimeout = 500 * time.Millisecond
	migrateAttempts    = 3
	migrateRetryDelay  = time.Second
)

// skipStepCode is the SQLSTATE with which a step's guard aborts a step that
// another Migrate applied meanwhile.
const skipStepCode = "RCSKP"

// Migrate brings the runs table to LatestSchemaVersion, applying the
// missing steps of Migrations in order. It is idempotent and safe to call
// from every replica at once, at every start:
//
//   - On a current (or newer) schema it only reads the catalogs: it takes
//     no lock on the runs table and changes nothing, so it never stalls the
//     claims of running replicas, and a role that may only read and write
//     rows can call it.
//   - Each missing step runs in its own short transaction under a
//     transaction-scoped advisory lock, after a check that no other
//     Migrate applied it meanwhile. The step's DDL waits at most 500 ms for
//     a lock on the runs table, so that claims queue behind it no longer
//     than that; a step that cannot get its lock is tried three times, a
//     second apart, and Migrate then fails with a wrapped 55P03
//     lock_not_available error that says so.
//
// It sends CREATE SCHEMA only when the schema is missing, so a role that
// owns (or may create in) an existing schema needs no CREATE privilege on
// the database; and each step is one multi-statement query, one implicit
// transaction that never sits idle between round trips. ctx bounds the
// whole migration.
func (s *PostgresStore) Migrate(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	have, schemaExists, err := s.schemaVersion(ctx)
	if err != nil {
		return s.wrap(ctx, "migrate", err)
	}
	for _, m := range s.Migrations() {
		if m.Version <= have {
			continue
		}
		up := m.Up
		if m.Version == 1 && schemaExists {
			up = s.tableSQL() + s.versionCommentSQL(1)
		}
		if err := s.applyStep(ctx, m, up); err != nil {
			return err
		}
		// Applied now, or by another Migrate meanwhile.
		s.schemaVer.set(m.Version)
	}
	return nil
}

// applyStep runs one step under the migration lock, unless the table has
// reached its version meanwhile, retrying when the table is locked.
func (s *PostgresStore) applyStep(ctx context.Context, m Migration, up string) error {
	// No arguments: pgx sends it with the simple protocol, as one
	// transaction, whatever the pool's query mode.
	q := fmt.Sprintf("SELECT pg_catalog.pg_advisory_xact_lock(%d);\n%s\nSELECT pg_catalog.set_config('lock_timeout', '%d', true);\n%s",
		migrateKey, s.stepGuard(m.Version), migrateLockTimeout.Milliseconds(), up)
	what := fmt.Sprintf("migrate: step to schema version %d (%s)", m.Version, m.Name)
	for attempt := 1; ; attempt++ {
		_, err := s.db.Exec(ctx, q)
		switch {
		case err == nil, pgCode(err) == skipStepCode:
			return nil
		case pgCode(err) != "55P03" || attempt == migrateAttempts:
			if pgCode(err) == "55P03" {
				return fmt.Errorf("runclaim: %s: the runs table stayed locked by another transaction (maintenance, DDL or a long transaction) through %d attempts of %v each; claims went on meanwhile; try again later: %w",
					what, migrateAttempts, migrateLockTimeout, err)
			}
			return s.wrap(ctx, what, err)
		}
		t := time.NewTimer(migrateRetryDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("runclaim: %s: %w (after %w)", what, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// stepGuard is a statement that aborts the step's transaction with
// skipStepCode if the table has reached version v since Migrate read it.
// Names are written as dollar-quoted literals, which no setting of
// standard_conforming_strings changes.
func (s *PostgresStore) stepGuard(v int) string {
	nsp, rel := dollarQuote(s.schema), dollarQuote(s.table)
	cond := fmt.Sprintf(`(SELECT coalesce(substring(pg_catalog.obj_description(c.oid, 'pg_class') FROM '^%s([0-9]+)$')::int, 1)
	FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
	WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')) >= %d`, versionComment, nsp, rel, v)
	body := fmt.Sprintf("BEGIN IF %s THEN RAISE EXCEPTION USING ERRCODE = '%s', MESSAGE = 'runclaim: schema step already applied'; END IF; END", cond, skipStepCode)
	return "DO " + dollarQuote(body) + ";"
}

// dollarQuote quotes s as a dollar-quoted string literal whose tag does
// not occur in s.
func dollarQuote(s string) string {
	tag := "$q$"
	for i := 0; strings.Contains(s, tag); i++ {
		tag = "$q" + strconv.Itoa(i) + "$"
	}
	return tag + s + tag
}

// errSchemaHint explains an error that a table older than this release
// needs would give.
var errSchemaHint = errors.New("the runs table may be at an older schema version than this release needs; run Migrate (or apply the Migrations) first")

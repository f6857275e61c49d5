package runclaim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

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
	// SchemaVersion reads it. Like Down, it starts by pinning the
	// search_path to pg_catalog for its transaction: run each step as one
	// transaction.
	Up string
	// Down undoes the step and records the version before it. Run it only
	// once no replica needs the step any more: rolling back the code does
	// not need it, because the older release works on the newer schema.
	Down string
}

// versionComment is the table comment that records a schema version.
const versionComment = "runclaim schema version "

var versionCommentRE = regexp.MustCompile("^" + versionComment + "([0-9]+)$")

// The versions of the runs table's schema that this
// release's PostgresStore needs and Migrate creates.
//
//   - Version 1: the runs table, its unique index on running runs and its
//     history index, as the first release created them.
//   - Version 2: the min_interval column, the minimum interval each run's
//     claimer asked for, which binds every later claimer of the source.
//   - Version 3: the claim function, named after the table with the suffix
//     "_claim", which makes a claim one statement (the store keeps sending
//     the three-statement batch of version 2 to a table without it).
//   - Version 4: ticks (ForTick): the tick column, a unique index of the
//     ticks served named after the table with the suffix "_tick", and the
//     claim function's overload that takes a tick. Plain claims go on as
//     before on an older table; a tick claim there fails with an error
//     that says to run Migrate.
//   - Version 5: pauses and triggers (Pause, Resume, Trigger): a table of
//     them named after the runs table with the suffix "_control", and new
//     bodies for both claim functions, which check a pause and use a
//     trigger in the claim's one statement. Roles that may insert into
//     the runs table are granted what claims need on the new table. On an
//     older table claims go on as before and Pause, Resume and Trigger
//     fail with an error that says to run Migrate.
//   - Version 6: new bodies for both claim functions, under their names,
//     signatures and results: a claim that meets a pause or a live holder
//     answers before it takes the advisory lock, and every name in the
//     bodies is schema-qualified, so that they need no SET search_path.
//   - Version 7: a new body for the claim function with a tick, under its
//     name, signature and results: a claim on a server that cannot write
//     (a standby) is an error, never a skip from what it read; a tick
//     claim checks the tick again when a lapsed run it could not expire
//     was finished meanwhile, so that the race answers ErrTickDone (never
//     a unique violation, never a win for an older tick); and a win says
//     whether it used a trigger, so that a claim given up gives it back.
//   - Version 8: keys (WithKeys, Limiter): a keys column on the runs table
//     and two partial indexes of the running runs' keys: a btree of the
//     runs naming one key, named after the table with the suffix
//     "_keyed", and a GIN index (without fastupdate) of those naming
//     more ("_keyset"); a table of keys'
//     limits and cooldowns ("_keys") and one of keys' starts ("_starts"),
//     and the claim function's overload that takes keys (and, for a
//     ClaimMany, the keys of the whole batch). Roles that may insert into the
//     runs table are granted what claims need on the new tables. Claims
//     that name no key go on as before, on this table and an older one;
//     a claim that names keys on an older table fails with an error that
//     says to run Migrate.
//   - Version 9: states (Run.State, Run.SaveState): a table of each
//     source's state named after the runs table with the suffix
//     "_cursors", and the claim function's overload that returns the
//     state of a win. Roles that may insert into the runs table are
//     granted what claims and saves need on the new table. The code of
//     version 8 goes on as before on this table; on an older table claims
//     go on without states (a run's State is nil) and SaveState fails
//     with an error that says to run Migrate.
//   - Version 10: each key's starts numbered without gaps (a column, an
//     index, and triggers that number a start inserted and close the gap
//     a start deleted leaves, under the key's lock), and new bodies for
//     the claim function's overloads with keys and with a state, under
//     their names, signatures and results, which find a key's
//     MaxStarts-th newest start by its number: a claim of a key costs
//     the same whatever the starts in its window. Roles that may insert
//     into the runs table are granted UPDATE of the number. Replicas of
//     the release before run the new bodies too.
//   - Version 11: the claim function with the one body of sql/claim.sql,
//     named after the table with the suffix "_claim11", which decides
//     every claim of this release; the grants of EXECUTE of the overload
//     of version 9 are copied to it. The functions before it stay, for
//     the release before.
//   - Version 12: paced starts (Limit.MinGap): the min_gap_us column of
//     the keys table, and the claim function "_claim12", whose body
//     skips a claim of a key within MinGap of the key's newest start;
//     the grants of EXECUTE of version 11's function are copied to it,
//     and that function stays for the release before, which does not
//     pace.
//   - Version 13: Replace: the stop request on a run (stop_requested_at,
//     replaced_by), the reservation of the claim that asked (the control
//     table's reserved_for, reserved_run, reserved_us), the status
//     replaced (the check relaxed NOT VALID), the index of replaced runs'
//     ticks, grants on the new control columns to the claimers, and the
//     claim function "_claim13", whose last argument, the token of a
//     claim with Replace, defaults to NULL.
//
// migrations are the schema's steps, oldest first. Each is two files of
// sql/, NNN_<file>.up.sql and .down.sql, with the table's names as their
// only placeholders (see postgres_sql.go), and, in the step that
// introduces a claim body, the line {{claim_body}} (see renderStep). A
// released step never changes (TestMigrationsGolden compares them, as
// rendered, with testdata/migrations): a new function body or index is a
// new version. To add version N, add
// sql/00N_<what>.up.sql and .down.sql, one entry here, and raise
// LatestSchemaVersion; the objects it adds belong in schemaStateSQL and
// stepGuard, so that Migrate can tell that they are missing.
var migrations = []struct {
	version int
	file    string // the files' names without the extensions
	name    string // Migration.Name
}{
	// The table as the first release created it, and its two indexes.
	{1, "001_create_table", "create the runs table and its indexes"},
	// A constant default makes ADD COLUMN a change of the catalog only: no
	// rewrite of the table, and the previous release's inserts, which do
	// not name the column, record 0.
	{2, "002_min_interval", "record each run's minimum interval"},
	// Creating a function takes no lock on the table; only the comment
	// does, briefly. A store of this release that meets a table without
	// the function sends the batch instead.
	{3, "003_claim_function", "add the claim function"},
	// A column without a default (a change of the catalog only: the
	// previous release's inserts record NULL, a plain claim), the index of
	// ticks served, and the function's overload with a tick; the function
	// of version 3 stays for the previous release.
	{4, "004_ticks", "record the tick each run serves"},
	// A new table, grants on it copied from the claimers of the runs
	// table so that no replica's claims fail on it, and new bodies for
	// the claim functions, under their names, signatures and results;
	// no lock on the runs table but the comment's.
	{5, "005_pauses", "add pauses and triggers"},
	// New bodies for the claim functions, under their names, signatures
	// and results; no lock on the runs table but the comment's.
	{6, "006_lost_path", "answer a lost claim before the advisory lock"},
	// A new body for the claim function with a tick, under its name,
	// signature and results; the one without a tick calls it. No lock on
	// the runs table but the comment's.
	{7, "007_claim_races", "close the races of a claim"},
	// A column without a default (a change of the catalog only), a
	// partial index that holds no row of an older release's, two new
	// tables with grants copied from the claimers of the runs table, and
	// a new overload of the claim function; the functions before it stay
	// for the previous release.
	{8, "008_keys", "add keys with limits and cooldowns"},
	// A new table with grants copied from the claimers of the runs table,
	// and a new overload of the claim function that calls the ones before
	// it, which stay for the previous release.
	{9, "009_states", "add a state handed from run to run"},
	// A column of the starts table, numbered in the step's transaction
	// (which holds that table's lock, not the runs table's), its index,
	// two triggers and new bodies for the claim function's overloads
	// with keys and with a state, under their names, signatures and
	// results, which the previous release calls as well.
	{10, "010_key_starts", "number the starts of each key"},
	// The claim function with the one body of sql/claim.sql, under a name
	// of its own; the functions before it stay for the previous release.
	// No lock on the runs table but the comment's.
	{11, "011_claim_body", "add the claim function of one body"},
	// A column of the keys table with a constant default (a change of the
	// catalog only) and the claim function with the body that reads it,
	// under a name of its own; version 11's stays for the previous
	// release. No lock on the runs table but the comment's.
	{12, "012_key_min_gap", "pace the starts of each key"},
	// Nullable columns (changes of the catalog only), the status check
	// relaxed NOT VALID, an index built empty, grants on the control
	// table's new columns, and the claim function with the body that asks
	// a holder to stop, under a name of its own.
	{13, "013_replace", "replace a running run"},
}

// Migrations returns the steps of the schema, oldest first, written for the
// store's table and schema (see WithTable). Applying every Up in order is
// what Migrate does.
func (s *PostgresStore) Migrations() []Migration {
	out := make([]Migration, 0, len(migrations))
	for _, m := range migrations {
		up := s.renderStep(m.file + ".up.sql")
		if m.version == 1 && s.schema != DefaultSchema {
			up = s.createSchemaSQL() + up
		}
		out = append(out, Migration{Version: m.version, Name: m.name, Up: pinSearchPathSQL + up, Down: pinSearchPathSQL + s.renderStep(m.file+".down.sql")})
	}
	return out
}

// pinSearchPathSQL starts every step, as Migrations returns it and as
// Migrate runs it: for the rest of the step's transaction, names that are
// not schema-qualified resolve in pg_catalog alone, whatever the caller's
// search_path holds (G7). The steps' files were written before this rule
// and name many operators and types without pg_catalog (the guard's
// oid = regclass, a predicate's text = text): without the pin, a role
// that can create objects in a schema on the search path could have them
// run by whoever migrates. pg_temp is listed last so that no temporary
// object comes first. The setting is transaction-local: the step must run
// as one transaction (a single query string, as Migrate sends it, or one
// transaction of a migration tool).
const pinSearchPathSQL = "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);\n"

// renderStep fills the store's names into a step's file. Each function
// body and DO block in the file is dollar-quoted with the tag $q$; should
// the names filled into one end the literal early, that body gets a tag
// that they do not. The line {{claim_body}} is the claim function of the
// step's version: sql/claim.sql for claimBodyVersion; {{claim_body_11}} is
// the released body of version 11, frozen in sql/released.
func (s *PostgresStore) renderStep(file string) string {
	text := strings.NewReplacer(
		"{{claim_body}}\n", readSQL("sql/claim.sql"),
		"{{claim_body_11}}\n", readSQL("sql/released/claim_11.sql"),
		"{{claim_body_12}}\n", readSQL("sql/released/claim_12.sql"),
	).Replace(readSQL("sql/" + file))
	parts := strings.Split(text, "$q$")
	var b strings.Builder
	for i, part := range parts {
		switch {
		case i%2 == 0:
			b.WriteString(s.fillNames(part))
		case i == len(parts)-1:
			// An unpaired tag: not a body.
			b.WriteString("$q$" + s.fillNames(part))
		default:
			b.WriteString(dollarQuote(s.fillNames(part)))
		}
	}
	return b.String()
}

// createSchemaSQL creates the store's schema if it is missing. CREATE
// SCHEMA IF NOT EXISTS alone would not do: Postgres checks the CREATE
// privilege on the database before it looks for the schema, so an owner
// role that owns an existing schema, and may not create schemas, would get
// 42501 from a script that starts with it. The statement is therefore run
// in a block that ignores that refusal: if the schema is missing, the
// CREATE TABLE that follows fails with 3F000, schema does not exist. The
// schema is named only as a quoted identifier, and the block's dollar-quote
// tag is one that the name does not hold (see dollarQuote).
func (s *PostgresStore) createSchemaSQL() string {
	body := fmt.Sprintf(" BEGIN CREATE SCHEMA IF NOT EXISTS %s; EXCEPTION WHEN insufficient_privilege THEN NULL; END ",
		pgx.Identifier{s.schema}.Sanitize())
	return "DO " + dollarQuote(body) + ";\n"
}

// SchemaSQL returns the DDL of every step of the schema (see Migrations),
// in order, as one idempotent script that brings a table of any version to
// LatestSchemaVersion. Run it as one transaction (psql
// --single-transaction): each step pins the search_path for its
// transaction only.
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

// tableSQL is the DDL of version 1 without the CREATE SCHEMA statement
// and the version comment.
func (s *PostgresStore) tableSQL() string {
	return strings.TrimSuffix(s.renderStep(migrations[0].file+".up.sql"), s.versionCommentSQL(1))
}

// schemaStateSQL reads, from the catalogs only, whether the schema and the
// table exist, the table's comment, and whether the objects each version
// adds are there (sql/schema_state.sql). It takes no lock on the table.
var schemaStateSQL = statements["schema_state"]

// schemaState is schemaStateSQL's row.
type schemaState struct {
	schemaExists, tableExists                           bool
	comment                                             string
	indexes, column, function, ticks, control, lostPath bool
	claimRaces, keys, states, keySeq, body, gap         bool
	replace                                             bool
}

// dest returns the scan targets of schemaStateSQL's row.
func (st *schemaState) dest() []any {
	return []any{&st.schemaExists, &st.tableExists, &st.comment, &st.indexes, &st.column, &st.function, &st.ticks, &st.control, &st.lostPath, &st.claimRaces, &st.keys, &st.states, &st.keySeq, &st.body, &st.gap, &st.replace}
}

// commentVersion is the version the table's comment records: 0 without a
// table.
func (st *schemaState) commentVersion() int {
	if !st.tableExists {
		return 0
	}
	return parseSchemaVersion(st.comment)
}

// version is the highest version whose objects are all there, and that
// the comment records: a table whose comment says 3 but that lacks its
// function is at version 2.
func (st *schemaState) version() int {
	v := st.commentVersion()
	for i, ok := range []bool{st.indexes, st.column, st.function, st.ticks, st.control, st.lostPath, st.claimRaces, st.keys, st.states, st.keySeq, st.body, st.gap, st.replace} {
		if i+1 <= v && !ok {
			return i
		}
	}
	return v
}

// schemaStateArgs are schemaStateSQL's arguments for s's table.
func (s *PostgresStore) schemaStateArgs() []any {
	return []any{s.schema, s.table, s.indexName(runningSuffix), s.indexName(historySuffix), s.claimFunc() + claimFuncArgs,
		s.indexName(tickSuffix), s.claimFunc() + tickFuncArgs, s.controlTable(), s.claimFunc(), claimRacesMarker,
		s.keysTable(), s.startsTable(), s.indexName(keyedSuffix), s.claimFunc() + keyFuncArgs,
		s.statesTable(), s.claimFunc() + stateFuncArgs, s.indexName(keysetSuffix), s.indexName(nthSuffix), keySeqMarker,
		pgx.Identifier{s.schema, s.table + "_claim11"}.Sanitize() + claimPrevArgs, s.claimPrev() + claimPrevArgs, s.claimBody() + claimBodyArgs, s.indexName(replacedSuffix)}
}

// SchemaVersion returns the schema version of the runs table in the
// database (have) and the one this release needs (want, which is
// LatestSchemaVersion). have is the version the table's comment records
// (1 for a table that records none, as the first release created them),
// lowered to the last version whose objects are all there: a table whose
// comment says 3 but whose claim function is missing (dropped by hand,
// restored with pg_dump -t, moved with ALTER TABLE SET SCHEMA) is at 2,
// and Migrate repairs it. have is 0 when there is no runs table or its
// indexes are missing. It reads the catalogs only and takes no lock on the
// table.
func (s *PostgresStore) SchemaVersion(ctx context.Context) (have, want int, err error) {
	if err := checkContext(ctx); err != nil {
		return 0, LatestSchemaVersion, err
	}
	st, err := s.schemaState(ctx)
	if err != nil {
		return 0, LatestSchemaVersion, s.wrap(ctx, "schema version", err)
	}
	return st.version(), LatestSchemaVersion, nil
}

// schemaState reads the schema state and records its version for claims.
func (s *PostgresStore) schemaState(ctx context.Context) (schemaState, error) {
	var st schemaState
	if err := s.db.QueryRow(ctx, schemaStateSQL, s.schemaStateArgs()...).Scan(st.dest()...); err != nil {
		return schemaState{}, err
	}
	s.schemaVer.set(st.version())
	return st, nil
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
var migrateKey = advisoryKey("runclaim.migrate", "")

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

// migrateLockWait bounds Migrate's wait for the migration lock, which
// another Migrate holds while it applies a step. Its key is no secret: any
// role that can connect could hold it for good, and Migrate would hang.
const migrateLockWait = 30 * time.Second

// migrateLockCode is the SQLSTATE with which a step ends when its wait for
// the migration lock ran out, to tell that wait from a wait for the runs
// table (both are lock_timeout's 55P03).
const migrateLockCode = "RCMLK"

// migrateLockSQL takes the migration lock for the step's transaction,
// waiting at most wait. The lock taken in the block's subtransaction
// stays with the transaction.
func migrateLockSQL(wait time.Duration) string {
	return fmt.Sprintf(`SELECT pg_catalog.set_config('lock_timeout', '%d', true);
DO $l$BEGIN PERFORM pg_catalog.pg_advisory_xact_lock(%d);
EXCEPTION WHEN lock_not_available THEN
	RAISE EXCEPTION USING ERRCODE = '%s', MESSAGE = 'runclaim: the migration lock is held by another session';
END$l$;`, wait.Milliseconds(), migrateKey, migrateLockCode)
}

// skipStepCode is the SQLSTATE with which a step's guard aborts a step that
// another Migrate applied meanwhile.
const skipStepCode = "RCSKP"

// Migrate brings the runs table to LatestSchemaVersion, applying the
// missing steps of Migrations in order. It is idempotent and safe to call
// from every replica at once, at every start:
//
//   - It goes by the objects each version needs (the indexes, the
//     min_interval column, the claim function, the tick column and index,
//     the control table and the claim functions' bodies that read it, the
//     bodies without a SET clause), read from the catalogs,
//     not by the table's comment alone: a step whose object is missing
//     (a function dropped by hand, a table restored with pg_dump -t or
//     moved with ALTER TABLE SET SCHEMA) is applied again, leaving the
//     comment as it is (see SchemaVersion).
//   - On a current (or newer) schema with every object in place it only
//     reads the catalogs: it takes no lock on the runs table and changes
//     nothing, so it never stalls the claims of running replicas, and a
//     role that may only read and write rows can call it.
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
	_, err := s.MigrateApplied(ctx)
	return err
}

// MigrateApplied is Migrate, and returns the versions of the steps that
// this call applied (or repaired), oldest first: none when the table was
// current, or when another Migrate applied the missing steps meanwhile.
// On an error, applied lists the steps applied before it.
func (s *PostgresStore) MigrateApplied(ctx context.Context) (applied []int, err error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	// A database whose advisory locks do not exclude gets no table:
	// nothing is written.
	if err := s.exclusive(ctx); err != nil {
		return nil, fmt.Errorf("runclaim: migrate %s: %w", s.Table(), err)
	}
	st, err := s.schemaState(ctx)
	if err != nil {
		return nil, s.wrap(ctx, "migrate", err)
	}
	have, recorded := st.version(), st.commentVersion()
	for _, m := range s.Migrations() {
		if m.Version <= have {
			continue
		}
		up := m.Up
		if m.Version == 1 && st.schemaExists {
			up = s.tableSQL() + s.versionCommentSQL(1)
		}
		if m.Version <= recorded {
			// A repair: the comment records the step but an object of it
			// is missing. The step's DDL is idempotent; its comment would
			// lower the version the table records, so it is left out.
			up = strings.TrimSuffix(up, s.versionCommentSQL(m.Version))
		}
		done, err := s.applyStep(ctx, m, up)
		if err != nil {
			return applied, err
		}
		if done {
			applied = append(applied, m.Version)
		}
		// Applied now, or by another Migrate meanwhile.
		s.schemaVer.set(m.Version)
	}
	return applied, nil
}

// applyStep runs one step under the migration lock, unless the table has
// reached its version meanwhile, retrying when the table is locked. It
// reports whether it applied the step.
func (s *PostgresStore) applyStep(ctx context.Context, m Migration, up string) (bool, error) {
	// No arguments: pgx sends it with the simple protocol, as one
	// transaction, whatever the pool's query mode.
	wait := cmp.Or(s.migrateLockWait, migrateLockWait)
	q := fmt.Sprintf("%s%s\n%s\nSELECT pg_catalog.set_config('lock_timeout', '%d', true);\n%s",
		pinSearchPathSQL, migrateLockSQL(wait), s.stepGuard(m.Version), migrateLockTimeout.Milliseconds(), up)
	what := fmt.Sprintf("migrate: step to schema version %d (%s)", m.Version, m.Name)
	for attempt := 1; ; attempt++ {
		_, err := s.db.Exec(ctx, q)
		switch {
		case err == nil:
			return true, nil
		case pgCode(err) == skipStepCode:
			return false, nil
		case pgCode(err) == migrateLockCode:
			return false, fmt.Errorf("runclaim: %s: another session held the migration lock for %v (another Migrate applying a long step, or a stuck session, or a role that can connect and takes the lock on purpose: see docs/security.md); nothing was changed; try again: %w",
				what, wait, err)
		case pgCode(err) != "55P03" || attempt == migrateAttempts:
			if pgCode(err) == "55P03" {
				return false, fmt.Errorf("runclaim: %s: the runs table stayed locked by another transaction (maintenance, DDL or a long transaction) through %d attempts of %v each; claims went on meanwhile; try again later: %w",
					what, migrateAttempts, migrateLockTimeout, err)
			}
			return false, s.wrap(ctx, what, err)
		}
		t := time.NewTimer(migrateRetryDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, fmt.Errorf("runclaim: %s: %w (after %w)", what, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// stepGuard is a statement that aborts the step's transaction with
// skipStepCode if, since Migrate read the schema state, the table has
// reached version v and has the objects step v adds: another Migrate
// applied or repaired the step meanwhile. Names are written as
// dollar-quoted literals, which no setting of standard_conforming_strings
// changes.
func (s *PostgresStore) stepGuard(v int) string {
	nsp, rel := dollarQuote(s.schema), dollarQuote(s.table)
	var objects string
	switch v {
	case 1:
		objects = fmt.Sprintf("pg_catalog.to_regclass(%s) IS NOT NULL AND pg_catalog.to_regclass(%s) IS NOT NULL",
			dollarQuote(s.indexName(runningSuffix)), dollarQuote(s.indexName(historySuffix)))
	case 2:
		objects = fmt.Sprintf("EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = pg_catalog.to_regclass(%s) AND a.attname = 'min_interval' AND NOT a.attisdropped)",
			dollarQuote(s.Table()))
	case 3:
		objects = fmt.Sprintf("pg_catalog.to_regprocedure(%s) IS NOT NULL", dollarQuote(s.claimFunc()+claimFuncArgs))
	case 4:
		objects = fmt.Sprintf("EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = pg_catalog.to_regclass(%s) AND a.attname = 'tick' AND NOT a.attisdropped)"+
			" AND pg_catalog.to_regclass(%s) IS NOT NULL AND pg_catalog.to_regprocedure(%s) IS NOT NULL",
			dollarQuote(s.Table()), dollarQuote(s.indexName(tickSuffix)), dollarQuote(s.claimFunc()+tickFuncArgs))
	case 5:
		objects = fmt.Sprintf("pg_catalog.to_regclass(%[1]s) IS NOT NULL"+
			" AND EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid = pg_catalog.to_regprocedure(%[2]s) AND pg_catalog.strpos(p.prosrc, %[1]s) > 0)"+
			" AND EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid = pg_catalog.to_regprocedure(%[3]s) AND pg_catalog.strpos(p.prosrc, %[4]s) > 0)",
			dollarQuote(s.controlTable()), dollarQuote(s.claimFunc()+tickFuncArgs), dollarQuote(s.claimFunc()+claimFuncArgs), dollarQuote(s.claimFunc()))
	case 6:
		objects = fmt.Sprintf("EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid = pg_catalog.to_regprocedure(%[1]s) AND p.proconfig IS NULL"+
			" AND pg_catalog.strpos(p.prosrc, 'OPERATOR(pg_catalog.=)') > 0)"+
			" AND EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid = pg_catalog.to_regprocedure(%[2]s) AND p.proconfig IS NULL)",
			dollarQuote(s.claimFunc()+tickFuncArgs), dollarQuote(s.claimFunc()+claimFuncArgs))
	case 7:
		objects = fmt.Sprintf("EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid = pg_catalog.to_regprocedure(%s) AND p.proconfig IS NULL"+
			" AND pg_catalog.strpos(p.prosrc, %s) > 0)",
			dollarQuote(s.claimFunc()+tickFuncArgs), dollarQuote(claimRacesMarker))
	case 8:
		objects = fmt.Sprintf("EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = pg_catalog.to_regclass(%s) AND a.attname = 'keys' AND NOT a.attisdropped)"+
			" AND pg_catalog.to_regclass(%s) IS NOT NULL AND pg_catalog.to_regclass(%s) IS NOT NULL AND pg_catalog.to_regclass(%s) IS NOT NULL"+
			" AND pg_catalog.to_regclass(%s) IS NOT NULL AND pg_catalog.to_regprocedure(%s) IS NOT NULL",
			dollarQuote(s.Table()), dollarQuote(s.keysTable()), dollarQuote(s.startsTable()), dollarQuote(s.indexName(keyedSuffix)),
			dollarQuote(s.indexName(keysetSuffix)), dollarQuote(s.claimFunc()+keyFuncArgs))
	case 9:
		objects = fmt.Sprintf("pg_catalog.to_regclass(%s) IS NOT NULL AND pg_catalog.to_regprocedure(%s) IS NOT NULL",
			dollarQuote(s.statesTable()), dollarQuote(s.claimFunc()+stateFuncArgs))
	case 10:
		objects = fmt.Sprintf("pg_catalog.to_regclass(%s) IS NOT NULL"+
			" AND EXISTS (SELECT FROM pg_catalog.pg_trigger AS t WHERE t.tgrelid = pg_catalog.to_regclass(%[2]s) AND t.tgname = 'runclaim_number')"+
			" AND EXISTS (SELECT FROM pg_catalog.pg_trigger AS t WHERE t.tgrelid = pg_catalog.to_regclass(%[2]s) AND t.tgname = 'runclaim_renum')"+
			" AND EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid = pg_catalog.to_regprocedure(%[3]s) AND pg_catalog.strpos(p.prosrc, %[5]s) > 0)"+
			" AND EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid = pg_catalog.to_regprocedure(%[4]s) AND pg_catalog.strpos(p.prosrc, %[5]s) > 0)",
			dollarQuote(s.indexName(nthSuffix)), dollarQuote(s.startsTable()), dollarQuote(s.claimFunc()+keyFuncArgs), dollarQuote(s.claimFunc()+stateFuncArgs), dollarQuote(keySeqMarker))
	case 11:
		objects = fmt.Sprintf("pg_catalog.to_regprocedure(%s) IS NOT NULL", dollarQuote(pgx.Identifier{s.schema, s.table + "_claim11"}.Sanitize()+claimPrevArgs))
	case 12:
		objects = fmt.Sprintf("EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = pg_catalog.to_regclass(%s) AND a.attname = 'min_gap_us' AND NOT a.attisdropped)"+
			" AND pg_catalog.to_regprocedure(%s) IS NOT NULL",
			dollarQuote(s.keysTable()), dollarQuote(s.claimPrev()+claimPrevArgs))
	case 13:
		objects = fmt.Sprintf("EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = pg_catalog.to_regclass(%s) AND a.attname = 'replaced_by' AND NOT a.attisdropped)"+
			" AND EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = pg_catalog.to_regclass(%s) AND a.attname = 'reserved_for' AND NOT a.attisdropped)"+
			" AND pg_catalog.to_regclass(%s) IS NOT NULL AND pg_catalog.to_regprocedure(%s) IS NOT NULL",
			dollarQuote(s.Table()), dollarQuote(s.controlTable()), dollarQuote(s.indexName(replacedSuffix)), dollarQuote(s.claimBody()+claimBodyArgs))
	default:
		objects = "true"
	}
	cond := fmt.Sprintf(`(SELECT coalesce(substring(pg_catalog.obj_description(c.oid, 'pg_class') FROM '^%s([0-9]+)$')::int, 1)
	FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
	WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')) >= %d
	AND %s`, versionComment, nsp, rel, v, objects)
	body := fmt.Sprintf("BEGIN IF %s THEN RAISE EXCEPTION USING ERRCODE = '%s', MESSAGE = 'runclaim: schema step already applied'; END IF; END", cond, skipStepCode)
	return "DO " + dollarQuote(body) + ";"
}

// dollarQuote quotes s as a dollar-quoted string literal. The literal
// ends at the first occurrence of its tag after the opening one, so the
// tag must first occur in s followed by the tag at the very end: not
// inside s, and not across its end (s = "runs$q" with tag "$q$" would end
// the literal at "$q$q$"'s first "$q$").
func dollarQuote(s string) string { return dollarQuoteWith("q", s) }

// keySeqMarker is a text that version 10's bodies of the claim function's
// overloads with keys and with a state hold, and no body before them.
const keySeqMarker = "ORDER BY m.seq DESC"

// claimRacesMarker is a text that the body of version 7's claim function
// with a tick holds, and no body before it.
const claimRacesMarker = "transaction_read_only"

// errSchemaHint explains an error that a table older than this release
// needs would give.
var errSchemaHint = errors.New("the runs table may be at an older schema version than this release needs; run Migrate (or apply the Migrations) first")

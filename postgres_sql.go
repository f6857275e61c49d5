package runclaim

import (
	"embed"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The store's SQL lives in sql/, embedded:
//
//   - NNN_<what>.up.sql and .down.sql are the schema's steps
//     (postgres_migrate.go), frozen once released.
//   - The other files hold the statements the store sends, each after a
//     "-- name: <name>" line (a file without such lines is embedded and
//     filled by its own code), with "--" comments beside the clauses they
//     explain. The comments are cut when the files are loaded, so the
//     server gets the statements as they were before they moved here.
//
// The SQL names the runs table, and what is named after it, through
// placeholders, filled in once per store (fillNames):
//
//   - {{table}}: the table, quoted and schema-qualified;
//   - {{table_running}}, {{table_history}}: its indexes, quoted;
//   - {{table_claim}}: the claim function of versions 3 to 10, quoted and
//     schema-qualified; {{table_claim_body}} that of the current version
//     (sql/claim.sql), {{table_claim_prev}} that of the version before, and
//     {{table_claim11}} that of version 11 (sql/released/claim_11.sql);
//   - {{table_tick}}: the index of ticks served (version 4), quoted, and
//     {{schema_table_tick}}, the same schema-qualified;
//   - {{table_control}}: the table of pauses and triggers (version 5),
//     quoted and schema-qualified;
//   - {{table_keys}}, {{table_starts}}: the tables of keys' limits and
//     cooldowns and of keys' starts (version 8), quoted and
//     schema-qualified; {{table_keyed}} and {{table_keyset}}, the indexes
//     of running runs naming one key and more than one, quoted, and
//     {{schema_table_keyed}} and {{schema_table_keyset}}, the same
//     schema-qualified;
//   - {{table_nth}}: the index of keys' starts by number (version 10),
//     quoted, and {{schema_table_nth}} the same schema-qualified;
//     {{table_number}}, {{table_renum}}, {{table_keylock}} and
//     {{table_top}}: its functions, quoted and schema-qualified;
//   - {{table_literal}}, {{table_control_literal}}, {{table_keys_literal}},
//     {{table_starts_literal}}: the runs table's and the other tables'
//     quoted, schema-qualified names as dollar-quoted string literals,
//     with tags ($n$) that a body's $q$ does not end.
//
//go:embed sql/*.sql sql/released/*.sql
var sqlFiles embed.FS

// statements are the named statements of sql/, comments cut and the
// store-independent placeholders filled.
var statements = loadStatements()

// loadStatements reads every statement file of sql/: the files whose names
// do not start with a digit (those are the migrations) and that name their
// statements.
func loadStatements() map[string]string {
	consts := strings.NewReplacer(
		"{{lock_timeout_ms}}", strconv.FormatInt(claimLockTimeout.Milliseconds(), 10),
		"{{release_lock_wait_ms}}", strconv.FormatInt(releaseLockWait.Milliseconds(), 10),
		"{{operator_lock_wait_ms}}", strconv.FormatInt(operatorLockWait.Milliseconds(), 10),
	)
	out := map[string]string{}
	files, err := fs.Glob(sqlFiles, "sql/*.sql")
	if err != nil {
		panic("runclaim: " + err.Error())
	}
	for _, f := range files {
		base := strings.TrimPrefix(f, "sql/")
		if base[0] >= '0' && base[0] <= '9' {
			continue
		}
		text := readSQL(f)
		if !strings.HasPrefix(text, nameMarker) && !strings.Contains(text, "\n"+nameMarker) {
			continue // a file its own code embeds and fills (postgres_admin.go's)
		}
		for name, q := range parseStatements(base, text) {
			if _, dup := out[name]; dup {
				panic("runclaim: statement " + name + " is named twice in sql/")
			}
			out[name] = consts.Replace(q)
		}
	}
	return out
}

// readSQL returns an embedded file's text.
func readSQL(path string) string {
	b, err := sqlFiles.ReadFile(path)
	if err != nil {
		panic("runclaim: " + err.Error())
	}
	return string(b)
}

// nameMarker starts the line that names the statement after it.
const nameMarker = "-- name: "

// parseStatements splits a statement file at its "-- name: " lines, and
// cuts the comments of each statement.
func parseStatements(file, text string) map[string]string {
	const marker = nameMarker
	out := map[string]string{}
	var name string
	var lines []string
	flush := func() {
		if name != "" {
			out[name] = strings.TrimRight(strings.Join(lines, "\n"), "\n")
		}
	}
	for line := range strings.SplitSeq(text, "\n") {
		if n, ok := strings.CutPrefix(line, marker); ok {
			flush()
			name, lines = strings.TrimSpace(n), nil
			continue
		}
		code, hadComment := cutComment(line)
		if name == "" || hadComment && strings.TrimSpace(code) == "" {
			continue // before the first statement, or a line of comment only
		}
		lines = append(lines, code)
	}
	flush()
	if len(out) == 0 {
		panic("runclaim: sql/" + file + " names no statement")
	}
	return out
}

// cutComment cuts a "--" comment, and the blanks before it, from an SQL
// line. A "--" inside a quoted string or identifier is not a comment.
func cutComment(line string) (code string, cut bool) {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && i+1 < len(line) && line[i+1] == '-':
			return strings.TrimRight(line[:i], " \t"), true
		}
	}
	return line, false
}

// statement returns the named statement with s's names filled in.
func (s *PostgresStore) statement(name string) string {
	q, ok := statements[name]
	if !ok {
		panic(fmt.Sprintf("runclaim: no statement %q in sql/", name))
	}
	return s.fillNames(q)
}

// fillNames fills the table's names into SQL from sql/.
func (s *PostgresStore) fillNames(q string) string {
	return strings.NewReplacer(
		"{{table}}", s.Table(),
		"{{table_running}}", pgx.Identifier{s.table + runningSuffix}.Sanitize(),
		"{{table_history}}", pgx.Identifier{s.table + historySuffix}.Sanitize(),
		"{{table_claim}}", s.claimFunc(),
		"{{table_claim_body}}", s.claimBody(),
		"{{claim_body_literal}}", dollarQuoteWith("n", s.claimBody()+claimBodyArgs),
		"{{table_claim11}}", pgx.Identifier{s.schema, s.table + "_claim11"}.Sanitize(),
		"{{table_claim12}}", pgx.Identifier{s.schema, s.table + "_claim12"}.Sanitize(),
		"{{table_claim_prev}}", s.claimPrev(),
		"{{claim11_literal}}", dollarQuoteWith("n", pgx.Identifier{s.schema, s.table + "_claim11"}.Sanitize()+claimPrevArgs),
		"{{claim12_literal}}", dollarQuoteWith("n", pgx.Identifier{s.schema, s.table + "_claim12"}.Sanitize()+claimPrevArgs),
		"{{claim_v9_literal}}", dollarQuoteWith("n", s.claimFunc()+stateFuncArgs),
		"{{table_tick}}", pgx.Identifier{s.table + tickSuffix}.Sanitize(),
		"{{schema_table_tick}}", s.indexName(tickSuffix),
		"{{table_control}}", s.controlTable(),
		"{{table_literal}}", dollarQuoteWith("n", s.Table()),
		"{{table_control_literal}}", dollarQuoteWith("n", s.controlTable()),
		"{{table_keys}}", s.keysTable(),
		"{{table_starts}}", s.startsTable(),
		"{{table_keyed}}", pgx.Identifier{s.table + keyedSuffix}.Sanitize(),
		"{{schema_table_keyed}}", s.indexName(keyedSuffix),
		"{{table_keyset}}", pgx.Identifier{s.table + keysetSuffix}.Sanitize(),
		"{{schema_table_keyset}}", s.indexName(keysetSuffix),
		"{{table_keys_literal}}", dollarQuoteWith("n", s.keysTable()),
		"{{table_starts_literal}}", dollarQuoteWith("n", s.startsTable()),
		"{{table_states}}", s.statesTable(),
		"{{table_states_literal}}", dollarQuoteWith("n", s.statesTable()),
		"{{table_nth}}", pgx.Identifier{s.table + nthSuffix}.Sanitize(),
		"{{schema_table_nth}}", s.indexName(nthSuffix),
		"{{table_number}}", pgx.Identifier{s.schema, s.table + numberSuffix}.Sanitize(),
		"{{table_renum}}", pgx.Identifier{s.schema, s.table + renumSuffix}.Sanitize(),
		"{{table_keylock}}", pgx.Identifier{s.schema, s.table + keylockSuffix}.Sanitize(),
		"{{table_top}}", pgx.Identifier{s.schema, s.table + topSuffix}.Sanitize(),
		"{{table_replaced}}", pgx.Identifier{s.table + replacedSuffix}.Sanitize(),
	).Replace(q)
}

// claimFuncSuffix makes the claim function's name from the table's.
const claimFuncSuffix = "_claim"

// The claim function of the current schema version: the one body of
// sql/claim.sql, which the step of claimBodyVersion creates (its
// {{claim_body}} line), under a name that carries
// that version, so that a new body never replaces the one the replicas
// of the release before call. A store calls it on a table at the
// current version, and the function of the version before
// (claimPrevSuffix, whose released body sql/released holds), with the
// same arguments, on one at the version before.
const (
	claimBodyVersion = 13
	claimBodySuffix  = "_claim13" // claimFuncSuffix and claimBodyVersion; no longer than runningSuffix (see maxTableLen)
	claimPrevSuffix  = "_claim12" // the function of the version before: sql/released/claim_12.sql
	// claimBodyArgs are the current function's argument types: those of
	// the version before (claimPrevArgs), and the token of a claim with
	// Replace, which defaults to NULL, so that a call with the arguments
	// of the version before calls it too.
	claimBodyArgs = "(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[], pg_catalog.text)"
	claimPrevArgs = "(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[])"
)

// claimBody returns the quoted, schema-qualified name of the claim function
// of the current schema version.
func (s *PostgresStore) claimBody() string {
	return pgx.Identifier{s.schema, s.table + claimBodySuffix}.Sanitize()
}

// claimPrev returns the quoted, schema-qualified name of the claim
// function of the version before the current one.
func (s *PostgresStore) claimPrev() string {
	return pgx.Identifier{s.schema, s.table + claimPrevSuffix}.Sanitize()
}

// prevStatement returns the named statement as the version before sends
// it: the same text, calling the claim function of that version.
func (s *PostgresStore) prevStatement(name string) string {
	q, ok := statements[name]
	if !ok {
		panic(fmt.Sprintf("runclaim: no statement %q in sql/", name))
	}
	return s.fillNames(strings.ReplaceAll(q, "{{table_claim_body}}", "{{table_claim_prev}}"))
}

// claimFuncArgs are the claim function's argument types: the advisory key,
// the source, the owner, the lease and the minimum interval in
// microseconds, and the lock timeout in milliseconds.
const claimFuncArgs = "(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint)"

// claimFunc returns the quoted, schema-qualified name of the claim
// function.
func (s *PostgresStore) claimFunc() string {
	return pgx.Identifier{s.schema, s.table + claimFuncSuffix}.Sanitize()
}

// controlSuffix makes the control table's name from the runs table's. It
// is as long as runningSuffix, so the name fits in 63 bytes for every
// table name WithTable accepts (see maxTableLen).
const controlSuffix = "_control"

// controlVersion is the first schema version with pauses and triggers.
const controlVersion = 5

// controlTable returns the quoted, schema-qualified name of the table of
// pauses and triggers.
func (s *PostgresStore) controlTable() string {
	return pgx.Identifier{s.schema, s.table + controlSuffix}.Sanitize()
}

// Suffixes of the objects of version 8. None is longer than
// runningSuffix, so every name fits in 63 bytes (see maxTableLen).
const (
	keysSuffix   = "_keys"
	startsSuffix = "_starts"
	keyedSuffix  = "_keyed"
	keysetSuffix = "_keyset"
)

// Suffixes of the objects of version 10, which numbers each key's starts:
// the index of starts by key and number (nthSuffix), and the functions
// that number a start inserted (numberSuffix), close the gap a start
// deleted leaves (renumSuffix), derive the key's lock of the table (KeyLocks) in SQL for the latter
// (keylockSuffix), and read a key's newest number for a batch
// (topSuffix).
const (
	nthSuffix     = "_nth"
	numberSuffix  = "_number"
	renumSuffix   = "_renum"
	keylockSuffix = "_keylock"
	topSuffix     = "_top"
)

// keySeqVersion is the first schema version whose claims find a key's
// MaxStarts-th newest start by its number.
const keySeqVersion = 10

// keysVersion is the first schema version with keys.
const keysVersion = 8

// keyFuncArgs are the argument types of the claim function's overload
// with keys.
const keyFuncArgs = "(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], pg_catalog.text[], integer[])"

// keysTable returns the quoted, schema-qualified name of the table of
// keys' limits and cooldowns.
func (s *PostgresStore) keysTable() string {
	return pgx.Identifier{s.schema, s.table + keysSuffix}.Sanitize()
}

// startsTable returns the quoted, schema-qualified name of the table of
// keys' starts.
func (s *PostgresStore) startsTable() string {
	return pgx.Identifier{s.schema, s.table + startsSuffix}.Sanitize()
}

// statesSuffix makes the table of states' name from the runs table's; it
// is no longer than runningSuffix (see maxTableLen). Its first letters
// after the underscore differ from every other table's suffix, so that
// Postgres's names for the tables' primary keys, which cut the table's
// name to fit 63 bytes, stay apart for the longest table names too.
const statesSuffix = "_cursors"

// stateFuncVersion is the first schema version with states.
const stateFuncVersion = 9

// stateFuncArgs are the argument types of the claim function's overload
// of version 9.
const stateFuncArgs = "(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean)"

// statesTable returns the quoted, schema-qualified name of the table of
// states.
func (s *PostgresStore) statesTable() string {
	return pgx.Identifier{s.schema, s.table + statesSuffix}.Sanitize()
}

// Suffixes of the indexes' names; replacedSuffix is version 13's index of
// the ticks that replaced runs served.
const (
	runningSuffix  = "_running"
	historySuffix  = "_history"
	replacedSuffix = "_replcd"
)

// indexName returns the quoted, schema-qualified name of an index of the
// runs table.
func (s *PostgresStore) indexName(suffix string) string {
	return pgx.Identifier{s.schema, s.table + suffix}.Sanitize()
}

// tickFuncVersion is the first schema version with ticks.
const tickFuncVersion = 4

// tickFuncArgs are the argument types of the version 4 claim function.
const tickFuncArgs = "(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz)"

// tickSuffix makes the name of the index of ticks served from the
// table's.
const tickSuffix = "_tick"

// claimLockTimeout bounds how long a claim waits for a lock on the runs
// table (DDL, VACUUM FULL, an explicit LOCK TABLE): it then fails with
// SQLSTATE 55P03. It is shorter than claimGrace, so that a claim whose
// caller gave up always ends on the server before the grace does.
const claimLockTimeout = time.Second

// releaseLockWait is how long Release waits for the lock on the run's row
// before it gives up with ErrFenced. Heartbeats, finishes and claims hold
// that row for milliseconds; a fenced transaction, for as long as it is
// open.
const releaseLockWait = time.Second

// operatorLockWait bounds how long Pause, SetState and ClearState wait for
// the source's advisory lock, which a claim in flight holds for
// milliseconds (sql/control.sql's operator_lock_timeout).
const operatorLockWait = 5 * time.Second

// maxTableLen leaves room for the suffixes of the index names and the
// claim function's name ("_running", "_history", "_claim") within
// Postgres's 63-byte identifier limit.
const maxTableLen = 63 - len("_running")

// dollarQuoteWith is dollarQuote with tags that start with name: a
// literal inside a body quoted with $q$ takes another name, so that the
// body keeps its tag.
func dollarQuoteWith(name, s string) string {
	tag := "$" + name + "$"
	for i := 0; strings.Index(s+tag, tag) != len(s); i++ {
		tag = "$" + name + strconv.Itoa(i) + "$"
	}
	return tag + s + tag
}

// oldestClaimVersion is the oldest schema version a store claims on.
const oldestClaimVersion = LatestSchemaVersion - 1

// schemaCache is what a store knows of its table's schema version: 0 until
// it has read it (Migrate, SchemaVersion, or a read after a claim found
// the current claim function missing).
//
// A store claims on the current version with the claim function of
// claimBodyVersion, and on the version before it (oldestClaimVersion)
// with that version's statements. It takes a table to be current until
// a claim finds the function missing: it then reads the version, and, on
// the version before, sends that claim and the next ones in the form of
// that version, until schemaRecheck has passed; the claim after that
// tries the current function again, so that a store that started before
// another replica's Migrate moves to it by itself. A store that reads an
// older version refuses the claim (tooOldError).
type schemaCache struct {
	version atomic.Int64
	read    atomic.Int64 // when version was read, in Unix nanoseconds
	recheck time.Duration
}

// schemaRecheck bounds how long a store that found its table at the
// version before goes on claiming in that version's form after another
// replica's Migrate.
const schemaRecheck = 30 * time.Second

// set records version v, read now.
func (c *schemaCache) set(v int) {
	c.read.Store(time.Now().UnixNano())
	c.version.Store(int64(v))
}

// previous reports whether claims go in the form of the version before
// the current one.
func (c *schemaCache) previous() bool {
	return c.version.Load() == oldestClaimVersion &&
		time.Since(time.Unix(0, c.read.Load())) < c.recheck
}

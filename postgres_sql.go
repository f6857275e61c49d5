package runclaim

import (
	"embed"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The store's SQL lives in sql/, embedded:
//
//   - NNN_<what>.up.sql and .down.sql are the schema's steps (see
//     migrations in postgres_migrate.go), frozen once released.
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
//   - {{table_claim}}: the claim function, quoted and schema-qualified;
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
//go:embed sql/*.sql
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
			continue // a file its own code embeds and fills (postgres_check.go's)
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
	).Replace(q)
}

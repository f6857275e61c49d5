package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

func TestMigrate(t *testing.T) {
	db := pgtest.New(t)
	r := mustRun(t, db, exitOK, "migrate")
	if want := fmt.Sprintf(`created "public"."runclaim_runs" at schema version %d`, runclaim.LatestSchemaVersion); !strings.Contains(r.stdout, want) {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	// Idempotent, and says that it did nothing.
	r = mustRun(t, db, exitOK, "migrate")
	if want := fmt.Sprintf(`"public"."runclaim_runs" is already at schema version %d: nothing to do`, runclaim.LatestSchemaVersion); !strings.Contains(r.stdout, want) {
		t.Errorf("second migrate: stdout %q, want %q", r.stdout, want)
	}
	r = mustRun(t, db, exitOK, "migrate", "--json")
	obj := decodeObject(t, r.stdout, "table", "migrated", "from", "version", "latest")
	if obj["table"] != `"public"."runclaim_runs"` || obj["migrated"] != false ||
		num(t, obj["from"]) != float64(runclaim.LatestSchemaVersion) || num(t, obj["version"]) != float64(runclaim.LatestSchemaVersion) {
		t.Errorf("JSON %v", obj)
	}
	r = mustRun(t, db, exitOK, "--table", "json.runs", "migrate", "--json")
	obj = decodeObject(t, r.stdout, "table", "migrated", "from", "version", "latest")
	if obj["migrated"] != true || num(t, obj["from"]) != 0 || num(t, obj["version"]) != float64(runclaim.LatestSchemaVersion) {
		t.Errorf("JSON of a migrate that created the table: %v", obj)
	}

	// --table with a schema, before or after the command.
	mustRun(t, db, exitOK, "--table", "ops.job_runs", "migrate")
	mustRun(t, db, exitOK, "migrate", "--table=ops.job_runs")
	var n int
	if err := db.Pool.QueryRow(t.Context(),
		`SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = 'ops' AND tablename = 'job_runs'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("ops.job_runs: %d tables, %v", n, err)
	}
	// The table is used by the other commands.
	mustRun(t, db, exitOK, "--table", "ops.job_runs", "exec", "--source", "x", "--", "true")
	if r := mustRun(t, db, exitOK, "--table", "ops.job_runs", "history", "x", "--json"); len(decodeObjects(t, r.stdout, historyKeys...)) != 1 {
		t.Errorf("history in ops.job_runs: %s", r.stdout)
	}
	if r := mustRun(t, db, exitOK, "history", "x", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("history in the default table: %s, want []", r.stdout)
	}
	// RUNCLAIM_TABLE is the default of --table.
	clearEnv(t)
	t.Setenv(envDatabaseURL, db.DSN)
	t.Setenv(envTable, "ops.job_runs")
	if r := runInEnv(t, nil, "history", "x", "--json"); r.code != exitOK || len(decodeObjects(t, r.stdout, historyKeys...)) != 1 {
		t.Errorf("history with RUNCLAIM_TABLE: %+v", r)
	}
}

func TestMigrateSQL(t *testing.T) {
	// Prints the DDL without connecting: the URL points nowhere.
	clearEnv(t)
	t.Setenv(envDatabaseURL, "postgres://nobody:pw@127.0.0.1:1/none")
	r := runInEnv(t, nil, "--table", "jobs.runs", "migrate", "--sql")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	for _, want := range []string{`CREATE SCHEMA IF NOT EXISTS "jobs"`, `CREATE TABLE IF NOT EXISTS "jobs"."runs"`, `CREATE UNIQUE INDEX IF NOT EXISTS "runs_running"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("SQL does not contain %q:\n%s", want, r.stdout)
		}
	}
}

// TestMigrateSQLJSON: with --json, migrate --sql prints one JSON document
// with the table and the DDL, and still connects to nothing.
func TestMigrateSQLJSON(t *testing.T) {
	clearEnv(t)
	t.Setenv(envDatabaseURL, "postgres://nobody:pw@127.0.0.1:1/none")
	r := runInEnv(t, nil, "--table", "jobs.runs", "migrate", "--sql", "--json")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	obj := decodeObject(t, r.stdout, "table", "sql")
	text := runInEnv(t, nil, "--table", "jobs.runs", "migrate", "--sql")
	if obj["table"] != `"jobs"."runs"` || obj["sql"] != text.stdout {
		t.Errorf("JSON %v; want the table and the same DDL as without --json:\n%s", obj, text.stdout)
	}
}

func TestParseTable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][2]string{
		"runs":                     {"public", "runs"},
		"jobs.runs":                {"jobs", "runs"},
		"Jobs.Runs":                {"Jobs", "Runs"},
		`"my.schema".runs`:         {"my.schema", "runs"},
		`"my.schema"."my.table"`:   {"my.schema", "my.table"},
		`jobs."my.table"`:          {"jobs", "my.table"},
		`"my.table"`:               {"public", "my.table"},
		`"a""b".c`:                 {`a"b`, "c"},
		`"public"."runclaim_runs"`: {"public", "runclaim_runs"}, // as migrate --json prints it
		"таблица":                  {"public", "таблица"},
	} {
		schema, table, err := parseTable(in)
		if err != nil || schema != want[0] || table != want[1] {
			t.Errorf("parseTable(%s) = %q, %q, %v; want %q, %q", in, schema, table, err, want[0], want[1])
		}
	}
	for _, in := range []string{"a.b.c", ".runs", "jobs.", ".", `"unclosed.runs`, `"a"b.c`, `"a".`, `""."runs"`, `"a"."b".c`, `"a" .b`} {
		if s, tb, err := parseTable(in); err == nil {
			t.Errorf("parseTable(%s) = %q, %q; want an error", in, s, tb)
		}
	}
}

// TestTableWithDot: a schema whose name holds a dot is addressed quoted,
// by every command.
func TestTableWithDot(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const flag = `"my.schema".runs`
	mustRun(t, db, exitOK, "--table", flag, "migrate")
	var n int
	if err := db.Pool.QueryRow(t.Context(),
		`SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = 'my.schema' AND tablename = 'runs'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf(`"my.schema".runs: %d tables, %v`, n, err)
	}
	// A service with WithTable("my.schema", "runs") and the CLI see the
	// same runs.
	store, err := runclaim.NewPostgresStore(db.Pool, runclaim.WithTable("my.schema", "runs"))
	if err != nil {
		t.Fatal(err)
	}
	hold(t, store, "held", "svc-1")
	if r := mustRun(t, db, exitOK, "--table", flag, "status", "--json"); len(statusRunning(t, r.stdout)) != 1 {
		t.Errorf("status: %s", r.stdout)
	}
	mustRun(t, db, exitOK, "--table", flag, "exec", "--source", "x", "--", "true")
	if r := mustRun(t, db, exitOK, "history", "x", "--json", "--table="+flag); len(decodeObjects(t, r.stdout, historyKeys...)) != 1 {
		t.Errorf("history: %s", r.stdout)
	}
	if r := runCLI(t, db, nil, "--table", "my.schema.runs", "status"); r.code != exitUsage || !strings.Contains(r.stderr, `"my.schema".runs`) {
		t.Errorf("an unquoted second dot: %+v, want a usage error that shows how to quote", r)
	}
}

// TestMigrateStatus: --status reads the schema version and exits 3 while
// the table is older than this release needs, 0 once it is current; it
// changes nothing.
func TestMigrateStatus(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	want := runclaim.LatestSchemaVersion
	r := mustRun(t, db, exitOutdated, "migrate", "--status")
	if !strings.Contains(r.stdout, "does not exist") || !strings.Contains(r.stdout, "1: create the runs table") {
		t.Errorf("status of a missing table: %q", r.stdout)
	}
	// A table of the first release: version 1, step 2 missing.
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(t.Context(), store.Migrations()[0].Up+"COMMENT ON TABLE "+store.Table()+" IS NULL"); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, db, exitOutdated, "migrate", "--status", "--json")
	obj := decodeObject(t, r.stdout, "table", "version", "latest", "current", "missing", "advisory_locks")
	if obj["advisory_locks"] != "proven" {
		t.Errorf("status --json: advisory_locks %v, want proven", obj["advisory_locks"])
	}
	missing, _ := obj["missing"].([]any)
	if num(t, obj["version"]) != 1 || num(t, obj["latest"]) != float64(want) || obj["current"] != false || len(missing) != want-1 {
		t.Errorf("status of a version 1 table: %v", obj)
	}
	if have, _, err := store.SchemaVersion(t.Context()); err != nil || have != 1 {
		t.Errorf("--status changed the table: version %d, %v", have, err)
	}
	r = mustRun(t, db, exitOK, "migrate")
	if w := fmt.Sprintf("migrated %s from schema version 1 to %d", store.Table(), want); !strings.Contains(r.stdout, w) {
		t.Errorf("migrate of a version 1 table: %q, want %q", r.stdout, w)
	}
	r = mustRun(t, db, exitOK, "migrate", "--status")
	if !strings.Contains(r.stdout, fmt.Sprintf("schema version %d: current", want)) || strings.Contains(r.stdout, "missing") ||
		!strings.Contains(r.stdout, "advisory locks: exclude across sessions (proven") {
		t.Errorf("status after migrate: %q", r.stdout)
	}
	// Nothing missing: an empty list, not null.
	r = mustRun(t, db, exitOK, "migrate", "--status", "--json")
	if obj := decodeObject(t, r.stdout, "table", "version", "latest", "current", "missing", "advisory_locks"); !strings.Contains(r.stdout, `"missing": []`) || obj["current"] != true {
		t.Errorf("status --json of a current table: %s, want \"missing\": []", r.stdout)
	}
}

// TestMigratePrint: --print writes each step with a header, offline, as
// Migrations gives them; --down the steps that undo them, newest first;
// the flags that exclude each other are a usage error.
func TestMigratePrint(t *testing.T) {
	clearEnv(t)
	t.Setenv(envDatabaseURL, "postgres://nobody:pw@127.0.0.1:1/none")
	store, err := runclaim.NewPostgresStore(sqlOnly{}, runclaim.WithTable("jobs", "runs"))
	if err != nil {
		t.Fatal(err)
	}
	steps := store.Migrations()
	r := runInEnv(t, nil, "--table", "jobs.runs", "migrate", "--print")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	at := -1
	for _, m := range steps {
		header := fmt.Sprintf("-- runclaim schema version %d, up to: %s\n", m.Version, m.Name)
		i := strings.Index(r.stdout, header+m.Up)
		if i <= at {
			t.Errorf("step %d missing or out of order in:\n%s", m.Version, r.stdout)
		}
		at = i
	}
	r = runInEnv(t, nil, "--table", "jobs.runs", "migrate", "--print", "--down", "--json")
	if r.code != exitOK {
		t.Fatalf("%+v", r)
	}
	obj := decodeObject(t, r.stdout, "table", "steps")
	got, _ := obj["steps"].([]any)
	if len(got) != len(steps) {
		t.Fatalf("--print --down --json: %v", obj)
	}
	for i, s := range got {
		m := steps[len(steps)-1-i]
		step, _ := s.(map[string]any)
		if num(t, step["version"]) != float64(m.Version) || step["sql"] != m.Down {
			t.Errorf("down step %d: %v, want version %d with %q", i, step, m.Version, m.Down)
		}
	}
	for _, args := range [][]string{{"--print", "--status"}, {"--sql", "--print"}, {"--down"}, {"--status", "--down"}} {
		if r := runInEnv(t, nil, append([]string{"migrate"}, args...)...); r.code != exitUsage {
			t.Errorf("migrate %v: %+v, want a usage error", args, r)
		}
	}
}

// TestMigrateConcurrent: of three migrate --json at once on a fresh
// database, only the one that migrated says "migrated": true; the others
// say the table was current, at the version it reached.
func TestMigrateConcurrent(t *testing.T) {
	for range 3 {
		db := pgtest.New(t)
		clearEnv(t)
		t.Setenv(envDatabaseURL, db.DSN)
		results := make([]result, 3)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				<-start
				results[i] = runInEnv(t, nil, "migrate", "--json")
			})
		}
		close(start)
		wg.Wait()
		migrated := 0
		for _, r := range results {
			if r.code != exitOK {
				t.Fatalf("migrate --json: %+v", r)
			}
			obj := decodeObject(t, r.stdout, "table", "migrated", "from", "version", "latest")
			if num(t, obj["version"]) != float64(runclaim.LatestSchemaVersion) {
				t.Errorf("version %v, want %d", obj["version"], runclaim.LatestSchemaVersion)
			}
			switch obj["migrated"] {
			case true:
				migrated++
				if num(t, obj["from"]) != 0 {
					t.Errorf("the migrate that migrated says from %v, want 0", obj["from"])
				}
			case false:
				if num(t, obj["from"]) != float64(runclaim.LatestSchemaVersion) {
					t.Errorf("a migrate with nothing to do says from %v, want %d", obj["from"], runclaim.LatestSchemaVersion)
				}
			}
		}
		if migrated != 1 {
			t.Fatalf("%d of 3 concurrent migrate --json said they migrated, want 1:\n%v", migrated, results)
		}
	}
}

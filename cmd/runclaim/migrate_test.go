package main

import (
	"strings"
	"testing"

	"github.com/runclaim/runclaim/internal/pgtest"
)

func TestMigrate(t *testing.T) {
	db := pgtest.New(t)
	r := mustRun(t, db, exitOK, "migrate")
	if want := `"public"."runclaim_runs" is ready`; !strings.Contains(r.stdout, want) {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	// Idempotent, and JSON.
	r = mustRun(t, db, exitOK, "migrate", "--json")
	obj := decodeObject(t, r.stdout, "table", "migrated")
	if obj["table"] != `"public"."runclaim_runs"` || obj["migrated"] != true {
		t.Errorf("JSON %v", obj)
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

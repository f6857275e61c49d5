package runclaim_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runclaim/runclaim"
)

// TestMigrationsGolden: the steps of the schema, rendered for the default
// table, are byte for byte the files in testdata/migrations, after the
// statement that pins the search_path for the step's transaction. A released
// step never changes: a new function body, column or index is a new
// version. With RUNCLAIM_WRITE_GOLDEN=1 the test writes the files of a new
// version that has none yet; it never overwrites one.
func TestMigrationsGolden(t *testing.T) {
	t.Parallel()
	store, err := runclaim.NewPostgresStore(sqlOnlyQuerier{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range store.Migrations() {
		for _, f := range []struct{ kind, sql string }{{"up", m.Up}, {"down", m.Down}} {
			// The pin of the search_path that starts every step is not
			// part of the frozen text (G7; see pinSearchPathSQL).
			sql, pinned := strings.CutPrefix(f.sql, runclaim.PinSearchPathSQL)
			if !pinned {
				t.Errorf("step %d %s does not start by pinning the search_path:\n%s", m.Version, f.kind, f.sql)
			}
			f.sql = sql
			files, _ := filepath.Glob(filepath.Join("testdata", "migrations", fmt.Sprintf("%03d_*.%s.sql", m.Version, f.kind)))
			if len(files) == 0 && os.Getenv("RUNCLAIM_WRITE_GOLDEN") == "1" {
				name := strings.ReplaceAll(strings.ToLower(m.Name), " ", "_")
				path := filepath.Join("testdata", "migrations", fmt.Sprintf("%03d_%s.%s.sql", m.Version, name, f.kind))
				if err := os.WriteFile(path, []byte(f.sql), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("wrote %s", path)
				continue
			}
			if len(files) != 1 {
				t.Errorf("step %d %s: %d golden files in testdata/migrations, want 1", m.Version, f.kind, len(files))
				continue
			}
			want, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			if f.sql != string(want) {
				t.Errorf("step %d %s differs from %s, a released step: add a new version instead.\ngot:\n%s\nwant:\n%s",
					m.Version, f.kind, files[0], f.sql, want)
			}
		}
	}
}

// TestMigrationFiles: each version is one pair of files in sql/, listed
// once, and LatestSchemaVersion is the last of them.
func TestMigrationFiles(t *testing.T) {
	t.Parallel()
	store, err := runclaim.NewPostgresStore(sqlOnlyQuerier{})
	if err != nil {
		t.Fatal(err)
	}
	steps := store.Migrations()
	for _, kind := range []string{"up", "down"} {
		files, _ := filepath.Glob(filepath.Join("sql", "[0-9][0-9][0-9]_*."+kind+".sql"))
		if len(files) != len(steps) {
			t.Errorf("%d %s files in sql/, %d steps listed: list each file pair once", len(files), kind, len(steps))
		}
	}
	for i, m := range steps {
		if m.Version != i+1 {
			t.Errorf("step %d has version %d", i, m.Version)
		}
	}
	if last := steps[len(steps)-1].Version; last != runclaim.LatestSchemaVersion {
		t.Errorf("the last step is version %d, LatestSchemaVersion %d", last, runclaim.LatestSchemaVersion)
	}
}

// TestMigrationV1IsFirstRelease: step 1 creates the table exactly as the
// first release did (v1fixture_test.go), and then records version 1.
func TestMigrationV1IsFirstRelease(t *testing.T) {
	t.Parallel()
	for _, name := range []string{runclaim.DefaultTable, `runs "x"`, "runs$q"} {
		store, err := runclaim.NewPostgresStore(sqlOnlyQuerier{}, runclaim.WithTable(runclaim.DefaultSchema, name))
		if err != nil {
			t.Fatal(err)
		}
		table := store.Table()
		running, history := pgx.Identifier{name + "_running"}.Sanitize(), pgx.Identifier{name + "_history"}.Sanitize()
		want := fmt.Sprintf(v1TableSQL, table, running, table, history, table) +
			"COMMENT ON TABLE " + table + " IS 'runclaim schema version 1';\n"
		if got := strings.TrimPrefix(store.Migrations()[0].Up, runclaim.PinSearchPathSQL); got != want {
			t.Errorf("step 1 for %s:\n%s\nwant the first release's table:\n%s", table, got, want)
		}
	}
}

// sqlOnlyQuerier is a Querier for stores whose SQL is only rendered.
type sqlOnlyQuerier struct{ runclaim.Querier }

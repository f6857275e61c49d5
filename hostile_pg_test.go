package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// This file tests hostile and odd input against a real database: sources,
// owners and table names that try SQL injection, LIKE wildcards, escapes,
// Unicode tricks and the length limits. Each is either stored verbatim or
// refused with a clear error before any SQL is sent; none is executed,
// truncated or matched as a pattern. The same inputs seed the fuzz targets
// of fuzz_test.go.

// hostileSources are sources with what they must do: be stored verbatim
// (ok) or refused with ErrInvalidSource.
var hostileSources = []struct {
	name string
	s    string
	ok   bool
}{
	{"single quote", "it's", true},
	{"double quote", `say "hi"`, true},
	{"quotes only", `'"''""`, true},
	{"percent", "100%", true},
	{"percent alone", "%", true},
	{"underscore alone", "_", true},
	{"LIKE pattern", "a_%", true},
	{"backslash", `C:\path\`, true},
	{"backslash quote", `\'`, true},
	{"backslash escapes", `\n\x00\u0000`, true},
	{"SQL injection", "'; DROP TABLE runclaim_runs; --", true},
	{"SQL injection, double quote", `"; DROP TABLE runclaim_runs; --`, true},
	{"comment", "/* x */ -- y", true},
	{"dollar quoting", "$$; SELECT 1; $$", true},
	{"placeholder", "$1", true},
	{"fmt verbs", "%s %[1]s %d %!v %%", true},
	{"keyword", "SELECT", true},
	{"NULL as text", "NULL", true},
	{"4-byte UTF-8", "🦀😀", true},
	{"mixed scripts", "источник/ü-😀", true},
	{"right-to-left mark U+200F", "abc\u200fdef", false},
	{"right-to-left override U+202E", "\u202etxt.exe", false},
	{"combining characters", "e\u0301\u0301\u0327", true},
	{"zero-width joiners", "👨\u200d👩\u200d👧", false},
	{"byte order mark", "\ufeffsrc", false},
	{"line separator U+2028", "a\u2028b", false},
	{"paragraph separator U+2029", "a\u2029b", false},
	{"zero-width space U+200B", "night\u200bly", false},
	{"word joiner U+2060", "night\u2060ly", false},
	{"left-to-right isolate U+2066", "\u2066nightly\u2069", false},
	{"pop directional isolate U+2069 alone", "nightly\u2069", false},
	{"soft hyphen U+00AD", "night\u00adly", false},
	{"variation selector U+FE0F", "nightly\ufe0f", false},
	{"Hangul filler U+3164", "nightly\u3164", false},
	{"tag character U+E0041", "nightly\U000e0041", false},
	{"Arabic letters", "مصدر", true},
	{"emoji without joiners", "👨👩👧", true},
	{"noncharacter U+FFFF", "\uffff", true},
	{"highest code point", "\U0010ffff", true},
	{"spaces kept", "  src  ", true},
	{"exactly MaxSourceLen bytes", strings.Repeat("a", runclaim.MaxSourceLen), true},
	{"exactly MaxSourceLen bytes of 4-byte runes", strings.Repeat("😀", runclaim.MaxSourceLen/4), true},
	{"MaxSourceLen+1 bytes", strings.Repeat("a", runclaim.MaxSourceLen+1), false},
	{"MaxSourceLen+1 bytes, multibyte", strings.Repeat("😀", runclaim.MaxSourceLen/4) + "a", false},
	{"rune across the limit", strings.Repeat("a", runclaim.MaxSourceLen-2) + "😀", false},
	{"empty", "", false},
	{"NUL inside", "a\x00b", false},
	{"NUL alone", "\x00", false},
	{"trailing NUL", "src\x00", false},
	{"invalid UTF-8", "\xff\xfe", false},
	{"truncated UTF-8", "src\xf0\x9f\x98", false},
	{"overlong UTF-8 for /", "\xc0\xaf", false},
	{"UTF-16 surrogate in UTF-8", "\xed\xa0\x80", false},
	{"newline", "a\nb", false},
	{"carriage return", "a\rb", false},
	{"tab", "a\tb", false},
	{"ANSI escape", "\x1b[31mred", false},
	{"DEL", "a\x7f", false},
	{"C1 control U+0085", "a\u0085b", false},
	{"C1 control U+009B", "\u009b", false},
}

// TestHostileSources: every valid hostile source goes through Claim,
// Heartbeat, Running, Finish (with the source as the job's error text),
// History and Release, in pgx's default query mode, exec mode and the
// simple protocol (where pgx quotes values itself), and comes back byte for
// byte: the row's source as bytes is the input, and History and Running
// find exactly that source, never another one a LIKE pattern would match.
// Every invalid one is refused with ErrInvalidSource by Claim, Do,
// History, Running and Release with nothing sent to the server, and the
// table is unchanged.
func TestHostileSources(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	table := storeOn(t, db.Pool).Table()
	// Runs of other sources that a pattern would match.
	bystanders := newClaimer(t, migratedStore(t, db.Pool), runclaim.WithOwner("bystander"))
	for _, s := range []string{"abc", "a", "x", "100", "SELECT 1"} {
		run, err := bystanders.Claim(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Finish(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
	}

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(strings.ReplaceAll(mode.String(), " ", "_"), func(t *testing.T) {
			ctx := t.Context()
			pool, wire := countingPool(t, db, 2)
			if mode != pgx.QueryExecModeCacheStatement {
				pool = db.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			}
			store, err := runclaim.NewPostgresStore(pool)
			if err != nil {
				t.Fatal(err)
			}
			c := newClaimer(t, store, runclaim.WithOwner(`o'wner"; --`))
			for _, h := range hostileSources {
				if !h.ok {
					if mode == pgx.QueryExecModeCacheStatement {
						refused(t, db, table, store, c, wire, h.name, h.s)
					}
					continue
				}
				run, err := c.Claim(ctx, h.s)
				if err != nil {
					t.Errorf("%s: Claim(%q): %v", h.name, h.s, err)
					continue
				}
				var stored []byte
				var owner string
				if err := db.Pool.QueryRow(ctx, "SELECT convert_to(source, 'UTF8'), owner FROM "+table+" WHERE id = $1", run.ID).Scan(&stored, &owner); err != nil {
					t.Fatal(err)
				}
				if string(stored) != h.s || run.Source != h.s || owner != c.Settings().Owner {
					t.Errorf("%s: stored source %q, Run.Source %q, owner %q; want %q and %q", h.name, stored, run.Source, owner, h.s, c.Settings().Owner)
				}
				if err := run.Heartbeat(ctx); err != nil {
					t.Errorf("%s: Heartbeat: %v", h.name, err)
				}
				running, _, err := store.Running(ctx, h.s)
				if err != nil || len(running) != 1 || running[0].ID != run.ID || running[0].Source != h.s {
					t.Errorf("%s: Running(%q) = %+v, %v; want only run %d", h.name, h.s, running, err, run.ID)
				}
				if err := run.Finish(ctx, errors.New(h.s)); err != nil {
					t.Errorf("%s: Finish: %v", h.name, err)
				}
				hist, err := store.History(ctx, h.s, 100)
				if err != nil || len(hist) == 0 || hist[0].ID != run.ID || hist[0].Error != h.s {
					t.Errorf("%s: History(%q) = %+v, %v; want run %d first, with the source as its error text", h.name, h.s, hist, err, run.ID)
				}
				for _, r := range hist {
					if r.Source != h.s {
						t.Errorf("%s: History(%q) returned a run of %q", h.name, h.s, r.Source)
					}
				}
				// Released by source: the UPDATE must match this source only.
				again, err := c.Claim(ctx, h.s)
				if err != nil {
					t.Errorf("%s: Claim after Finish: %v", h.name, err)
					continue
				}
				rec, err := store.Release(ctx, 0, h.s)
				if err != nil || rec.ID != again.ID || rec.Source != h.s {
					t.Errorf("%s: Release(0, %q) = %+v, %v; want run %d", h.name, h.s, rec, err, again.ID)
				}
			}
			var others int64
			if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE owner = 'bystander' AND (status <> 'succeeded' OR error IS NOT NULL)").Scan(&others); err != nil {
				t.Fatal(err)
			}
			if others != 0 {
				t.Errorf("%d runs of other sources were changed", others)
			}
		})
	}
}

// refused checks that every entry point refuses source with
// ErrInvalidSource before anything is sent, and that the table is
// unchanged.
func refused(t *testing.T, db *pgtest.DB, table string, store *runclaim.PostgresStore, c *runclaim.Claimer, wire *sharedtest.Wire, name, source string) {
	t.Helper()
	ctx := t.Context()
	before := readState(t, db.Pool, table)
	w0, _ := wire.Counts()
	calls := map[string]func() error{
		"Claim": func() error { _, err := c.Claim(ctx, source); return err },
		"Do": func() error {
			return c.Do(ctx, source, func(context.Context, *runclaim.Run) error {
				t.Errorf("%s: Do called its function", name)
				return nil
			})
		},
		"store.Claim": func() error {
			_, err := store.Claim(ctx, runclaim.ClaimRequest{Source: source, Owner: "o", Lease: time.Minute})
			return err
		},
		"History": func() error { _, err := store.History(ctx, source, 10); return err },
	}
	if source != "" { // Running("") lists every source; Release(0, "") asks for an ID
		calls["Running"] = func() error { _, _, err := store.Running(ctx, source); return err }
		calls["Release"] = func() error { _, err := store.Release(ctx, 0, source); return err }
	}
	for what, call := range calls {
		err := call()
		if !errors.Is(err, runclaim.ErrInvalidSource) || errors.Is(err, runclaim.ErrNotClaimed) {
			t.Errorf("%s: %s(%.40q) = %v, want ErrInvalidSource", name, what, source, err)
		}
	}
	if w1, _ := wire.Counts(); w1 != w0 {
		t.Errorf("%s: %d writes reached the server for a refused source", name, w1-w0)
	}
	if diff := cmp.Diff(before, readState(t, db.Pool, table)); diff != "" {
		t.Errorf("%s: table changed (-before +after):\n%s", name, diff)
	}
}

// TestHostileOwner: owners are stored verbatim too, or refused by New.
// Unlike sources, owners may hold invisible characters (an owner names a
// holder for people; it is no key): the ops CLI shows them escaped.
func TestHostileOwner(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	for i, h := range hostileSources {
		if len(h.s) > runclaim.MaxOwnerLen {
			continue // MaxOwnerLen and MaxSourceLen are both 512 today
		}
		c, err := runclaim.New(store, runclaim.WithOwner(h.s))
		if !ownerOK(h.s) {
			if err == nil || !strings.Contains(err.Error(), "WithOwner") {
				t.Errorf("%s: New(WithOwner(%q)): %v, want an error naming WithOwner", h.name, h.s, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: New(WithOwner(%q)): %v", h.name, h.s, err)
			continue
		}
		run, err := c.Claim(ctx, fmt.Sprintf("owner-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if got := loadRun(t, db.Pool, store.Table(), run.ID).Owner; got != h.s || run.Owner != h.s {
			t.Errorf("%s: stored owner %q, Run.Owner %q, want %q", h.name, got, run.Owner, h.s)
		}
		_, err = newClaimer(t, store, runclaim.WithOwner("other")).Claim(ctx, run.Source)
		var nc *runclaim.NotClaimedError
		if !errors.As(err, &nc) || nc.Holder == nil || nc.Holder.Owner != h.s {
			t.Errorf("%s: the holder reported to a rival is %+v (%v), want owner %q", h.name, nc, err, h.s)
		}
	}
}

// hostileTableNames are schema and table names that try to inject SQL, or
// look like something other than one identifier.
var hostileTableNames = []struct{ schema, table string }{
	{"public", `runs"; DROP TABLE x; --`},
	{`s"; DROP TABLE x; --`, "runs"},
	{`x" CASCADE; DROP SCHEMA public CASCADE; --`, `t'; DELETE FROM x; --`},
	{"a.b", "c.d"},
	{"Mixed Case", "SELECT"},
	{"😀 schema", "таблица ✓"},
	{`back\slash`, `%s %[1]s $1 '`},
	{"public", `""`},
	{"public", strings.Repeat("é", 27) + "x"},
}

// TestHostileTableNames: table and schema names that try SQL injection are
// created verbatim, as quoted identifiers, and work end to end; nothing
// else happens: table x keeps its row, and the database holds exactly x,
// the hostile schemas and, for each store, its table, sequence and four
// indexes, and its control table and that table's key. Schema names that Postgres reserves are refused by Migrate with
// the server's error and create nothing.
func TestHostileTableNames(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE x (v int); INSERT INTO x VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	want := []string{"public.x"}
	schemas := []string{"public"}
	for _, n := range hostileTableNames {
		store := migratedStore(t, db.Pool, runclaim.WithTable(n.schema, n.table))
		if !slices.Contains(schemas, n.schema) {
			schemas = append(schemas, n.schema)
		}
		for _, suffix := range []string{"", "_id_seq", "_pkey", "_running", "_history", "_tick", "_control", "_replcd"} {
			want = append(want, n.schema+"."+n.table+suffix)
		}
		// The control table's primary key, named by Postgres: its name
		// cut to 63 bytes, on a character boundary, before the suffix.
		pk := n.table + "_control"
		if cut := 63 - len("_pkey"); len(pk) > cut {
			for cut > 0 && !utf8.RuneStart(pk[cut]) {
				cut--
			}
			pk = pk[:cut]
		}
		want = append(want, n.schema+"."+pk+"_pkey")
		// Version 8's indexes and tables, and the tables' primary keys,
		// named as the control table's is.
		want = append(want, n.schema+"."+n.table+"_keyed", n.schema+"."+n.table+"_keyset", n.schema+"."+n.table+"_keys", n.schema+"."+n.table+"_starts", n.schema+"."+n.table+"_nth")
		// Version 9's table of states, and its primary key.
		want = append(want, n.schema+"."+n.table+"_cursors")
		for _, tbl := range []string{n.table + "_keys", n.table + "_starts", n.table + "_cursors"} {
			if cut := 63 - len("_pkey"); len(tbl) > cut {
				for cut > 0 && !utf8.RuneStart(tbl[cut]) {
					cut--
				}
				tbl = tbl[:cut]
			}
			want = append(want, n.schema+"."+tbl+"_pkey")
		}
		c := newClaimer(t, store)
		run, err := c.Claim(ctx, "src")
		if err != nil {
			t.Errorf("%q.%q: Claim: %v", n.schema, n.table, err)
			continue
		}
		if err := run.Heartbeat(ctx); err != nil {
			t.Errorf("%q.%q: Heartbeat: %v", n.schema, n.table, err)
		}
		if err := run.Finish(ctx, nil); err != nil {
			t.Errorf("%q.%q: Finish: %v", n.schema, n.table, err)
		}
		if _, err := store.History(ctx, "src", 1); err != nil {
			t.Errorf("%q.%q: History: %v", n.schema, n.table, err)
		}
		if _, _, err := store.Running(ctx, ""); err != nil {
			t.Errorf("%q.%q: Running: %v", n.schema, n.table, err)
		}
		if _, err := store.Release(ctx, 0, "src"); !errors.Is(err, runclaim.ErrNotRunning) {
			t.Errorf("%q.%q: Release: %v, want ErrNotRunning", n.schema, n.table, err)
		}
		if _, err := store.Prune(ctx, 0); err != nil {
			t.Errorf("%q.%q: Prune: %v", n.schema, n.table, err)
		}
		var rows int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{n.schema, n.table}.Sanitize()).Scan(&rows); err != nil || rows != 1 {
			t.Errorf("%q.%q: %d rows (%v), want the one run", n.schema, n.table, rows, err)
		}
	}

	// Reserved schemas: the server refuses, nothing is created.
	for _, schema := range []string{"pg_temp", "pg_catalog", "pg_toast"} {
		store, err := runclaim.NewPostgresStore(db.Pool, runclaim.WithTable(schema, "runs"))
		if err != nil {
			continue // refusing them up front is fine too
		}
		err = store.Migrate(ctx)
		if err == nil || pgCode(err) == "" || !strings.HasPrefix(err.Error(), "runclaim: migrate: ") {
			t.Errorf("Migrate into schema %q: %v, want the server's error, wrapped", schema, err)
		}
		t.Logf("Migrate into schema %q: %v", schema, err)
	}

	var v int
	if err := db.Pool.QueryRow(ctx, "SELECT v FROM x").Scan(&v); err != nil || v != 42 {
		t.Fatalf("table x: v = %d, %v; want its row 42", v, err)
	}
	got := relations(t, db.Pool)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("relations in the database (-want +got):\n%s", diff)
	}
	var gotSchemas []string
	rows, err := db.Pool.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema' ORDER BY nspname`)
	if err != nil {
		t.Fatal(err)
	}
	if gotSchemas, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	slices.Sort(gotSchemas)
	slices.Sort(schemas)
	if diff := cmp.Diff(schemas, gotSchemas); diff != "" {
		t.Errorf("schemas (-want +got):\n%s", diff)
	}
}

// relations lists "schema.name" of every relation outside the system
// schemas, sorted.
func relations(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname NOT LIKE 'pg\_%' AND n.nspname <> 'information_schema' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

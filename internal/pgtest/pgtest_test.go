package pgtest

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestNewIsolated(t *testing.T) {
	ctx := t.Context()
	a, b := New(t), New(t)
	if a.Name == b.Name {
		t.Fatalf("two databases share the name %q", a.Name)
	}
	if !strings.Contains(a.DSN, a.Name) {
		t.Errorf("DSN %q does not name database %q", a.DSN, a.Name)
	}

	if _, err := a.Pool.Exec(ctx, "CREATE TABLE only_in_a (v int); INSERT INTO only_in_a VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := a.Pool.QueryRow(ctx, "SELECT v FROM only_in_a").Scan(&v); err != nil || v != 42 {
		t.Fatalf("read back from a: v=%d err=%v", v, err)
	}
	_, err := b.Pool.Exec(ctx, "SELECT * FROM only_in_a")
	if err == nil {
		t.Fatal("table created in a is visible in b")
	}
	if !strings.Contains(err.Error(), "42P01") { // undefined_table
		t.Fatalf("unexpected error from b: %v", err)
	}

	var cur string
	if err := b.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&cur); err != nil || cur != b.Name {
		t.Fatalf("b's pool is on %q (err %v), want %q", cur, err, b.Name)
	}
}

func TestCleanupDropsDatabase(t *testing.T) {
	srv := SharedServer(t)
	ctx := t.Context()
	var name string
	var open *pgx.Conn
	t.Run("inner", func(t *testing.T) {
		db := New(t)
		name = db.Name
		_ = db.NewPool(t, nil)
		// A connection still open at cleanup must not keep the database
		// from being dropped.
		var err error
		open, err = pgx.Connect(ctx, db.DSN)
		if err != nil {
			t.Fatal(err)
		}
	})
	if name == "" || open == nil {
		t.Fatal("inner test did not run")
	}
	defer open.Close(context.Background())
	conn, err := pgx.Connect(ctx, srv.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

func TestNewPool(t *testing.T) {
	db := New(t)
	pool := db.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 2
		c.ConnConfig.RuntimeParams["application_name"] = "pgtest-newpool"
	})
	if got := pool.Config().MaxConns; got != 2 {
		t.Errorf("MaxConns = %d, want 2", got)
	}
	var app, cur string
	err := pool.QueryRow(t.Context(), "SELECT current_setting('application_name'), current_database()").Scan(&app, &cur)
	if err != nil {
		t.Fatal(err)
	}
	if app != "pgtest-newpool" || cur != db.Name {
		t.Errorf("got application_name %q on %q, want pgtest-newpool on %q", app, cur, db.Name)
	}
}

func TestParallel(t *testing.T) {
	for i := range 4 {
		t.Run(string(rune('a'+i)), func(t *testing.T) {
			t.Parallel()
			db := New(t)
			if _, err := db.Pool.Exec(t.Context(), "CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestServerSettings(t *testing.T) {
	srv := SharedServer(t)
	if srv.Container == nil {
		t.Skip("server from PGTEST_DSN: its settings are not ours to check")
	}
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, srv.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for name, want := range map[string]string{"max_connections": "300", "fsync": "on"} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
}

func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u:p@127.0.0.1:5432/postgres?sslmode=disable", "postgres://u:p@127.0.0.1:5432/x?sslmode=disable"},
		{"postgresql://u@h/", "postgresql://u@h/x"},
		{"host=h user=u dbname=postgres", "host=h user=u dbname=postgres dbname=x"},
	} {
		got, err := withDatabase(tc.dsn, "x")
		if err != nil || got != tc.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tc.dsn, got, err, tc.want)
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil {
			t.Errorf("parse %q: %v", got, err)
		} else if cfg.Database != "x" {
			t.Errorf("%q names database %q, want x", got, cfg.Database)
		}
	}
	if _, err := withDatabase("postgres://%zz", "x"); err == nil {
		t.Error("bad URL accepted")
	}
}

// TestContainerRestart shows that a test can stop and start the shared
// container and keep using the same DSNs afterwards.
func TestContainerRestart(t *testing.T) {
	srv := SharedServer(t)
	if srv.Container == nil {
		t.Skip("server from PGTEST_DSN has no container")
	}
	if testing.Short() {
		t.Skip("restarts the server")
	}
	db := New(t)
	ctx := t.Context()
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Container.Stop(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.Ping(ctx); err == nil {
		t.Error("ping succeeded while the server was stopped")
	}
	if err := srv.Container.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitReady(ctx, srv.AdminDSN); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := db.Pool.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 7 {
		t.Fatalf("after restart: v=%d err=%v", v, err)
	}
}

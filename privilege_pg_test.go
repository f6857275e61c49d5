package runclaim_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// This file tests least privilege: an owner role migrates, an application
// role with only the grants docs/least-privilege.md lists does everything else; and no
// password or DSN secret ends up in an error or a log line.

// privEnv is a test database with two login roles: owner, which owns
// schema, and app, which has only the grants an application needs once
// the owner has migrated.
type privEnv struct {
	db     *pgtest.DB
	schema string
	owner  role
	app    role
}

type role struct{ name, password string }

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// appGrants are the statements docs/least-privilege.md tells the owner to run, with
// %[1]s the schema, %[2]s the table, %[4]s the control table, %[5]s the
// keys table and %[6]s the starts table (all quoted) and %[3]s the
// application's role.
var appGrants = []string{
	`GRANT USAGE ON SCHEMA %[1]s TO %[3]s`,
	`GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.%[2]s TO %[3]s`,
	`GRANT SELECT, UPDATE (triggered_at) ON %[1]s.%[4]s TO %[3]s`,
	`GRANT SELECT, INSERT (key, cooling_until, cooling_note, cooling_at), UPDATE (cooling_until, cooling_note, cooling_at) ON %[1]s.%[5]s TO %[3]s`,
	`GRANT SELECT, INSERT, DELETE ON %[1]s.%[6]s TO %[3]s`,
	`GRANT SELECT, INSERT (source, state, run_id, saved_at), UPDATE (state, run_id, saved_at) ON %[1]s.%[7]s TO %[3]s`,
}

// newPrivEnv creates the roles (dropped when the test ends: roles are
// global to the server, so their names are random), the schema owned by
// the owner role, and runs Migrate as the owner and the grants.
func newPrivEnv(t *testing.T) *privEnv { return newPrivEnvWithout(t, -1) }

// newPrivEnvWithout is newPrivEnv without the grant appGrants[skip] (all
// of them for -1).
func newPrivEnvWithout(t *testing.T, skip int) *privEnv {
	t.Helper()
	ctx := t.Context()
	db := pgtest.New(t)
	sfx := randomSuffix(t)
	e := &privEnv{
		db:     db,
		schema: "rc_" + sfx,
		owner:  role{"rc_owner_" + sfx, "s3cr3t-Own3r-" + sfx},
		app:    role{"rc_app_" + sfx, "s3cr3t-Pa55-" + sfx},
	}
	for _, r := range []role{e.owner, e.app} {
		admin(t, db, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", r.name, r.password))
		t.Cleanup(func() { dropRole(t, db, r.name) })
	}
	admin(t, db, fmt.Sprintf("CREATE SCHEMA %s AUTHORIZATION %s", e.schema, e.owner.name))

	store := e.store(t, e.pool(t, e.owner, nil))
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate as the owner: %v", err)
	}
	ownerPool := e.pool(t, e.owner, nil)
	schemaID, tableID := pgx.Identifier{e.schema}.Sanitize(), pgx.Identifier{runclaim.DefaultTable}.Sanitize()
	controlID := pgx.Identifier{runclaim.DefaultTable + "_control"}.Sanitize()
	keysID, startsID := pgx.Identifier{runclaim.DefaultTable + "_keys"}.Sanitize(), pgx.Identifier{runclaim.DefaultTable + "_starts"}.Sanitize()
	cursorsID := pgx.Identifier{runclaim.DefaultTable + "_cursors"}.Sanitize()
	for i, g := range appGrants {
		if i == skip {
			continue
		}
		if _, err := ownerPool.Exec(ctx, fmt.Sprintf(g, schemaID, tableID, e.app.name, controlID, keysID, startsID, cursorsID)); err != nil {
			t.Fatalf("grant as the owner: %v", err)
		}
	}
	return e
}

func admin(t *testing.T, db *pgtest.DB, sql string) {
	t.Helper()
	if _, err := db.Pool.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// dropRole drops a role and what it owns in the test database; the
// database itself is dropped later by pgtest.
func dropRole(t *testing.T, db *pgtest.DB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Errorf("drop role %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{
		"REASSIGN OWNED BY " + name + " TO CURRENT_USER",
		"DROP OWNED BY " + name,
		"DROP ROLE " + name,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Errorf("%s: %v", sql, err)
			return
		}
	}
}

// pool opens a pool to the test database as r. configure may change the
// config further.
func (e *privEnv) pool(t *testing.T, r role, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(e.db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password = r.name, r.password
	cfg.ConnConfig.Fallbacks = nil
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func (e *privEnv) store(t *testing.T, pool *pgxpool.Pool) *runclaim.PostgresStore {
	t.Helper()
	s, err := runclaim.NewPostgresStore(pool, runclaim.WithTable(e.schema, runclaim.DefaultTable))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLeastPrivilege: with USAGE on the schema and SELECT, INSERT, UPDATE,
// DELETE on the table, and nothing on the identity column's sequence, the
// application role can claim (won, lost, taken over, and in the explicit
// READ COMMITTED form), heartbeat, finish, Do, list, release and prune. It
// cannot create anything in the schema, so Migrate as the application fails
// with the server's permission error (42501), wrapped.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newPrivEnv(t)
	pool := e.pool(t, e.app, nil)
	store := e.store(t, pool)

	var seqUsage, seqUpdate, canCreate, canCreateDB bool
	err := e.db.Pool.QueryRow(ctx, `SELECT has_sequence_privilege($1, pg_get_serial_sequence($2, 'id'), 'USAGE'),
	has_sequence_privilege($1, pg_get_serial_sequence($2, 'id'), 'UPDATE'), has_schema_privilege($1, $3, 'CREATE'),
	has_database_privilege($1, current_database(), 'CREATE')`,
		e.app.name, store.Table(), e.schema).Scan(&seqUsage, &seqUpdate, &canCreate, &canCreateDB)
	if err != nil {
		t.Fatal(err)
	}
	if seqUsage || seqUpdate || canCreate || canCreateDB {
		t.Fatalf("the application role has more than docs/least-privilege.md's grants: sequence USAGE %v, UPDATE %v, schema CREATE %v, database CREATE %v",
			seqUsage, seqUpdate, canCreate, canCreateDB)
	}

	// Every form of the claim: the functions, through PUBLIC's EXECUTE on
	// them, and the batch.
	for _, f := range claimForms {
		fstore := formStore(t, pool, f, runclaim.WithTable(e.schema, runclaim.DefaultTable))
		// a's runs must be found held by b's claims, however slow the
		// machine: a lease of a minute. The run that is taken over has
		// a lease of its own, 1 s, which the test waits out (by the
		// database's clock).
		a := newClaimer(t, fstore, runclaim.WithOwner("a"), runclaim.WithLease(time.Minute))
		aDying := newClaimer(t, fstore, runclaim.WithOwner("a"), runclaim.WithLease(time.Second))
		b := newClaimer(t, fstore, runclaim.WithOwner("b"))
		src, deadSrc := "src-"+f.name, "dead-"+f.name
		run, err := a.Claim(ctx, src)
		if err != nil {
			t.Fatalf("%s: Claim as the application: %v", f.name, err)
		}
		if _, err := b.Claim(ctx, src); !errors.Is(err, runclaim.ErrAlreadyRunning) {
			t.Errorf("%s: losing Claim as the application: %v, want ErrAlreadyRunning", f.name, err)
		}
		if err := run.Heartbeat(ctx); err != nil {
			t.Errorf("Heartbeat as the application: %v", err)
		}
		if err := run.Finish(ctx, errors.New("boom")); err != nil {
			t.Errorf("Finish as the application: %v", err)
		}
		if err := b.Do(ctx, src, func(context.Context, *runclaim.Run) error { return nil }); err != nil {
			t.Errorf("%s: Do as the application: %v", f.name, err)
		}
		// A takeover: the claim marks the dead holder's run expired.
		dead, err := aDying.Claim(ctx, deadSrc)
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 10*time.Second, 5*time.Millisecond, "the lease to end", func() bool { return dbNow(t, e.db.Pool).After(dead.LeaseUntil) })
		next, err := b.Claim(ctx, deadSrc)
		if err != nil {
			t.Errorf("%s: takeover Claim as the application: %v", f.name, err)
		} else if err := next.Finish(ctx, nil); err != nil {
			t.Error(err)
		}
		if h, err := store.History(ctx, src, 10); err != nil || len(h) != 2 {
			t.Errorf("History as the application: %d runs, %v; want 2", len(h), err)
		}
	}
	a := newClaimer(t, store, runclaim.WithOwner("a"), runclaim.WithLease(time.Minute))
	if _, _, err := store.Running(ctx, ""); err != nil {
		t.Errorf("Running as the application: %v", err)
	}
	held, err := a.Claim(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Release(ctx, held.ID, ""); err != nil {
		t.Errorf("Release as the application: %v", err)
	}
	if n, err := store.Prune(ctx, 0); err != nil || n != 2*int64(len(claimForms)) {
		t.Errorf("Prune as the application: deleted %d, %v; want %d (the older runs of src and dead, in every form)", n, err, 2*len(claimForms))
	}

	// The explicit form, under a repeatable read default for the role.
	admin(t, e.db, fmt.Sprintf("ALTER ROLE %s IN DATABASE %s SET default_transaction_isolation = 'repeatable read'",
		e.app.name, pgx.Identifier{e.db.Name}.Sanitize()))
	rrPool := e.pool(t, e.app, nil)
	for _, f := range claimForms {
		rr := newClaimer(t, formStore(t, rrPool, f, runclaim.WithTable(e.schema, runclaim.DefaultTable)))
		for range 2 {
			run, err := rr.Claim(ctx, "rr")
			if err != nil {
				t.Fatalf("%s: Claim as the application under a repeatable read default: %v", f.name, err)
			}
			if err := run.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Migrate on a current schema only reads the catalogs: the
	// application may call it at every start (G9).
	if err := store.Migrate(ctx); err != nil {
		t.Errorf("Migrate as the application on a current schema: %v", err)
	}
	// What the application may not do: a step of the schema (here a
	// version 1 table's comment stands for an older schema).
	admin(t, e.db, "COMMENT ON TABLE "+store.Table()+" IS NULL")
	err = store.Migrate(ctx)
	if code := pgCode(err); code != "42501" || !strings.HasPrefix(err.Error(), "runclaim: migrate: ") {
		t.Errorf("Migrate as the application on an older schema: %v (SQLSTATE %q), want a wrapped 42501 insufficient_privilege", err, code)
	}
	for _, sql := range []string{
		"CREATE TABLE " + pgx.Identifier{e.schema, "evil"}.Sanitize() + " (v int)",
		"TRUNCATE " + store.Table(),
		"DROP TABLE " + store.Table(),
		"ALTER TABLE " + store.Table() + " DROP CONSTRAINT IF EXISTS x",
		"SELECT nextval(pg_get_serial_sequence('" + strings.ReplaceAll(store.Table(), "'", "''") + "', 'id'))",
	} {
		if _, err := pool.Exec(ctx, sql); pgCode(err) != "42501" {
			t.Errorf("as the application, %s: %v, want 42501", sql, err)
		}
	}
}

// TestClaimFunctionExecute: the claim function needs EXECUTE, which a new
// function grants to PUBLIC and which the owner does not revoke (the
// function is SECURITY INVOKER: EXECUTE lets a role do nothing it could not
// do by sending the batch). Where EXECUTE is revoked from PUBLIC (as
// ALTER DEFAULT PRIVILEGES ... REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC does
// for new functions), a claim fails with a wrapped 42501 that names the
// grant, writes nothing, and works once docs/least-privilege.md's GRANT EXECUTE is run.
// A role with EXECUTE but no privileges on the table cannot claim through
// the function.
func TestClaimFunctionExecute(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newPrivEnv(t)
	ownerPool := e.pool(t, e.owner, nil)
	appStore := formStore(t, e.pool(t, e.app, nil), claimForms[0], runclaim.WithTable(e.schema, runclaim.DefaultTable))
	fn := runclaim.ClaimBodyName(appStore) + runclaim.ClaimBodyArgs
	var public bool
	if err := e.db.Pool.QueryRow(ctx, "SELECT has_function_privilege('public', $1, 'EXECUTE')", fn).Scan(&public); err != nil || !public {
		t.Fatalf("PUBLIC's EXECUTE on %s after Migrate: %v, %v; want true", fn, public, err)
	}

	owner := func(sql string) {
		t.Helper()
		if _, err := ownerPool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	owner("REVOKE EXECUTE ON FUNCTION " + fn + " FROM PUBLIC")
	before := readState(t, e.db.Pool, appStore.Table())
	_, err := newClaimer(t, appStore).Claim(ctx, "src")
	if pgCode(err) != "42501" || !strings.Contains(err.Error(), "EXECUTE on function "+fn) || !strings.HasPrefix(err.Error(), "runclaim: claim ") {
		t.Errorf("Claim without EXECUTE on the function: %v, want a wrapped 42501 naming the grant", err)
	}
	if after := readState(t, e.db.Pool, appStore.Table()); after != before {
		t.Errorf("a claim refused EXECUTE changed the table: %+v, then %+v", before, after)
	}
	// docs/least-privilege.md's grant.
	owner(fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s TO %s", fn, e.app.name))
	if err := newClaimer(t, appStore).Do(ctx, "src", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
		t.Errorf("Do with EXECUTE granted to the application: %v", err)
	}

	// EXECUTE alone is not enough: the function runs as its caller.
	sfx := randomSuffix(t)
	nobody := role{"rc_nobody_" + sfx, "s3cr3t-N0b0dy-" + sfx}
	admin(t, e.db, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", nobody.name, nobody.password))
	t.Cleanup(func() { dropRole(t, e.db, nobody.name) })
	owner(fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s", pgx.Identifier{e.schema}.Sanitize(), nobody.name))
	owner(fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s TO %s", fn, nobody.name))
	before = readState(t, e.db.Pool, appStore.Table())
	nobodyStore := formStore(t, e.pool(t, nobody, nil), claimForms[0], runclaim.WithTable(e.schema, runclaim.DefaultTable))
	if _, err := newClaimer(t, nobodyStore).Claim(ctx, "other"); pgCode(err) != "42501" {
		t.Errorf("Claim by a role with EXECUTE but no privilege on the table: %v, want 42501", err)
	}
	if after := readState(t, e.db.Pool, appStore.Table()); after != before {
		t.Errorf("a refused claim changed the table: %+v, then %+v", before, after)
	}
}

// TestMigrateOwnerPrivileges: what Migrate needs of the owner role.
//
//   - The default table, public.runclaim_runs: CREATE on schema public,
//     nothing on the database.
//   - A schema the owner owns, without CREATE on the database: Migrate
//     works, and so does the script of SchemaSQL ('runclaim migrate
//     --sql'), applied as it is, twice: CREATE SCHEMA IF NOT EXISTS alone
//     would be refused with 42501 "permission denied for database" before
//     Postgres finds the schema, so the script runs it in a block that
//     ignores that refusal.
//   - USAGE only on someone else's schema: 42501, wrapped.
func TestMigrateOwnerPrivileges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newPrivEnv(t)
	dbID := pgx.Identifier{e.db.Name}.Sanitize()
	sfx := randomSuffix(t)
	plain := role{"rc_plain_" + sfx, "s3cr3t-Pla1n-" + sfx}
	admin(t, e.db, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", plain.name, plain.password))
	t.Cleanup(func() { dropRole(t, e.db, plain.name) })
	pool := e.pool(t, plain, nil)
	migrate := func(schema string) error {
		t.Helper()
		s, err := runclaim.NewPostgresStore(pool, runclaim.WithTable(schema, runclaim.DefaultTable))
		if err != nil {
			t.Fatal(err)
		}
		return s.Migrate(ctx)
	}

	admin(t, e.db, "GRANT CREATE ON SCHEMA public TO "+plain.name)
	if err := migrate("public"); err != nil {
		t.Errorf("Migrate into public with CREATE on it: %v", err)
	}
	if err := migrate("public"); err != nil {
		t.Errorf("Migrate into public again: %v", err)
	}

	owned := "owned_" + sfx
	admin(t, e.db, fmt.Sprintf("CREATE SCHEMA %s AUTHORIZATION %s", owned, plain.name))
	if err := migrate(owned); err != nil {
		t.Errorf("Migrate into a schema the role owns, without CREATE on the database: %v", err)
	}
	script := "script_" + sfx
	admin(t, e.db, fmt.Sprintf("CREATE SCHEMA %s AUTHORIZATION %s", script, plain.name))
	scriptStore, err := runclaim.NewPostgresStore(pool, runclaim.WithTable(script, runclaim.DefaultTable))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := pool.Exec(ctx, scriptStore.SchemaSQL()); err != nil {
			t.Fatalf("SchemaSQL applied as the owner of the schema, without CREATE on the database (time %d): %v", i+1, err)
		}
	}
	if have, _, err := scriptStore.SchemaVersion(ctx); err != nil || have != runclaim.LatestSchemaVersion {
		t.Errorf("after SchemaSQL: version %d, %v; want %d", have, err, runclaim.LatestSchemaVersion)
	}
	// A schema that is missing, without CREATE on the database: the refusal
	// is ignored, and the CREATE TABLE says the schema does not exist.
	missingStore, err := runclaim.NewPostgresStore(pool, runclaim.WithTable("missing_"+sfx, runclaim.DefaultTable))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, missingStore.SchemaSQL()); pgCode(err) != "3F000" {
		t.Errorf("SchemaSQL for a missing schema, without CREATE on the database: %v, want 3F000 (schema does not exist)", err)
	}

	other := "other_" + sfx
	admin(t, e.db, "CREATE SCHEMA "+other)
	admin(t, e.db, fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s", other, plain.name))
	admin(t, e.db, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s", dbID, plain.name))
	err = migrate(other)
	if pgCode(err) != "42501" || !strings.HasPrefix(err.Error(), "runclaim: migrate: ") || !strings.Contains(err.Error(), "CREATE on it to run Migrate") {
		t.Errorf("Migrate with USAGE only on the schema: %v, want a wrapped 42501 that names the CREATE it needs", err)
	}
	// Without USAGE on the schema: the error names the schema and USAGE.
	bare := "bare_" + sfx
	admin(t, e.db, "CREATE SCHEMA "+bare)
	if err := migrate(bare); pgCode(err) != "42501" || !strings.Contains(err.Error(), "the role needs USAGE on schema "+bare) {
		t.Errorf("Migrate without USAGE on the schema: %v, want a wrapped 42501 that names USAGE on %s", err, bare)
	}
	admin(t, e.db, fmt.Sprintf("GRANT CREATE ON SCHEMA %s TO %s", other, plain.name))
	if err := migrate(other); err != nil {
		t.Errorf("Migrate with USAGE and CREATE on the schema: %v", err)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex // protects buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestNoSecretsInErrorsOrLogs: with a wrong password, an unreachable
// port, a password changed under a live pool (so that heartbeats and the
// final Finish of held runs fail), and a read-only role, every error from
// NewPostgresStore, Migrate, Claim, Heartbeat, Finish, Do and the operator
// commands, and everything the Claimers log at Debug and above, is free of
// the passwords and the DSNs that carry them. The errors still say what
// went wrong (the server's SQLSTATE is there for errors.As).
func TestNoSecretsInErrorsOrLogs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newPrivEnv(t)
	wrong := role{e.app.name, "s3cr3t-Wr0ng-" + randomSuffix(t)}
	secrets := []string{e.app.password, e.owner.password, wrong.password}

	logs := &lockedBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var (
		mu   sync.Mutex // protects errs
		errs []string
	)
	keep := func(what string, err error) error {
		if err != nil {
			mu.Lock()
			errs = append(errs, what+": "+err.Error())
			mu.Unlock()
		}
		return err
	}
	hooks := runclaim.Hooks{
		HeartbeatFailed: func(ev runclaim.Event) { keep("hook HeartbeatFailed", ev.Err) },
		LeaseLost:       func(ev runclaim.Event) { keep("hook LeaseLost", ev.Err) },
	}
	// A lease under a second, so that the lost-lease paths whose errors
	// and logs the test reads come quickly; it asserts what the texts hold,
	// not when they come.
	const lease = 300 * time.Millisecond
	claimer := func(s runclaim.Store) *runclaim.Claimer {
		return newClaimer(t, s, runclaim.WithLogger(logger), runclaim.WithHooks(hooks), runclaim.WithLease(lease))
	}
	// everything calls every entry point once on store and returns the
	// errors it saw.
	everything := func(what string, pool *pgxpool.Pool) []error {
		store, err := runclaim.NewPostgresStore(pool, runclaim.WithTable(e.schema, runclaim.DefaultTable))
		if keep(what+" NewPostgresStore", err) != nil {
			return []error{err}
		}
		c := claimer(store)
		var out []error
		add := func(op string, err error) { out = append(out, keep(what+" "+op, err)) }
		add("Migrate", store.Migrate(ctx))
		_, err = c.Claim(ctx, "src")
		add("Claim", err)
		add("Do", c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { return nil }))
		_, err = store.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: 1, Source: "src", StartedAt: time.Now(), Lease: time.Minute})
		add("Heartbeat", err)
		add("Finish", store.Finish(ctx, runclaim.FinishRequest{ID: 1, Source: "src", StartedAt: time.Now(), Status: runclaim.StatusSucceeded}))
		_, _, err = store.Running(ctx, "")
		add("Running", err)
		_, err = store.History(ctx, "src", 1)
		add("History", err)
		_, err = store.Release(ctx, 1, "")
		add("Release", err)
		_, err = store.Prune(ctx, 0)
		add("Prune", err)
		return out
	}
	wantCode := func(what string, got []error, code string) {
		t.Helper()
		for _, err := range got {
			if err == nil {
				t.Errorf("%s: a call succeeded", what)
			} else if code != "" && pgCode(err) != code {
				t.Errorf("%s: %v, want SQLSTATE %s", what, err, code)
			}
		}
	}

	// 1. A wrong password.
	wantCode("wrong password", everything("wrong password", e.pool(t, wrong, nil)), "28P01")

	// 2. Nothing listening at the port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	unreachable := e.pool(t, e.app, func(c *pgxpool.Config) {
		c.ConnConfig.Host, c.ConnConfig.Port = "127.0.0.1", uint16(closedPort)
		c.ConnConfig.ConnectTimeout = 2 * time.Second
	})
	wantCode("unreachable", everything("unreachable", unreachable), "")

	// 3. The password changes under a pool that holds runs: heartbeats
	// (in Do and by hand) and the final Finish fail on new connections.
	pool := e.pool(t, e.app, nil)
	store := e.store(t, pool)
	c := claimer(store)
	byHand, err := c.Claim(ctx, "by-hand")
	if err != nil {
		t.Fatal(err)
	}
	var hbErr, finErr error
	doErr := c.Do(ctx, "in-do", func(runCtx context.Context, run *runclaim.Run) error {
		admin(t, e.db, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", e.app.name, "s3cr3t-N3w-"+e.app.password))
		pool.Reset() // every new connection now fails to authenticate
		hbErr = keep("changed password Heartbeat", byHand.Heartbeat(ctx))
		finErr = keep("changed password Finish", byHand.Finish(ctx, errors.New("job error")))
		<-runCtx.Done() // the lease ends by the local clock without a heartbeat
		return context.Cause(runCtx)
	})
	keep("changed password Do", doErr)
	secrets = append(secrets, "s3cr3t-N3w-"+e.app.password)
	for what, err := range map[string]error{"Heartbeat": hbErr, "Finish": finErr} {
		if pgCode(err) != "28P01" {
			t.Errorf("%s after the password changed: %v, want 28P01", what, err)
		}
	}
	if !errors.Is(doErr, runclaim.ErrLeaseLost) || pgCode(doErr) != "28P01" {
		t.Errorf("Do after the password changed: %v, want ErrLeaseLost and the final Finish's 28P01", doErr)
	}
	admin(t, e.db, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", e.app.name, e.app.password))

	// 4. Read-only sessions for the role.
	admin(t, e.db, fmt.Sprintf("ALTER ROLE %s IN DATABASE %s SET default_transaction_read_only = on", e.app.name, pgx.Identifier{e.db.Name}.Sanitize()))
	got := everything("read-only", e.pool(t, e.app, nil))
	// In order: Migrate, Claim, Do, Heartbeat, Finish, Running, History,
	// Release, Prune. Every write fails with 25006; the reads work, and so
	// does Migrate, which on a current schema only reads.
	for i, err := range got {
		switch {
		case i == 0 || i == 5 || i == 6:
			if err != nil {
				t.Errorf("read-only: read %d: %v", i, err)
			}
		case pgCode(err) != "25006":
			t.Errorf("read-only: call %d: %v, want 25006 read_only_sql_transaction", i, err)
		}
	}

	// 5. DSNs carrying the password that pgx cannot parse or use.
	u, err := url.Parse(e.db.DSN)
	if err == nil && u.Host != "" {
		u.User = url.UserPassword(e.app.name, e.app.password)
		q := u.Query()
		q.Set("connect_timeout", "2")
		u.RawQuery = q.Encode()
		dsn := u.String()
		secrets = append(secrets, dsn)
		bad := strings.Replace(dsn, u.Host, u.Hostname()+":notaport", 1)
		_, err := pgxpool.ParseConfig(bad)
		keep("pgxpool.ParseConfig of a bad DSN", err)
		cfg, err := pgxpool.ParseConfig(dsn)
		if err == nil {
			cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(closedPort)
			cfg.ConnConfig.Fallbacks = nil
			p, err := pgxpool.NewWithConfig(ctx, cfg)
			if err == nil {
				_, err = newClaimer(t, e.store(t, p)).Claim(ctx, "src")
				keep("Claim through a DSN pool", err)
				p.Close()
			}
		}
	} else {
		t.Logf("the pgtest DSN is not a URL; the DSN parse case is skipped")
	}

	all := strings.Join(errs, "\n")
	logText := logs.String()
	t.Logf("%d errors, %d bytes of logs; for example:\n%s", len(errs), len(logText), strings.Join(errs[:min(len(errs), 6)], "\n"))
	if len(errs) < 25 || !strings.Contains(logText, "heartbeat failed") || !strings.Contains(logText, "lease lost") {
		t.Errorf("the test saw too little: %d errors, logs without a failed heartbeat or a lost lease:\n%s", len(errs), logText)
	}
	for _, s := range secrets {
		for _, form := range []string{s, url.QueryEscape(s), url.PathEscape(s), strconv.Quote(s)} {
			for _, src := range []struct{ what, text string }{{"an error", all}, {"the logs", logText}} {
				for _, line := range strings.Split(src.text, "\n") {
					if strings.Contains(line, form) {
						t.Errorf("a secret appears in %s: %s", src.what, strings.ReplaceAll(line, form, "<SECRET>"))
					}
				}
			}
		}
	}
}

// cancelAfterSend is a Querier that cancels a context once a batch or a
// one-row query (the claim function's call) has been sent: a claim whose
// caller gives up after the server has it.
type cancelAfterSend struct {
	runclaim.Querier
	cancel context.CancelFunc
}

func (q cancelAfterSend) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r := q.Querier.QueryRow(ctx, sql, args...)
	q.cancel()
	return r
}

func (q cancelAfterSend) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	br := q.Querier.SendBatch(ctx, b)
	q.cancel()
	return br
}

// TestCancelledClaimWithDocumentedGrants: a claim whose caller gives up
// after the server has its batch, so that it wins after its context ended,
// deletes the run again as the application role with docs/least-privilege.md's grants
// (DELETE included, which is why it is there): the claim returns the
// context's error and the table is as before. Without DELETE the cleanup
// fails, and the claim says so.
func TestCancelledClaimWithDocumentedGrants(t *testing.T) {
	t.Parallel()
	e := newPrivEnv(t)
	ownerPool := e.pool(t, e.owner, nil)
	table := e.store(t, ownerPool).Table()
	claim := func(source string) error {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		store, err := runclaim.NewPostgresStore(cancelAfterSend{e.pool(t, e.app, nil), cancel}, runclaim.WithTable(e.schema, runclaim.DefaultTable))
		if err != nil {
			t.Fatal(err)
		}
		_, err = newClaimer(t, store).Claim(ctx, source)
		return err
	}
	lastID := func() int64 { // the identity's last value: a won claim advances it
		var v *int64
		if err := ownerPool.QueryRow(t.Context(), `SELECT last_value FROM pg_catalog.pg_sequences
WHERE schemaname || '.' || sequencename = pg_catalog.pg_get_serial_sequence($1, 'id')`, table).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v == nil {
			return 0
		}
		return *v
	}
	before, id := readState(t, ownerPool, table), lastID()
	if err := claim("cancelled"); !errors.Is(err, context.Canceled) {
		t.Fatalf("claim cancelled after it was sent: %v, want context.Canceled", err)
	}
	if lastID() == id {
		t.Fatal("the claim did not win after its context ended: the test shows nothing")
	}
	after := readState(t, ownerPool, table)
	if after.Rows != before.Rows || after.Running != before.Running {
		t.Errorf("a claim cancelled in flight left the table at %+v (before: %+v)", after, before)
	}

	admin(t, e.db, fmt.Sprintf("REVOKE DELETE ON %s FROM %s", table, e.app.name))
	err := claim("no-delete")
	if !errors.Is(err, context.Canceled) || pgCode(err) != "42501" || !strings.Contains(err.Error(), "could not be deleted") {
		t.Errorf("cancelled claim without DELETE: %v, want context.Canceled and the failed delete (42501)", err)
	}
}

// TestClaimBodyGrantsCopied: the step that creates the claim function of
// the current version gives EXECUTE on it to the roles that had EXECUTE on
// the function the release before calls, and, where that one was revoked
// from PUBLIC, revokes it from PUBLIC too: an upgrade neither locks out a
// role that could claim nor opens the new function to every role.
func TestClaimBodyGrantsCopied(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newPrivEnv(t)
	ownerPool := e.pool(t, e.owner, nil)
	ownerStore := e.store(t, ownerPool)
	steps := ownerStore.Migrations()
	last := steps[len(steps)-1]
	prevFn := runclaim.ClaimPrevName(ownerStore) + runclaim.ClaimPrevArgs
	bodyFn := runclaim.ClaimBodyName(ownerStore) + runclaim.ClaimBodyArgs
	for _, q := range []string{
		last.Down,
		"REVOKE EXECUTE ON FUNCTION " + prevFn + " FROM PUBLIC",
		"GRANT EXECUTE ON FUNCTION " + prevFn + " TO " + e.app.name,
	} {
		if _, err := ownerPool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := ownerStore.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var app, public bool
	if err := e.db.Pool.QueryRow(ctx, "SELECT has_function_privilege($1, $2, 'EXECUTE'), has_function_privilege('public', $2, 'EXECUTE')", e.app.name, bodyFn).Scan(&app, &public); err != nil {
		t.Fatal(err)
	}
	if !app || public {
		t.Errorf("EXECUTE on %s after the step: application %v, PUBLIC %v; want true, false (as on %s)", bodyFn, app, public, prevFn)
	}
	appStore := e.store(t, e.pool(t, e.app, nil))
	if err := newClaimer(t, appStore).Do(ctx, "src", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
		t.Errorf("the application's claim after the upgrade: %v", err)
	}
}

// TestEachGrantNeeded: the grants of docs/least-privilege.md (appGrants),
// one missing at a time: the application role's claims then fail, with a
// 42501 whose message names the object the missing grant is on, and the
// role's other calls do not pass as if nothing were missing.
func TestEachGrantNeeded(t *testing.T) {
	t.Parallel()
	objects := []string{"schema", "runclaim_runs", "runclaim_runs_control", "runclaim_runs_keys", "runclaim_runs_starts", "runclaim_runs_cursors"}
	if len(objects) != len(appGrants) {
		t.Fatalf("%d objects for %d grants", len(objects), len(appGrants))
	}
	for i, object := range objects {
		t.Run(object, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			e := newPrivEnvWithout(t, i)
			if object == "schema" {
				object = "schema " + e.schema
			} else {
				object = "table " + object
			}
			owner := e.store(t, e.pool(t, e.owner, nil))
			if err := owner.SetLimit(ctx, "site", runclaim.Limit{MaxRunning: 5}); err != nil {
				t.Fatal(err)
			}
			app := e.store(t, e.pool(t, e.app, nil))
			// A claim naming a key, as a Claimer with states makes it: it
			// reads and writes every table the grants cover.
			c, err := runclaim.New(app, runclaim.WithLease(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			run, err := c.Claim(ctx, "src", runclaim.WithKeys("site"))
			if err == nil {
				err = run.SaveState(ctx, []byte("cursor"))
				_ = run.Finish(ctx, nil)
			}
			// The server's message, and the store's hint, both name it.
			if pgCode(err) != "42501" || !strings.Contains(err.Error(), "permission denied for "+object+" (SQLSTATE 42501)") ||
				!strings.Contains(err.Error(), "on "+object) && !strings.Contains(err.Error(), "USAGE on "+object) {
				t.Fatalf("without the grant on %s: %v; want a 42501 that names it", object, err)
			}
		})
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// exitOutdated is what migrate --status exits with when the runs table is
// older than this release needs.
const exitOutdated = 3

// newMigrateCommand makes 'runclaim migrate', which brings the runs table to this release's schema version.
func newMigrateCommand(c *cli) *cobra.Command {
	cmd := define(c, &cobra.Command{
		Use:   "migrate [--status | --print [--down] | --sql]",
		Short: "bring the runs table to this release's schema version (idempotent)",
		Long: `Brings the runs table to the schema version this release needs, applying the
missing steps in order, each in a short transaction of its own. It is safe
to run again, and from several hosts at once. On a current schema it only
reads the catalogs: it takes no lock on the table and needs no privilege
beyond reading it. A step's DDL waits at most 500 ms for a lock on the
table (claims queue behind it no longer), and is tried three times; if the
table stays locked, migrate fails with an error that says so. It first
proves that the database's advisory locks exclude across sessions, which
every claim relies on, and refuses an engine whose locks do not
(docs/engines.md).

  --status   print the table's schema version and the one this release needs,
             the steps missing, and whether the database's advisory locks
             exclude across sessions (proven on two sessions, or cannot
             tell); exit 0 when the table is current (or newer), 3 when it
             is older, 1 on a database error or locks that do not exclude
  --print    print the SQL of every step, with a header naming its version,
             without connecting: for goose, atlas or golang-migrate, one file
             per step. With --down, the SQL that undoes each step, newest first
  --sql      print the whole schema as one idempotent script, without
             connecting

Each step commits with the session's synchronous_commit:
--synchronous-commit does not apply (migrate refuses it, and leaves
$RUNCLAIM_SYNCHRONOUS_COMMIT alone). To make a step wait for a synchronous
standby when the cluster's default does not, set it for the role
(ALTER ROLE name SET synchronous_commit = 'remote_apply') or in the
connection string: DATABASE_URL='postgres://...?options=-c%20synchronous_commit%3Don'.

Steps are additive: the previous release keeps working on a table a step
has changed, so apply a step before the release that needs it starts, and
roll the code back without undoing it. Run a --down step only once no
replica needs it.

Examples:
  runclaim migrate
  runclaim migrate --status
  runclaim --table jobs.runs migrate
  runclaim migrate --print > migrations/runclaim.sql

JSON output: {"table": "\"public\".\"runclaim_runs\"", "migrated": true,
"from": 0, "version": 13, "latest": 13}, where migrated says whether this
run applied a step (of several migrates at once, one applies them and says
true; the others wait for it, and say false), version is the table's and
latest this release's; with --status, {"table": ..., "version": 1,
"latest": 13, "current": false, "missing": [{"version": 2, "name": "..."}, ...],
"advisory_locks": "proven"} ("cannot tell", "refused"); with --print,
{"table": ..., "steps": [{"version": 1, "name": "...", "sql": "..."}]}; with
--sql, {"table": ..., "sql": "CREATE TABLE ..."}. The table is printed
quoted, as --table accepts it.`,
	}, runMigrate)
	return cmd
}

// migrateOptions are migrate's: what to do instead of migrating, if
// anything.
type migrateOptions struct {
	noArgs
	sql, print, down, status bool
}

func (o *migrateOptions) flags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.sql, "sql", false, "print the whole schema as one idempotent script and exit, without connecting")
	fs.BoolVar(&o.print, "print", false, "print the SQL of each step and exit, without connecting")
	fs.BoolVar(&o.down, "down", false, "with --print: the SQL that undoes each step, newest first")
	fs.BoolVar(&o.status, "status", false, "print the table's schema version and the one this release needs")
}

// Validate checks that the flags go together.
func (o *migrateOptions) Validate() error {
	n := 0
	for _, set := range []bool{o.sql, o.print, o.status} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return errors.New("--sql, --print and --status exclude each other")
	case o.down && !o.print:
		return errors.New("--down goes with --print")
	}
	return nil
}

func runMigrate(ctx context.Context, c *cli, o *migrateOptions) int {
	switch {
	case o.sql:
		return migrateSQL(c)
	case o.print:
		return migratePrint(c, o.down)
	}
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("migrate", err)
	}
	if o.status {
		return migrateStatus(ctx, c, store)
	}
	// The advisory-lock probe first (Migrate would make it), while the
	// pool has connections to spare: migrateLock holds one.
	if _, err := store.ProveExclusion(ctx); err != nil {
		return c.fail("migrate", err)
	}
	// Each step is a transaction of its own: two migrates at once could
	// each apply some. One at a time, the first applies them all, and
	// those that waited find the table current.
	unlock, err := c.migrateLock(ctx, store)
	if err != nil {
		return c.fail("migrate", err)
	}
	defer unlock()
	before, _, err := store.SchemaVersion(ctx)
	if err != nil {
		return c.fail("migrate", err)
	}
	applied, err := store.MigrateApplied(ctx)
	if err != nil {
		return c.fail("migrate", err)
	}
	have, _, err := store.SchemaVersion(ctx)
	if err != nil {
		return c.fail("migrate", err)
	}
	// migrated says whether this migrate applied a step, not whether
	// another (a service's Migrate at its start) did meanwhile.
	migrated := len(applied) > 0
	if c.json {
		if err := writeJSON(c.stdout, struct {
			Table    string `json:"table"`
			Migrated bool   `json:"migrated"`
			From     int    `json:"from"`
			Version  int    `json:"version"`
			Latest   int    `json:"latest"`
		}{store.Table(), migrated, before, have, runclaim.LatestSchemaVersion}); err != nil {
			return c.fail("migrate", err)
		}
		return exitOK
	}
	switch {
	case !migrated && before < have:
		fmt.Fprintf(c.stdout, "%s is at schema version %d: nothing to do (another migrate applied the steps meanwhile)\n", store.Table(), have)
	case !migrated:
		fmt.Fprintf(c.stdout, "%s is already at schema version %d: nothing to do\n", store.Table(), have)
	case before == 0:
		fmt.Fprintf(c.stdout, "created %s at schema version %d\n", store.Table(), have)
	default:
		fmt.Fprintf(c.stdout, "migrated %s from schema version %d to %d\n", store.Table(), before, have)
	}
	return exitOK
}

// migrateLockWait bounds how long migrateLock waits.
const migrateLockWait = 30 * time.Second

// migrateLock waits until no other 'runclaim migrate' of store's table
// runs, and holds it off until unlock: a transaction-scoped advisory lock,
// on a connection of its own, so that it works behind PgBouncer in
// transaction mode too. Its key is not the one the library's steps lock.
func (c *cli) migrateLock(ctx context.Context, store *runclaim.PostgresStore) (unlock func(), err error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		// Bounded: the key is no secret, and any role that can connect
		// could hold it for good.
		_, err = tx.Exec(ctx, fmt.Sprintf(`SELECT pg_catalog.set_config('lock_timeout', '%d', true)`, migrateLockWait.Milliseconds()))
	}
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended($1, 0))`, "runclaim migrate "+store.Table())
	}
	if err != nil {
		conn.Release()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			return nil, fmt.Errorf("wait for the other migrates: another session held the lock of 'runclaim migrate' for %v (another migrate applying a long step, or a stuck session: see docs/security.md); nothing was changed: %w", migrateLockWait, err)
		}
		return nil, fmt.Errorf("wait for the other migrates: %w", err)
	}
	return func() {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		conn.Release()
	}, nil
}

// offlineStore is a store for printing SQL: it never connects.
func (c *cli) offlineStore() (*runclaim.PostgresStore, error) {
	return runclaim.NewPostgresStore(sqlOnly{}, c.storeOptions()...)
}

func migrateSQL(c *cli) int {
	store, err := c.offlineStore()
	if err != nil {
		return c.fail("migrate", err) // checked in main already
	}
	if c.json {
		if err := writeJSON(c.stdout, struct {
			Table string `json:"table"`
			SQL   string `json:"sql"`
		}{store.Table(), store.SchemaSQL()}); err != nil {
			return c.fail("migrate", err)
		}
		return exitOK
	}
	fmt.Fprint(c.stdout, store.SchemaSQL())
	return exitOK
}

// stepJSON is one step as migrate --print --json writes it.
type stepJSON struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	SQL     string `json:"sql,omitempty"`
}

func migratePrint(c *cli, down bool) int {
	store, err := c.offlineStore()
	if err != nil {
		return c.fail("migrate", err)
	}
	steps := store.Migrations()
	if down {
		for i, j := 0, len(steps)-1; i < j; i, j = i+1, j-1 {
			steps[i], steps[j] = steps[j], steps[i]
		}
	}
	sqlOf := func(m runclaim.Migration) string {
		if down {
			return m.Down
		}
		return m.Up
	}
	if c.json {
		out := struct {
			Table string     `json:"table"`
			Steps []stepJSON `json:"steps"`
		}{Table: store.Table()}
		for _, m := range steps {
			out.Steps = append(out.Steps, stepJSON{m.Version, m.Name, sqlOf(m)})
		}
		if err := writeJSON(c.stdout, out); err != nil {
			return c.fail("migrate", err)
		}
		return exitOK
	}
	for i, m := range steps {
		if i > 0 {
			fmt.Fprintln(c.stdout)
		}
		what := "up to"
		if down {
			what = "down from"
		}
		fmt.Fprintf(c.stdout, "-- runclaim schema version %d, %s: %s\n%s", m.Version, what, m.Name, sqlOf(m))
	}
	return exitOK
}

func migrateStatus(ctx context.Context, c *cli, store *runclaim.PostgresStore) int {
	have, want, err := store.SchemaVersion(ctx)
	if err != nil {
		return c.fail("migrate", err)
	}
	missing := []stepJSON{} // [] in JSON, not null
	for _, m := range store.Migrations() {
		if m.Version > have {
			missing = append(missing, stepJSON{Version: m.Version, Name: m.Name})
		}
	}
	code := exitOK
	if have < want {
		code = exitOutdated
	}
	// The advisory-lock probe: "proven", "cannot tell" (no second session),
	// or "refused" (the engine's locks do not exclude: exit 1).
	locks, locksLine := "proven", "advisory locks: exclude across sessions (proven on two sessions)"
	proven, err := store.ProveExclusion(ctx)
	switch {
	case errors.Is(err, runclaim.ErrNoLockExclusion):
		locks, locksLine, code = "refused", "advisory locks: DO NOT EXCLUDE: "+err.Error(), exitError
	case err != nil:
		return c.fail("migrate", err)
	case !proven:
		locks, locksLine = "cannot tell", "advisory locks: cannot tell (the pool gave no second session; claims go on without the proof)"
	}
	if c.json {
		if err := writeJSON(c.stdout, struct {
			Table         string     `json:"table"`
			Version       int        `json:"version"`
			Latest        int        `json:"latest"`
			Current       bool       `json:"current"`
			Missing       []stepJSON `json:"missing"`
			AdvisoryLocks string     `json:"advisory_locks"`
		}{store.Table(), have, want, have >= want, missing, locks}); err != nil {
			return c.fail("migrate", err)
		}
		return code
	}
	defer fmt.Fprintln(c.stdout, locksLine)
	switch {
	case have == 0:
		fmt.Fprintf(c.stdout, "%s does not exist; this release needs schema version %d\n", store.Table(), want)
	case have > want:
		fmt.Fprintf(c.stdout, "%s is at schema version %d, newer than the %d this release needs: fine, steps are additive\n", store.Table(), have, want)
	case have == want:
		fmt.Fprintf(c.stdout, "%s is at schema version %d: current\n", store.Table(), have)
	default:
		fmt.Fprintf(c.stdout, "%s is at schema version %d; this release needs %d\n", store.Table(), have, want)
	}
	if len(missing) > 0 {
		var b strings.Builder
		for _, m := range missing {
			fmt.Fprintf(&b, "  %d: %s\n", m.Version, m.Name)
		}
		fmt.Fprintf(c.stdout, "missing steps (apply with 'runclaim migrate'):\n%s", b.String())
	}
	return code
}

package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/runclaim/runclaim"
)

func init() {
	register(&command{
		name:    "migrate",
		summary: "create the runs table and its indexes (idempotent)",
		usage:   "migrate [--sql]",
		help: `Creates the runs table and its indexes if they do not exist. It is safe to
run again, and from several hosts at once.

With --sql it prints the DDL instead, without connecting, for goose, atlas or
golang-migrate.

Examples:
  runclaim migrate
  runclaim --table jobs.runs migrate
  runclaim migrate --sql > migrations/0001_runclaim.sql

JSON output: {"table": "\"public\".\"runclaim_runs\"", "migrated": true}; with
--sql, {"table": ..., "sql": "CREATE TABLE ..."}. The table is printed
quoted, as --table accepts it.`,
		flags: func(fs *flag.FlagSet) any {
			return fs.Bool("sql", false, "print the DDL and exit, without connecting")
		},
		run: runMigrate,
	})
}

func runMigrate(ctx context.Context, c *cli, opts any, _ []string) int {
	printSQL := *opts.(*bool)
	if printSQL {
		store, err := runclaim.NewPostgresStore(sqlOnly{}, c.storeOptions()...)
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
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("migrate", err)
	}
	if err := store.Migrate(ctx); err != nil {
		return c.fail("migrate", err)
	}
	if c.json {
		if err := writeJSON(c.stdout, struct {
			Table    string `json:"table"`
			Migrated bool   `json:"migrated"`
		}{store.Table(), true}); err != nil {
			return c.fail("migrate", err)
		}
		return exitOK
	}
	fmt.Fprintf(c.stdout, "%s is ready\n", store.Table())
	return exitOK
}

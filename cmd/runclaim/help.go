package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// The help texts: the top-level usage, each command's --help, and the
// short message for a bad command line.

// badUsage reports a bad command line for the command that runs, found
// once its options are valid, and returns exitUsage.
func (c *cli) badUsage(format string, args ...any) int {
	return c.usageError(c.cmd, format, args...)
}

// usageError reports a bad command line for cmd and returns exitUsage. The
// message is made printable: it may quote what the operator typed.
func (c *cli) usageError(cmd *command, format string, args ...any) int {
	// The library's "runclaim: " prefix (from ValidateSource, say) after
	// "runclaim <command>: " would say it twice.
	msg := strings.TrimPrefix(fmt.Sprintf(format, args...), "runclaim: ")
	if c.json {
		c.jsonError(cmd.name, msg, "usage: runclaim "+cmd.usage+"; run 'runclaim "+cmd.name+" --help' for details")
		return exitUsage
	}
	fmt.Fprintf(c.stderr, "runclaim %s: %s\nusage: runclaim %s\nRun 'runclaim %s --help' for details.\n",
		cmd.name, visible(msg), cmd.usage, cmd.name)
	return exitUsage
}

func (c *cli) topUsage(w io.Writer) {
	fmt.Fprint(w, `runclaim: see and fix the runs that github.com/runclaim/runclaim records in
Postgres, and run commands under a claim.

Usage:
  runclaim [global flags] <command> [arguments]

Commands:
`)
	sorted := slices.SortedFunc(slices.Values(commands), func(a, b *command) int { return strings.Compare(a.name, b.name) })
	for _, cmd := range sorted {
		fmt.Fprintf(w, "  %-8s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprint(w, `
Global flags (also accepted after the command name):
  --table schema.table   runs table (default public.runclaim_runs, or $RUNCLAIM_TABLE);
                         quote a name that contains a dot: "my.schema".runs
  --namespace ns         advisory lock namespace, used by exec and pause (default
                         runclaim, or $RUNCLAIM_NAMESPACE); must match the services'
                         WithNamespace, or pause does not wait for their claims in flight
  --json                 print one JSON document instead of a table (every
                         command but exec, whose output is its command's);
                         errors too, as {"command", "error", "hint"} on stderr
  --synchronous-commit level
                         commit the writes of exec, release, prune, pause,
                         resume and trigger with synchronous_commit at level:
                         remote_apply, on, remote_write, local or off (default
                         $RUNCLAIM_SYNCHRONOUS_COMMIT, else the session's); the
                         other commands refuse it (see Synchronous commit below)

Other flags:
  --version              print the module version and VCS revision, and exit

Connection:
  DATABASE_URL (postgres://user:pass@host:5432/db?sslmode=... or key=value
  form) if set, else the standard PG* variables: PGHOST, PGPORT, PGUSER,
  PGPASSWORD, PGDATABASE, PGSSLMODE, PGCONNECT_TIMEOUT, PGAPPNAME, ...,
  and ~/.pgpass. Passwords are never printed. With none of them set, a
  failure to connect to pgx's defaults (a Unix socket, the system user) says
  so.

Synchronous commit:
  With synchronous standbys, --synchronous-commit on or remote_apply makes
  each write wait until a standby has it, so that a failover to that
  standby loses no claim, release or pause that runclaim reported. It is
  sent as SET LOCAL inside each of the command's own transactions, so it
  works behind PgBouncer in transaction pooling mode. Instead of the flag,
  set it for everything a role does:
    ALTER ROLE runclaim_ops SET synchronous_commit = 'remote_apply';
  or for every session of one connection string, migrate's included:
    DATABASE_URL='postgres://...?options=-c%20synchronous_commit%3Dremote_apply'
  (the options startup parameter, which libpq understands too). PgBouncer
  refuses a startup parameter it does not track (unsupported startup
  parameter) unless ignore_startup_parameters lists it, and then drops it:
  behind it, use the flag or ALTER ROLE.

Exit codes: 0 success, 1 error (database, or nothing to act on), 2 bad usage;
exec has more (see 'runclaim exec --help').

Run 'runclaim <command> --help' for a command's flags and examples.
`)
}

// commandHelp prints cmd's full help. fs, if not nil, lists its flags.
func (c *cli) commandHelp(w io.Writer, cmd *command, fs *flag.FlagSet) {
	if fs == nil {
		fs = c.commandFlags(cmd)
	}
	fmt.Fprintf(w, "usage: runclaim %s\n\n%s\n", cmd.usage, strings.TrimSpace(cmd.help))
	isGlobal := func(f *flag.Flag) bool { return globalFlagNames[f.Name] }
	if printFlags(w, fs, func(f *flag.Flag) bool { return !isGlobal(f) }, "\nFlags:\n") {
		if cmd.positional < 0 {
			fmt.Fprint(w, "\n(flags go before the command; -x and --x are the same)\n")
		} else {
			fmt.Fprint(w, "\n(flags may come before or after the arguments; -x and --x are the same)\n")
		}
	}
	// A command that does not write refuses --synchronous-commit.
	printFlags(w, fs, func(f *flag.Flag) bool { return isGlobal(f) && (cmd.writes || f.Name != syncCommitFlag) }, "\nGlobal flags:\n")
}

// printFlags prints the flags of fs that keep selects, under title, as
// flag.PrintDefaults does but with two dashes. It reports whether there
// were any.
func printFlags(w io.Writer, fs *flag.FlagSet, keep func(*flag.Flag) bool, title string) bool {
	found := false
	fs.VisitAll(func(f *flag.Flag) {
		if !keep(f) {
			return
		}
		if !found {
			fmt.Fprint(w, title)
			found = true
		}
		typ, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
	return found
}

// commandFlags returns the flag set of cmd: its own flags and the global
// ones.
func (c *cli) commandFlags(cmd *command) *flag.FlagSet {
	fs := flag.NewFlagSet("runclaim "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.globalFlags(fs, !cmd.noJSON)
	cmd.bind(fs)
	return fs
}

package main

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The help texts: the top-level usage, each command's --help, and the
// short message for a bad command line.

// unknownCommand matches cobra's error for a command that does not exist.
var unknownCommand = regexp.MustCompile(`^unknown command ("(?:[^"\\]|\\.)*") for "[^"]*"`)

// reportUsage reports err, from parsing the command line of cmd (root's
// if no command was recognised), and returns exitUsage: every error
// ExecuteC returns is one, since the commands report their own failures.
func (c *cli) reportUsage(root, cmd *cobra.Command, err error) int {
	if cmd == nil {
		cmd = root
	}
	msg := err.Error()
	if m := unknownCommand.FindStringSubmatch(msg); m != nil {
		name, _ := strconv.Unquote(m[1])
		hint := ""
		if s := root.SuggestionsFor(name); len(s) > 0 {
			hint = "did you mean " + strings.Join(s, " or ") + "?"
		}
		return c.topError(root, fmt.Sprintf("unknown command %q", name), hint)
	}
	if cmd != root && cmd.Name() != "help" {
		return c.usageError(cmd, "%s", msg)
	}
	if errors.Is(err, errNoCommand) && !c.json && !c.jsonArg {
		c.topUsage(c.stdout, root) // as gh and kubectl do: the help, and success
		return exitOK
	}
	return c.topError(root, msg, "")
}

// topError reports a bad command line that names no command in one line,
// with hint and where the help is (as gh and kubectl do, not the whole
// usage), and returns exitUsage.
func (c *cli) topError(root *cobra.Command, msg, hint string) int {
	if c.json || c.jsonArg {
		if hint == "" {
			hint = "run 'runclaim --help' for the commands"
		}
		c.jsonError("", msg, hint)
		return exitUsage
	}
	line := "runclaim: " + visible(msg)
	if hint != "" {
		line += "; " + visible(hint)
	}
	fmt.Fprintf(c.stderr, "%s\nRun 'runclaim --help' for the commands.\n", line)
	return exitUsage
}

// badUsage reports a bad command line for the command that runs, found
// once its options are valid, and returns exitUsage.
func (c *cli) badUsage(format string, args ...any) int {
	return c.usageError(c.cmd, format, args...)
}

// usageError reports a bad command line for cmd and returns exitUsage. The
// message is made printable: it may quote what the operator typed.
func (c *cli) usageError(cmd *cobra.Command, format string, args ...any) int {
	// The library's "runclaim: " prefix (from ValidateSource, say) after
	// "runclaim <command>: " would say it twice.
	msg := strings.TrimPrefix(fmt.Sprintf(format, args...), "runclaim: ")
	name := strings.TrimPrefix(cmd.CommandPath(), "runclaim ") // "completion bash", not "bash"
	if c.json || (c.jsonArg && takesJSON(cmd)) {
		c.jsonError(name, msg, "usage: "+usageLine(cmd)+"; run 'runclaim "+name+" --help' for details")
		return exitUsage
	}
	fmt.Fprintf(c.stderr, "runclaim %s: %s\nusage: %s\nRun 'runclaim %s --help' for details.\n",
		name, visible(msg), usageLine(cmd), name)
	return exitUsage
}

func (c *cli) topUsage(w io.Writer, root *cobra.Command) {
	fmt.Fprint(w, `runclaim: see and fix the runs that github.com/runclaim/runclaim records in
Postgres, and run commands under a claim.

Usage:
  runclaim [global flags] <command> [arguments]

Commands:
`)
	for _, cmd := range root.Commands() { // sorted by name
		if cmd.IsAvailableCommand() {
			fmt.Fprintf(w, "  %-11s %s\n", cmd.Name(), cmd.Short)
		}
	}
	fmt.Fprintf(w, "\nGlobal flags (also accepted after the command name):\n%s", root.PersistentFlags().FlagUsages())
	fmt.Fprintf(w, "\nOther flags:\n%s", root.LocalNonPersistentFlags().FlagUsages())
	fmt.Fprint(w, `
Shell completion: 'runclaim completion bash|zsh|fish' prints a script; see
'runclaim completion bash --help' for where it goes.

Connection:
  DATABASE_URL (postgres://user:pass@host:5432/db?sslmode=... or key=value
  form) if set, else the standard PG* variables: PGHOST, PGPORT, PGUSER,
  PGPASSWORD, PGDATABASE, PGSSLMODE, PGCONNECT_TIMEOUT, PGAPPNAME, ...,
  and ~/.pgpass. Passwords are never printed. With none of them set, a
  failure to connect to pgx's defaults (a Unix socket, the system user) says
  so.

Exit codes:
  0  success
  1  error: the database's, or nothing to act on (release); for check, an
     alarm fired; for status --overdue, a source is overdue
  2  bad usage: an unknown command or flag, a bad value; with --json, the
     error is a JSON object on stderr whatever it is
  3  check cannot tell (the database could not be read); migrate --status
     finds the table older than this release needs
  exec exits with its command's code, or codes of its own (75 skipped,
  69 claim failed, 70 run lost, 74 outcome unrecorded, 124 timed out,
  126/127 command not started; see 'runclaim exec --help').

Run 'runclaim <command> --help' for a command's flags and examples.
`)
}

// commandHelp prints cmd's full help: its synopsis, description, and
// flags, its own then the global ones it takes.
func (c *cli) commandHelp(w io.Writer, cmd *cobra.Command) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n", usageLine(cmd), strings.TrimSpace(cmd.Long))
	own := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" && !globalFlagNames[f.Name] {
			own.AddFlag(f)
		}
	})
	if own.HasFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", own.FlagUsages())
		if !strings.Contains(cmd.Use, " -- ") { // exec: flags, then -- and a command line
			fmt.Fprint(w, "\n(flags may come before or after the arguments; after --, everything is an argument)\n")
		} else {
			fmt.Fprint(w, "\n(flags go before the command, which follows --)\n")
		}
	}
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		// A command that does not write refuses --synchronous-commit.
		if globalFlagNames[f.Name] && (f.Name != syncCommitFlag || writes(cmd)) && (f.Name != "json" || takesJSON(cmd)) {
			global.AddFlag(f)
		}
	})
	if global.HasFlags() {
		fmt.Fprintf(w, "\nGlobal flags:\n%s", global.FlagUsages())
	}
}

// usageLine is cmd's synopsis: "runclaim history <source> [--limit N]".
func usageLine(cmd *cobra.Command) string {
	return cmd.CommandPath() + strings.TrimPrefix(cmd.Use, cmd.Name())
}

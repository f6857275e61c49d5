// Command runclaim is the operator's tool for the runs that package runclaim
// records in Postgres: create the table, see what is running, read a
// source's history, release a stuck run, prune old runs, and run a command
// under a claim (a distributed "flock -n" for crontabs on several hosts).
//
// Run "runclaim --help" for the commands and "runclaim <command> --help" for
// each one's flags, examples and exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes shared by every command. check, migrate --status and exec add
// their own.
const (
	exitOK    = 0
	exitError = 1 // a database error, or the operation could not be done
	exitUsage = 2 // bad command line
)

// Environment variables read besides the standard PG* ones.
const (
	envDatabaseURL = "DATABASE_URL"
	envTable       = "RUNCLAIM_TABLE"
	envNamespace   = "RUNCLAIM_NAMESPACE"
	// envSynchronousCommit is --synchronous-commit's default, for the
	// commands that write; the others leave it alone.
	envSynchronousCommit = "RUNCLAIM_SYNCHRONOUS_COMMIT"
)

// connectTimeout bounds each connection attempt unless PGCONNECT_TIMEOUT or
// connect_timeout in DATABASE_URL says otherwise.
const connectTimeout = 10 * time.Second

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// commands are runclaim's commands, each made by a constructor in a file
// of its own: its help, an options type with its flags, arguments and
// Validate, and a function that runs it (see define). 'runclaim --help'
// lists them by name. To add a command, add its file and its constructor
// here.
var commands = []func(*cli) *cobra.Command{
	newMigrateCommand,
	newStatusCommand,
	newHistoryCommand,
	newTicksCommand,
	newReleaseCommand,
	newReplaceCommand,
	newPauseCommand,
	newResumeCommand,
	newTriggerCommand,
	newPruneCommand,
	newExecCommand,
	newCheckCommand,
	newLimitCommand,
	newLimitsCommand,
	newCooldownCommand,
	newStateCommand,
	newUICommand,
}

// The annotations of a command (cobra.Command.Annotations).
const (
	// annotWrites marks a command whose writes go through the store's own
	// transactions, which --synchronous-commit applies to.
	annotWrites = "runclaim.writes"
	// annotNoJSON marks a command whose output is not the tool's (exec):
	// it refuses --json.
	annotNoJSON = "runclaim.nojson"
)

// writes reports whether cmd takes --synchronous-commit.
func writes(cmd *cobra.Command) bool { return cmd.Annotations[annotWrites] != "" }

// takesJSON reports whether cmd takes --json.
func takesJSON(cmd *cobra.Command) bool { return cmd.Annotations[annotNoJSON] == "" }

// options are one command's flags and positional arguments, in a struct of
// the command's own.
type options interface {
	// flags registers the flags on fs, with their defaults.
	flags(fs *pflag.FlagSet)
	// args takes the positional arguments, no more than the command's
	// Args allows.
	args(positional []string)
	// Validate checks the options once they are parsed, before anything
	// connects. Its error is reported as bad usage.
	Validate() error
}

// optionsPtr is a pointer to a command's options struct.
type optionsPtr[O any] interface {
	*O
	options
}

// define completes cmd, which runs run with options of type *O: it
// registers their flags, and runs the command once they and the global
// flags are valid. Without Args, cmd takes no positional argument.
func define[O any, P optionsPtr[O]](c *cli, cmd *cobra.Command, run func(ctx context.Context, c *cli, o P) int) *cobra.Command {
	o := P(new(O))
	o.flags(cmd.Flags())
	if cmd.Args == nil {
		cmd.Args = maxArgs(0)
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := c.checkGlobal(cmd); err != nil {
			return err
		}
		o.args(args)
		if err := o.Validate(); err != nil {
			return err
		}
		c.cmd = cmd
		c.code = run(cmd.Context(), c, o)
		return nil
	}
	return cmd
}

// maxArgs allows at most n positional arguments.
func maxArgs(n int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) > n {
			return fmt.Errorf("unexpected argument %q", args[n])
		}
		return nil
	}
}

// noArgs is embedded in the options of a command that takes no positional
// arguments.
type noArgs struct{}

func (noArgs) args([]string) {}

// cli is one invocation: its streams, its global flags and, once opened,
// its store.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	cmd  *cobra.Command // the command that runs
	code int            // its exit code

	table     string // --table: "schema.table" or "table"
	namespace string // --namespace
	json      bool   // --json
	// jsonArg is set when --json is on the command line, for the errors
	// found before the flags are parsed (an unknown command or flag).
	jsonArg bool
	// syncCommit is --synchronous-commit, given if syncCommitGiven; once
	// checked, the level for the store, or "".
	syncCommit      string
	syncCommitGiven bool

	pool        *pgxpool.Pool
	databaseURL string // --database-url, when given
	dsn         string // the URL connected to, whose password is never printed (see redact)
}

// run is the whole program: it parses args (without the program name), runs
// the command and returns the process exit code. It reads the environment
// for DATABASE_URL, the PG* variables, RUNCLAIM_TABLE, RUNCLAIM_NAMESPACE
// and RUNCLAIM_SYNCHRONOUS_COMMIT.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runEnv(ctx, args, stdin, stdout, stderr, os.Getenv)
}

// runEnv is run with the environment that getenv reads (run's is the
// process's; a test passes its own, and so may run in parallel).
func runEnv(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	defer c.close()
	c.jsonArg = jsonOnLine(args)
	root := c.newRoot()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		return c.reportUsage(root, cmd, err)
	}
	return c.code
}

// newRoot returns the command tree of runclaim, whose flags and commands
// set c.
func (c *cli) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "runclaim",
		Short:         "see and fix the runs that runclaim records in Postgres",
		Version:       versionLine(),
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(*cobra.Command, []string) error {
			return errNoCommand
		},
	}
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	if c.jsonArg { // --version --json: the same facts as one JSON object
		root.SetVersionTemplate(versionJSON() + "\n")
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// "-limit 5", as Go's flag package took it, reads as -l -i ...
		if m := singleDash.FindStringSubmatch(err.Error()); m != nil && cmd.Flags().Lookup(m[1]) != nil {
			return fmt.Errorf("-%s: a long flag takes two dashes: --%s", m[1], m[1])
		}
		// pflag's "invalid argument "abc" for "--limit" flag: strconv.ParseInt: ..."
		if m := badNumber.FindStringSubmatch(err.Error()); m != nil {
			return fmt.Errorf("%s: %q is not a whole number (e.g. %s 20)", m[2], m[1], m[2])
		}
		return err
	})
	c.globalFlags(root.PersistentFlags())
	for _, newCmd := range commands {
		root.AddCommand(newCmd(c))
	}
	// cobra's 'completion' command, listed in runclaim's words.
	root.InitDefaultCompletionCmd()
	if cmd, _, err := root.Find([]string{"completion"}); err == nil && cmd != root {
		cmd.Use = "completion bash|zsh|fish|powershell"
		cmd.Short = "print the shell completion script for bash, zsh, fish or powershell"
		// A completion script is a shell's, never JSON.
		cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
			if c.json {
				c.json, c.jsonArg = false, false // the error is about --json: not in JSON
				return errors.New("--json does not apply: completion prints a shell script")
			}
			return nil
		}
		cmd.RunE = func(_ *cobra.Command, args []string) error { // no shell, or an unknown one
			if len(args) > 0 {
				return fmt.Errorf("unknown shell %q: bash, zsh, fish or powershell", args[0])
			}
			return errors.New("give a shell: bash, zsh, fish or powershell")
		}
	}
	root.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		if cmd == root {
			c.topUsage(cmd.OutOrStdout(), root)
		} else {
			c.commandHelp(cmd.OutOrStdout(), cmd)
		}
	})
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "print a command's help",
		RunE: func(_ *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			switch {
			case err != nil:
				return err
			case len(rest) > 0:
				return fmt.Errorf("unknown command %q for %q", rest[0], "runclaim")
			}
			return cmd.Help()
		},
	})
	return root
}

// badNumber matches pflag's error for an integer flag given a value that
// is not one: the value and the flag.
var badNumber = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-[a-z], )?(--[a-z-]+)" flag: strconv\.Parse(?:Int|Uint)`)

// singleDash matches pflag's error for a long flag written with one dash.
var singleDash = regexp.MustCompile(`^unknown shorthand flag: '.' in -([a-z][a-z-]+)(=.*)?$`)

// errNoCommand is the error of a command line without a command.
var errNoCommand = errors.New("no command")

// jsonOnLine reports whether --json is among args, before a "--" and
// before exec's command line.
func jsonOnLine(args []string) bool {
	command := ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--":
			return false
		case a == "--json" || a == "--json=true":
			return true
		case a == "--table" || a == "--namespace" || a == "--"+syncCommitFlag || a == "--"+databaseURLFlag:
			i++ // the flag's value
		case command == "" && !strings.HasPrefix(a, "-"):
			command = a
			if command == "exec" {
				return false // the rest may be its command's
			}
		}
	}
	return false
}

// globalFlagNames are the flags globalFlags registers.
var globalFlagNames = map[string]bool{"table": true, "namespace": true, "json": true, syncCommitFlag: true, databaseURLFlag: true}

// databaseURLFlag is the global flag that names the database, in place of
// $DATABASE_URL.
const databaseURLFlag = "database-url"

// syncCommitFlag is the global flag that only the commands that write
// take: the others refuse it, and their help leaves it out.
const syncCommitFlag = "synchronous-commit"

// globalFlags registers the flags every command accepts, before or after
// its name.
func (c *cli) globalFlags(fs *pflag.FlagSet) {
	// No default from the environment: the help would print its password.
	fs.StringVar(&c.databaseURL, databaseURLFlag, "",
		"the database to connect to, as a `url` (postgres://user@host:5432/dbname); default $"+envDatabaseURL+", else the PG* variables")
	// The defaults from the environment are applied in checkGlobal, so
	// that the help shows one default, not the variable's value beside it.
	fs.StringVar(&c.table, "table", "",
		"runs table as `schema.table` or table; quote a name that contains a dot: \"my.schema\".runs (default public.runclaim_runs, or $"+envTable+")")
	fs.StringVar(&c.namespace, "namespace", "",
		"advisory lock `namespace`, used by exec, pause and state --set-file/--clear; must match the services' WithNamespace, or pause and state do not wait for their claims in flight (default runclaim, or $"+envNamespace+")")
	fs.BoolVar(&c.json, "json", false,
		"print one JSON document instead of a table (every command but exec, whose output is its command's); errors too, as {\"command\", \"error\", \"hint\"} on stderr")
	fs.Func(syncCommitFlag, "commit the writes of exec, release, prune, pause, resume and trigger with synchronous_commit at `level`: "+
		"remote_apply, on, remote_write, local or off (default $"+envSynchronousCommit+", else the session's); the other commands refuse it; "+
		"docs/cli.md says how to set it per role or in "+envDatabaseURL+" instead",
		func(s string) error {
			c.syncCommit, c.syncCommitGiven = s, true
			return nil
		})
}

// checkGlobal checks the global flags for cmd, before anything connects.
func (c *cli) checkGlobal(cmd *cobra.Command) error {
	if c.table == "" {
		c.table = c.getenv(envTable)
	}
	if c.namespace == "" {
		c.namespace = c.getenv(envNamespace)
	}
	if !takesJSON(cmd) && c.json {
		c.json, c.jsonArg = false, false // the error is about --json: not in JSON
		return fmt.Errorf("--json does not apply: %s prints no output of its own", cmd.Name())
	}
	if err := c.checkSynchronousCommit(cmd); err != nil {
		return err
	}
	if err := c.checkStoreOptions(); err != nil {
		return err
	}
	return nil
}

// syncCommitLevels are the levels of --synchronous-commit, as
// runclaim.WithSynchronousCommit takes them.
var syncCommitLevels = []string{"remote_apply", "on", "remote_write", "local", "off"}

// checkSynchronousCommit checks --synchronous-commit, or its variable, for
// cmd, and leaves in c.syncCommit the level for the store, or "". A
// command that does not write refuses the flag, and leaves the variable
// alone: a crontab sets it for all its lines.
func (c *cli) checkSynchronousCommit(cmd *cobra.Command) error {
	if !writes(cmd) {
		switch {
		case c.syncCommitGiven && cmd.Name() == "migrate":
			return fmt.Errorf("--%s does not apply to migrate: its steps commit with the session's synchronous_commit; "+
				"set that for the role (ALTER ROLE) or in %s (options=-c synchronous_commit=...): see 'runclaim migrate --help'", syncCommitFlag, envDatabaseURL)
		case c.syncCommitGiven:
			return fmt.Errorf("--%s does not apply: %s only reads", syncCommitFlag, cmd.Name())
		}
		c.syncCommit = ""
		return nil
	}
	level, given := c.syncCommit, fmt.Sprintf("--%s %q", syncCommitFlag, c.syncCommit)
	if !c.syncCommitGiven {
		level = c.getenv(envSynchronousCommit)
		if level == "" {
			return nil
		}
		given = envSynchronousCommit + "=" + level
	}
	if !slices.Contains(syncCommitLevels, level) {
		return fmt.Errorf("%s: synchronous_commit must be one of %s", given, strings.Join(syncCommitLevels, ", "))
	}
	c.syncCommit = level
	return nil
}

// fail prints err for cmd, without secrets, printable (see visibleLines)
// and with a hint where one helps, and returns exitError. With --json it
// prints {"command": cmd, "error": ..., "hint": ...} on one line instead.
func (c *cli) fail(cmd string, err error) int {
	msg := c.redact(describeError(cmd, err))
	if c.json {
		c.jsonError(cmd, msg, strings.TrimPrefix(strings.TrimSuffix(hint(err), ")"), "\n(hint: "))
		return exitError
	}
	fmt.Fprintf(c.stderr, "runclaim %s: %s%s\n", cmd, visibleLines(msg), hint(err))
	return exitError
}

// jsonError prints an error of cmd as a JSON object on stderr, for --json:
// {"command": "prune", "error": "...", "hint": "..."}, without "hint" if
// hint is "".
func (c *cli) jsonError(cmd, msg, hint string) {
	_ = writeJSON(c.stderr, struct {
		Command string `json:"command"`
		Error   string `json:"error"`
		Hint    string `json:"hint,omitempty"`
	}{cmd, msg, hint})
}

// describeError is err's text without the prefixes that the command's name
// replaces: the library's "runclaim: ", then cmd's own name, so that the
// line reads "runclaim prune: ..." and not "runclaim prune: prune: ...";
// and without the steps of pgx's own that say nothing of what went wrong
// ("rewrite query failed: ", see pgxSteps).
func describeError(cmd string, err error) string {
	msg := strings.TrimPrefix(err.Error(), "runclaim: ")
	msg = pgxSteps.ReplaceAllString(msg, "")
	return causeFirst(strings.TrimPrefix(msg, cmd+": "))
}

// pgxSteps are the words pgx puts before a server's error to say which of
// its steps met it: the step of a query, not what the operator can fix.
var pgxSteps = regexp.MustCompile(`(rewrite query failed|failed to encode args\[\d+\]|failed to prepare statement|prepare failed): `)

// causeFirst moves, in a connection error of pgx that lists one attempt a
// line (the default sslmode "prefer" tries TLS, then plain TCP), the lines
// of attempts that failed only because the server refused TLS after the
// others, so that a wrong password or an unknown database reads first.
func causeFirst(msg string) string {
	lines := strings.Split(msg, "\n")
	if len(lines) < 3 {
		return msg
	}
	var cause, tlsRefused []string
	for _, l := range lines[1:] {
		if strings.Contains(l, "server refused TLS connection") {
			tlsRefused = append(tlsRefused, l)
		} else {
			cause = append(cause, l)
		}
	}
	if len(cause) == 0 || len(tlsRefused) == 0 {
		return msg
	}
	return strings.Join(append(append(lines[:1:1], cause...), tlsRefused...), "\n")
}

// hints are the advice for the server's errors that an operator's
// setting causes, by SQLSTATE.
var hints = map[string]string{
	"42P01": "run 'runclaim migrate' first, or check --table",                                         // undefined_table
	"42883": "run 'runclaim migrate' first, or check --table",                                         // undefined_function: the claim function of a schema too old
	"28P01": "check the password in DATABASE_URL, PGPASSWORD or ~/.pgpass",                            // invalid_password
	"28000": "check the user in DATABASE_URL (or PGUSER), and the server's pg_hba.conf",               // invalid_authorization_specification
	"3D000": "check the database name in DATABASE_URL (or PGDATABASE)",                                // invalid_catalog_name
	"42P05": "behind PgBouncer in transaction mode, add default_query_exec_mode=exec to DATABASE_URL", // duplicate_prepared_statement
	"26000": "behind PgBouncer in transaction mode, add default_query_exec_mode=exec to DATABASE_URL", // invalid_sql_statement_name
	"53300": "the server has no connection slot left: try again, or raise max_connections",            // too_many_connections
	"25006": "DATABASE_URL points at a read-only server (a standby?): point it at the primary",        // read_only_sql_transaction
}

// deniedObject matches the server's message of a privilege refused: the
// kind of object and its name.
var deniedObject = regexp.MustCompile(`^permission denied for (table|schema|function|sequence|relation|database|view) (.+)$`)

// privilegeHint says which grant the server refused, from its message:
// what to grant on which object (the GRANT to run, as the object's owner),
// and where the full list is. With explained, the error's text names the
// missing grant already (the library's message does), and the hint gives
// the statement and the list only.
func privilegeHint(msg string, explained bool) string {
	const list = "docs/least-privilege.md lists what each command needs"
	m := deniedObject.FindStringSubmatch(msg)
	if m == nil {
		if explained {
			return list
		}
		return "the role connected as lacks a privilege; " + list
	}
	kind, name := m[1], m[2]
	why, grant := "", ""
	switch kind {
	case "schema":
		why = fmt.Sprintf("the role connected as may not use schema %s: migrate needs CREATE on it, every command USAGE", name)
		grant = fmt.Sprintf("GRANT CREATE, USAGE ON SCHEMA %s TO <role>; or name a schema the role may use with --table", name)
	case "function":
		why = fmt.Sprintf("the role connected as lacks EXECUTE on function %s", name)
		grant = fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s TO <role>", name)
	case "sequence":
		why = fmt.Sprintf("the role connected as lacks USAGE on sequence %s", name)
		grant = fmt.Sprintf("GRANT USAGE ON SEQUENCE %s TO <role>", name)
	default:
		why = fmt.Sprintf("the role connected as lacks a privilege on %s %s: this command reads or writes it", kind, name)
		grant = fmt.Sprintf("GRANT the privilege on %s %s TO <role>", kind, name)
	}
	if explained {
		return "as its owner, " + grant + "; " + list
	}
	return why + " (as its owner, " + grant + "); " + list
}

// hint is a line of advice for the mistakes operators make, or "".
func hint(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
		if said := err.Error(); strings.Contains(said, "the role needs") || strings.Contains(said, "the role lacks") {
			// The library's message named the grant already: the
			// statement to run, and the list, are what is left to say.
			return "\n(hint: " + privilegeHint(pgErr.Message, true) + ")"
		}
		return "\n(hint: " + privilegeHint(pgErr.Message, false) + ")"
	}
	if errors.As(err, &pgErr) && hints[pgErr.Code] != "" {
		return "\n(hint: " + hints[pgErr.Code] + ")"
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "\n(hint: nothing listens there: is the server running, and are the host and port in DATABASE_URL (or PGHOST, PGPORT) right?)"
	}
	return ""
}

// storeOptions are the store options that --table, --namespace and
// --synchronous-commit ask for. main has checked --table with
// checkStoreOptions, and --synchronous-commit with checkSynchronousCommit.
func (c *cli) storeOptions() []runclaim.PostgresOption {
	var opts []runclaim.PostgresOption
	if c.table != "" {
		schema, table, _ := parseTable(c.table)
		opts = append(opts, runclaim.WithTable(schema, table))
	}
	if c.namespace != "" {
		opts = append(opts, runclaim.WithNamespace(c.namespace))
	}
	if c.syncCommit != "" {
		opts = append(opts, runclaim.WithSynchronousCommit(c.syncCommit))
	}
	return opts
}

// parseTable splits --table into a schema and a table name: "runs" is the
// table runs in the default schema, "jobs.runs" the table runs in schema
// jobs. A name that contains a dot is written in double quotes, as in SQL,
// with a double quote inside doubled: "my.schema".runs, "a""b".runs.
// Names are taken as they are, without SQL's folding of unquoted names to
// lower case, since runclaim always quotes them (WithTable); so the form
// that store.Table() and 'migrate --json' print, "public"."runclaim_runs",
// reads back as the same table.
func parseTable(s string) (schema, table string, err error) {
	var parts []string
	rest := s
	for {
		var part string
		if strings.HasPrefix(rest, `"`) {
			// A quoted name runs to the next single double quote.
			var b strings.Builder
			i := 1
			for {
				j := strings.IndexByte(rest[i:], '"')
				if j < 0 {
					return "", "", fmt.Errorf("--table %s: unclosed double quote", s)
				}
				b.WriteString(rest[i : i+j])
				i += j + 1
				if !strings.HasPrefix(rest[i:], `"`) {
					break
				}
				b.WriteByte('"') // a doubled quote
				i++
			}
			part, rest = b.String(), rest[i:]
			if rest != "" && rest[0] != '.' {
				return "", "", fmt.Errorf("--table %s: a quoted name must be followed by a dot or nothing", s)
			}
		} else {
			end := strings.IndexByte(rest, '.')
			if end < 0 {
				end = len(rest)
			}
			part, rest = rest[:end], rest[end:]
			if strings.Contains(part, `"`) {
				return "", "", fmt.Errorf("--table %s: a double quote inside an unquoted name", s)
			}
		}
		if part == "" {
			return "", "", fmt.Errorf("--table %s: empty schema or table name", s)
		}
		parts = append(parts, part)
		if rest == "" {
			break
		}
		rest = rest[1:] // the dot
		if len(parts) == 2 {
			return "", "", fmt.Errorf(`--table %s: more than schema.table; quote a name that contains a dot, as in "my.schema".runs`, s)
		}
	}
	if len(parts) == 1 {
		return runclaim.DefaultSchema, parts[0], nil
	}
	return parts[0], parts[1], nil
}

// sqlOnly stands in for a pool where a store is needed only to check its
// options or render its SQL; it is never queried.
type sqlOnly struct{ runclaim.Querier }

// checkStoreOptions validates --table and --namespace before anything
// connects.
func (c *cli) checkStoreOptions() error {
	if c.table != "" {
		if _, _, err := parseTable(c.table); err != nil {
			return err
		}
	}
	_, err := runclaim.NewPostgresStore(sqlOnly{}, c.storeOptions()...)
	return err
}

// store opens the pool described by the environment and returns a store on
// the runs table named by --table.
func (c *cli) store(ctx context.Context) (*runclaim.PostgresStore, error) {
	if c.pool == nil {
		pool, err := c.openPool(ctx)
		if err != nil {
			return nil, err
		}
		c.pool = pool
	}
	return runclaim.NewPostgresStore(c.pool, c.storeOptions()...)
}

// pgEnv are the PG* variables that name a server to connect to, or who to
// connect as.
var pgEnv = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGSERVICE", "PGSERVICEFILE", "PGPASSFILE"}

// openPool connects lazily: the first query makes the first connection.
// When neither DATABASE_URL nor a PG* variable names a server, it connects
// at once instead, so that a failure to reach pgx's defaults (a Unix
// socket, the operating system's user name) says that nothing was set.
func (c *cli) openPool(ctx context.Context) (*pgxpool.Pool, error) {
	dsn := c.getenv(envDatabaseURL)
	if c.databaseURL != "" {
		dsn = c.databaseURL
	}
	c.dsn = dsn
	unset := dsn == ""
	for _, k := range pgEnv {
		if c.getenv(k) != "" {
			unset = false
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, parseConfigError(err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "runclaim"
	}
	cfg.MaxConns = 4
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open connection pool: %w", err)
	}
	if unset {
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("neither %s nor a PG* variable (PGHOST, PGUSER, ...) is set, and the defaults (user %s on %s) do not work; "+
				"set %s=postgres://user@host:5432/dbname (a password from PGPASSWORD or ~/.pgpass): %w",
				envDatabaseURL, cfg.ConnConfig.User, describeHost(cfg), envDatabaseURL, err)
		}
	}
	return pool, nil
}

// describeHost says where cfg connects, for a message.
func describeHost(cfg *pgxpool.Config) string {
	h := cfg.ConnConfig.Host
	if strings.HasPrefix(h, "/") {
		return fmt.Sprintf("the Unix socket in %s", h)
	}
	return fmt.Sprintf("%s port %d", h, cfg.ConnConfig.Port)
}

// interruptible returns ctx cancelled on SIGINT or SIGTERM, for commands
// that can stop cleanly part way.
func interruptible(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

func (c *cli) close() {
	if c.pool != nil {
		c.pool.Close()
	}
}

// parseConfigError describes a connection string that does not parse
// without quoting it: pgx redacts passwords in it only on a best-effort
// basis.
func parseConfigError(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "`: "); strings.HasPrefix(msg, "cannot parse `") && i >= 0 {
		msg = msg[i+3:]
	} else {
		msg = "invalid setting"
	}
	return fmt.Errorf("cannot parse the connection settings in %s or the PG* variables: %s", envDatabaseURL, msg)
}

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
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim"
)

// Exit codes shared by every command. exec adds its own; see execHelp.
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

// commands is every command of runclaim, each defined in a file of its
// own: its help, an options type with its flags, arguments and Validate,
// and a function that runs it. 'runclaim --help' lists them by name. To add
// a command, add its file and its line here.
var commands = []*command{
	define(migrateCommand, runMigrate),
	define(statusCommand, runStatus),
	define(historyCommand, runHistory),
	define(releaseCommand, runRelease),
	define(pauseCommand, runPause),
	define(resumeCommand, runResume),
	define(triggerCommand, runTrigger),
	define(pruneCommand, runPrune),
	define(execCommand, runExec),
	define(checkCommand, runCheck),
	define(limitCommand, runLimit),
	define(limitsCommand, runLimits),
	define(cooldownCommand, runCooldown),
}

// A command is one subcommand of runclaim.
type command struct {
	name    string
	summary string // one line, for the top-level usage
	usage   string // the synopsis, after "runclaim"
	help    string // description, examples and exit codes, for --help
	// positional is how many positional arguments the command takes, at
	// most (exec takes the rest of the line and sets it to -1).
	positional int
	// noJSON is set for a command whose output is not the tool's (exec).
	noJSON bool
	// writes is set for a command whose writes go through the store's own
	// transactions, which --synchronous-commit applies to.
	writes bool
	// bind makes the command's options, with their flags registered on
	// fs (the global ones are added for it), and returns them with the
	// function that runs the command with them. define sets it.
	bind func(fs *flag.FlagSet) (options, func(context.Context, *cli) int)
}

// options are one command's flags and positional arguments, in a struct of
// the command's own.
type options interface {
	// flags registers the flags on fs, with their defaults.
	flags(fs *flag.FlagSet)
	// args takes the positional arguments, no more than the command's
	// positional allows.
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

// define returns cmd, to be run by run with options of type *O.
func define[O any, P optionsPtr[O]](cmd command, run func(ctx context.Context, c *cli, o P) int) *command {
	cmd.bind = func(fs *flag.FlagSet) (options, func(context.Context, *cli) int) {
		o := P(new(O))
		o.flags(fs)
		return o, func(ctx context.Context, c *cli) int { return run(ctx, c, o) }
	}
	return &cmd
}

// lookup returns the command called name, or nil.
func lookup(name string) *command {
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd
		}
	}
	return nil
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

	cmd *command // the command that runs

	table     string // --table: "schema.table" or "table"
	namespace string // --namespace
	json      bool   // --json
	// syncCommit is --synchronous-commit, given if syncCommitGiven; once
	// main has checked it, the level for the store, or "".
	syncCommit      string
	syncCommitGiven bool

	pool *pgxpool.Pool
	dsn  string // DATABASE_URL, whose password is never printed (see redact)
}

// run is the whole program: it parses args (without the program name), runs
// the command and returns the process exit code. It reads the environment
// for DATABASE_URL, the PG* variables, RUNCLAIM_TABLE, RUNCLAIM_NAMESPACE
// and RUNCLAIM_SYNCHRONOUS_COMMIT.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	defer c.close()
	return c.main(ctx, args)
}

func (c *cli) main(ctx context.Context, args []string) int {
	top := flag.NewFlagSet("runclaim", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	c.globalFlags(top, true)
	version := top.Bool("version", false, "print runclaim's version and exit")
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.topUsage(c.stdout)
			return exitOK
		}
		fmt.Fprintf(c.stderr, "runclaim: %s\n\n", visible(err.Error()))
		c.topUsage(c.stderr)
		return exitUsage
	}
	if *version {
		fmt.Fprintln(c.stdout, versionLine())
		return exitOK
	}
	rest := top.Args()
	if len(rest) == 0 {
		c.topUsage(c.stderr)
		return exitUsage
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		if len(rest) == 0 {
			c.topUsage(c.stdout)
			return exitOK
		}
		cmd := lookup(rest[0])
		if cmd == nil {
			fmt.Fprintf(c.stderr, "runclaim: unknown command %q\n\n", rest[0])
			c.topUsage(c.stderr)
			return exitUsage
		}
		c.commandHelp(c.stdout, cmd, nil)
		return exitOK
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(c.stderr, "runclaim: unknown command %q\n\n", name)
		c.topUsage(c.stderr)
		return exitUsage
	}

	if cmd.noJSON && c.json {
		c.json = false // the error is about --json: not in JSON
		return c.usageError(cmd, "--json does not apply: %s prints no output of its own", cmd.name)
	}
	fs := flag.NewFlagSet("runclaim "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.globalFlags(fs, !cmd.noJSON)
	opts, runCmd := cmd.bind(fs)
	var positional []string
	var err error
	if cmd.positional < 0 {
		err = fs.Parse(rest)
		positional = fs.Args()
	} else {
		positional, err = parseInterspersed(fs, rest)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.commandHelp(c.stdout, cmd, fs)
			return exitOK
		}
		return c.usageError(cmd, "%v", err)
	}
	if cmd.positional >= 0 && len(positional) > cmd.positional {
		return c.usageError(cmd, "unexpected argument %q", positional[cmd.positional])
	}
	if err := c.checkSynchronousCommit(cmd); err != nil {
		return c.usageError(cmd, "%v", err)
	}
	if err := c.checkStoreOptions(); err != nil {
		return c.usageError(cmd, "%v", err)
	}
	opts.args(positional)
	if err := opts.Validate(); err != nil {
		return c.usageError(cmd, "%v", err)
	}
	c.cmd = cmd
	return runCmd(ctx, c)
}

// globalFlagNames are the flags globalFlags registers.
var globalFlagNames = map[string]bool{"table": true, "namespace": true, "json": true, syncCommitFlag: true}

// syncCommitFlag is the global flag that only the commands that write
// take: the others refuse it, and their help leaves it out.
const syncCommitFlag = "synchronous-commit"

// globalFlags registers the flags every command accepts, before or after
// its name (--json only if withJSON). Their defaults are the values parsed
// so far, so that "runclaim --json status" and "runclaim status --json"
// agree.
func (c *cli) globalFlags(fs *flag.FlagSet, withJSON bool) {
	if c.table == "" {
		c.table = c.getenv(envTable)
	}
	if c.namespace == "" {
		c.namespace = c.getenv(envNamespace)
	}
	fs.StringVar(&c.table, "table", c.table,
		"runs table as `schema.table` or table; quote a name with a dot: \"my.schema\".runs (default \"public.runclaim_runs\", or $RUNCLAIM_TABLE)")
	fs.StringVar(&c.namespace, "namespace", c.namespace,
		"advisory lock namespace, for exec and pause; must match the services' WithNamespace (default \"runclaim\", or $RUNCLAIM_NAMESPACE)")
	if withJSON {
		fs.BoolVar(&c.json, "json", c.json, "print JSON instead of a table")
	}
	fs.Func(syncCommitFlag, "commit the command's writes with synchronous_commit at `level`: remote_apply, on, remote_write, local or off\n"+
		"(default $RUNCLAIM_SYNCHRONOUS_COMMIT, else the session's; 'runclaim --help' says how to set it per role or in DATABASE_URL instead)",
		func(s string) error {
			c.syncCommit, c.syncCommitGiven = s, true
			return nil
		})
}

// syncCommitLevels are the levels of --synchronous-commit, as
// runclaim.WithSynchronousCommit takes them.
var syncCommitLevels = []string{"remote_apply", "on", "remote_write", "local", "off"}

// checkSynchronousCommit checks --synchronous-commit, or its variable, for
// cmd, and leaves in c.syncCommit the level for the store, or "". A
// command that does not write refuses the flag, and leaves the variable
// alone: a crontab sets it for all its lines.
func (c *cli) checkSynchronousCommit(cmd *command) error {
	if !cmd.writes {
		switch {
		case c.syncCommitGiven && cmd.name == "migrate":
			return fmt.Errorf("--%s does not apply to migrate: its steps commit with the session's synchronous_commit; "+
				"set that for the role (ALTER ROLE) or in %s (options=-c synchronous_commit=...): see 'runclaim migrate --help'", syncCommitFlag, envDatabaseURL)
		case c.syncCommitGiven:
			return fmt.Errorf("--%s does not apply: %s only reads", syncCommitFlag, cmd.name)
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

// parseInterspersed parses flags that may come before, between or after
// positional arguments ("history nightly --limit 5"). Everything after "--"
// is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
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
// line reads "runclaim prune: ..." and not "runclaim prune: prune: ...".
func describeError(cmd string, err error) string {
	msg := strings.TrimPrefix(err.Error(), "runclaim: ")
	return causeFirst(strings.TrimPrefix(msg, cmd+": "))
}

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

// hint is a line of advice for the mistakes operators make, or "".
func hint(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return "\n(hint: run 'runclaim migrate' first, or check --table)"
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

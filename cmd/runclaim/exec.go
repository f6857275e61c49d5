package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes of exec besides the command's own. exec's own outcomes have
// codes from sysexits.h, which commands rarely use, and each has a flag to
// change it, as flock's --conflict-exit-code does.
const (
	exitSkipped     = 75  // EX_TEMPFAIL: another holder has the source, or too soon (--skip-exit-code)
	exitClaimFailed = 69  // EX_UNAVAILABLE: no claim (database error); nothing was run (--error-exit-code)
	exitLeaseLost   = 70  // EX_SOFTWARE: the run was lost while the command ran (--lost-exit-code)
	exitUnrecorded  = 74  // EX_IOERR: the command ran; its outcome was not recorded (--unrecorded-exit-code)
	exitTimedOut    = 124 // the command ran longer than --max-run-time and was stopped, as timeout(1) exits (--timeout-exit-code)
	exitReplaced    = 79  // a claim with Replace asked the run to stop; the command was stopped (--replaced-exit-code)
	exitCannotRun   = 126 // the command was found but could not be started
	exitNotFound    = 127 // the command was not found
)

// defaultKillGraceMax is the longest --kill-grace that exec derives when
// none is given.
const defaultKillGraceMax = 10 * time.Second

// newExecCommand makes 'runclaim exec', which runs a command under a claim.
func newExecCommand(c *cli) *cobra.Command {
	cmd := define(c, &cobra.Command{
		Use:   "exec --source S [--lease D] [--min-interval D] [--tick T [--every D]] [--max-run-time D] [--owner O] [flags] -- command [args...]",
		Short: "run a command only if this host claims the source (a distributed flock -n)",
		Long: `Runs a command only if it claims the source, so that a crontab line installed
on several hosts runs the job on one of them at a time: a distributed
"flock -n". While the command runs, exec extends the lease every third of
it (see --heartbeat). When the command ends, its exit status is recorded as
the run's outcome: exit 0 as succeeded, anything else as failed with
"exit status N" or "signal: killed" (see 'runclaim history'). exec then
exits with the command's own exit code.

If another run holds the source (or --min-interval has not passed since the
last run started), the command is not run: exec prints why on stderr
(unless --quiet) and exits with --skip-exit-code.

The command runs with exec's stdin, stdout and stderr, and exec's
environment without runclaim's database settings (DATABASE_URL, every PG*
variable, RUNCLAIM_*; --pass-db-env keeps them), plus RUNCLAIM_RUN_ID (a
fencing token: pass it to writes that must refuse a stale holder),
RUNCLAIM_SOURCE and RUNCLAIM_OWNER.

The run ends only when no process of the command's process group is left.
A keeper process ("runclaim-exec-keeper" in ps) reaps the group, kills it
if exec dies or is stopped past the lease, and exec records the outcome
only once the group is empty. SIGINT, SIGTERM, SIGHUP and SIGQUIT are
forwarded to the group. If the run is lost (released, or heartbeats failed
for most of a lease) or outlives --max-run-time, exec sends SIGTERM to the
group, then SIGKILL after --kill-grace (bounded so that it lands while the
lease still holds), and exits with --lost-exit-code or --timeout-exit-code.
With --replace, exec takes the source over from its running run: the
other run's exec learns at its next heartbeat that it was asked to stop,
stops its command the same way, records the run replaced and exits with
--replaced-exit-code; this one then claims the source and runs.
Out of reach: a process that leaves the group (setsid, setpgid, a daemon)
is neither waited for nor killed. docs/cli.md ("exec") has the details:
the keeper, signals, the lease budget, Windows.

Examples:
  # crontab on every host: at most one nightly report at a time
  0 2 * * *  DATABASE_URL=postgres://cron@db/app runclaim exec --source nightly-report --quiet -- /opt/app/report
  # a long job: a crashed host frees the source within 2 minutes, and the
  # job gets 10s between SIGTERM and SIGKILL if its run is lost
  runclaim exec --source reindex --lease 2m --heartbeat 10s --kill-grace 10s -- ./reindex.sh --all
  # every 5 minutes on 3 hosts, each tick run once, however far apart the
  # hosts' clocks are or however long after another host ran it
  */5 * * * *  runclaim exec --source sync --tick now --every 5m --quiet -- ./sync
  # a deploy's new job takes over from the one running, without overlap
  runclaim exec --source worker --replace --kill-grace 5s -- ./worker
  # a job that hangs now and then: stop it after 2 hours
  runclaim exec --source import --max-run-time 2h -- ./import.sh
  # a wrapper script that tells "skipped" from "failed"
  runclaim exec --source sync --skip-exit-code 0 --error-exit-code 100 -- ./sync

Exit codes:
  0..255  the command's exit code; 128+N if a signal N killed it
          (130 SIGINT, 137 SIGKILL, 143 SIGTERM)
  75      skipped: the source is held by another run, too soon, or the
          tick was run already; the command did not run (EX_TEMPFAIL;
          --skip-exit-code, e.g. 0 for cron)
  69      the source could not be claimed (a database error) or exec failed
          before the command started; the command did not run
          (EX_UNAVAILABLE; --error-exit-code)
  70      the run was lost while the command ran; the command was stopped
          (EX_SOFTWARE; --lost-exit-code)
  74      the command ran but its outcome could not be recorded (the
          database went away); the run stays "running" until its lease
          passes, and exec prints the command's status (EX_IOERR;
          --unrecorded-exit-code)
  124     the command ran longer than --max-run-time and was stopped
          (as timeout(1); --timeout-exit-code)
  79      a claim with Replace (exec --replace, or a service's) asked the
          run to stop; the command was stopped and the run recorded
          replaced (--replaced-exit-code)
  126     the command is not executable (permission denied, a directory),
          or could not be started
  127     the command was not found
          (a missing or non-executable command is found before the claim:
          no run is recorded; one that fails to start after the claim, such
          as a script with a missing interpreter, is recorded as failed)
  2       bad usage; nothing was run
  128+N   exec was stopped by signal N before the command started
The command's own codes can collide with these; the outcome in 'runclaim
history' is exact.`,
		Args:        cobra.ArbitraryArgs,
		Annotations: map[string]string{annotWrites: "true", annotNoJSON: "true"},
	}, runExec)
	cmd.Flags().SetInterspersed(false) // the rest of the line is the command's
	return cmd
}

// execOptions are exec's flags and the command line it runs.
type execOptions struct {
	source, tick                                  string
	every                                         time.Duration
	tickAt                                        time.Time // --tick parsed by Validate; zero for none
	lease, minInterval, heartbeat, killGrace      time.Duration
	maxRunTime                                    time.Duration
	owner                                         string
	skipCode, errorCode, lostCode, unrecordedCode int
	timeoutCode, replacedCode                     int
	noDBEnv, passDBEnv, quiet, verbose, wait      bool
	replace                                       bool
	keys                                          []string // --key, in the order given
	argv                                          []string // the command line, argv[0] first
}

func (o *execOptions) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.source, "source", "", "claim `source` (required)")
	fs.DurationVar(&o.lease, "lease", runclaim.DefaultLease, "lease: how long the source stays held if exec dies without finishing")
	fs.DurationVar(&o.minInterval, "min-interval", 0, "skip unless the source's last run started at least this long ago")
	fs.StringVar(&o.tick, "tick", "", "claim the scheduled `tick` (RFC 3339, or \"now\" rounded to --every): skip if a run has served it or a later one")
	fs.DurationVar(&o.every, "every", 0, "the schedule's period, for --tick now: the tick is the nearest multiple of it")
	fs.DurationVar(&o.heartbeat, "heartbeat", 0, "extend the lease this often (default a third of --lease)")
	fs.DurationVar(&o.maxRunTime, "max-run-time", 0, "stop the command (SIGTERM, then SIGKILL after --kill-grace) once it has run this long (default 0: no limit)")
	fs.StringVar(&o.owner, "owner", "", "holder name recorded with the run (default host-pid-random)")
	fs.Func("key", "name `KEY` (a target many sources share, such as site:avito): skip while it is limited or cooling down (repeatable; see 'runclaim limit')", func(k string) error {
		o.keys = append(o.keys, k)
		return nil
	})
	fs.DurationVar(&o.killGrace, "kill-grace", 0, "when the command's group must stop (run lost, SIGINT/SIGTERM, processes left after the command exits),\nwait this long between SIGTERM and SIGKILL (at most (lease - 2*heartbeat)/8; default that, or 10s if less)")
	fs.IntVar(&o.skipCode, "skip-exit-code", exitSkipped, "exit `code` when the source is not claimed, as flock's --conflict-exit-code (0..255)")
	fs.IntVar(&o.errorCode, "error-exit-code", exitClaimFailed, "exit `code` when the source could not be claimed (0..255)")
	fs.IntVar(&o.lostCode, "lost-exit-code", exitLeaseLost, "exit `code` when the run was lost while the command ran (0..255)")
	fs.IntVar(&o.unrecordedCode, "unrecorded-exit-code", exitUnrecorded, "exit `code` when the command's outcome could not be recorded (0..255)")
	fs.IntVar(&o.timeoutCode, "timeout-exit-code", exitTimedOut, "exit `code` when the command ran longer than --max-run-time (0..255)")
	fs.IntVar(&o.replacedCode, "replaced-exit-code", exitReplaced, "exit `code` when a claim with Replace asked the run to stop and the command was stopped (0..255)")
	fs.BoolVar(&o.noDBEnv, "no-db-env", false, "remove DATABASE_URL, PG*, RUNCLAIM_TABLE, RUNCLAIM_NAMESPACE and RUNCLAIM_SYNCHRONOUS_COMMIT from the command's environment\n(the default; kept for scripts)")
	fs.BoolVar(&o.passDBEnv, "pass-db-env", false, "pass DATABASE_URL (password included), PG*, RUNCLAIM_TABLE, RUNCLAIM_NAMESPACE and RUNCLAIM_SYNCHRONOUS_COMMIT\non to the command")
	fs.BoolVar(&o.quiet, "quiet", false, "print nothing when the source is not claimed")
	fs.BoolVar(&o.wait, "wait", false, "while another run holds the source, wait for it (polling) instead of skipping; a pause, a tick run or --min-interval still skips")
	fs.BoolVar(&o.replace, "replace", false, "take the source over: ask its running run to stop, wait until it has (bounded by the signals exec gets), and run; a pause, a tick run or --min-interval still skips")
	fs.BoolVar(&o.verbose, "verbose", false, "print the claim and the recorded outcome on stderr")
}

func (o *execOptions) args(argv []string) { o.argv = argv }

// Validate checks what can be checked without a claimer: the source, the
// command line, the sign of --kill-grace and the exit codes.
func (o *execOptions) Validate() error {
	switch {
	case o.source == "":
		return errors.New("--source is required")
	case len(o.argv) == 0:
		return errors.New("give the command to run after --")
	case o.killGrace < 0:
		return fmt.Errorf("--kill-grace must not be negative, got %v", o.killGrace)
	case o.maxRunTime < 0:
		return fmt.Errorf("--max-run-time must not be negative, got %v", o.maxRunTime)
	case o.noDBEnv && o.passDBEnv:
		return errors.New("--no-db-env and --pass-db-env contradict each other: give one (--no-db-env is the default)")
	}
	if len(o.keys) > runclaim.MaxKeys {
		return fmt.Errorf("--key given %d times, more than %d", len(o.keys), runclaim.MaxKeys)
	}
	for i, k := range o.keys {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("--key: %w", err)
		}
		if slices.Contains(o.keys[:i], k) {
			return fmt.Errorf("--key %s given twice", visible(k))
		}
	}
	for _, f := range []struct {
		name string
		code int
	}{{"skip", o.skipCode}, {"error", o.errorCode}, {"lost", o.lostCode}, {"unrecorded", o.unrecordedCode}, {"timeout", o.timeoutCode}, {"replaced", o.replacedCode}} {
		if f.code < 0 || f.code > 255 {
			return fmt.Errorf("--%s-exit-code must be between 0 and 255, got %d", f.name, f.code)
		}
	}
	tick, err := parseTick(o.tick, o.every, time.Now())
	if err != nil {
		return err
	}
	o.tickAt = tick
	if err := runclaim.ValidateSource(o.source); err != nil {
		return fmt.Errorf("--source: %s", strings.TrimPrefix(err.Error(), "runclaim: "))
	}
	// The claimer's own checks, on a store that is never used, with its
	// messages naming the flags rather than the options.
	claimer, err := runclaim.New(runclaim.NewMemoryStore(), o.claimOptions(runclaim.Hooks{})...)
	if err != nil {
		return flagError(err)
	}
	return checkHeartbeatRoom(claimer)
}

// minHeartbeatAttempt is the least time exec lets one heartbeat attempt
// take (Settings.HeartbeatTimeout: a run is given up ExpiryMargin before its
// lease ends, and an attempt that hangs is abandoned in time for two more).
// A heartbeat is one short UPDATE, but it may need a new connection first
// (TCP, TLS, authentication), and a loaded host or link can hold that up
// for a few hundred milliseconds. With the default --heartbeat (a third of
// the lease) an attempt gets 7/36 of the lease, so the shortest --lease is
// about 36/7 of this: 2.6s, in steps of 100ms (minDefaultLease).
const minHeartbeatAttempt = 500 * time.Millisecond

// minDefaultLease is the shortest --lease, in steps of 100ms, that the
// default --heartbeat allows, as the library computes the attempt's bound.
var minDefaultLease = func() time.Duration {
	for lease := 100 * time.Millisecond; ; lease += 100 * time.Millisecond {
		c, err := runclaim.New(runclaim.NewMemoryStore(), runclaim.WithLease(lease))
		if err == nil && c.Settings().HeartbeatTimeout >= minHeartbeatAttempt {
			return lease
		}
	}
}()

// checkHeartbeatRoom refuses a --lease and --heartbeat that leave a
// heartbeat attempt less than minHeartbeatAttempt: with such a lease a
// heartbeat that meets a slow connection loses the run, and the command's
// kill grace is a few milliseconds.
func checkHeartbeatRoom(claimer *runclaim.Claimer) error {
	lease, hb := claimer.Settings().Lease, claimer.Settings().HeartbeatInterval
	if attempt := claimer.Settings().HeartbeatTimeout; attempt < minHeartbeatAttempt {
		return fmt.Errorf("--lease %v with --heartbeat %v leaves a heartbeat attempt %v, under the %v exec needs; "+
			"lengthen --lease (at least %v with the default --heartbeat) or shorten --heartbeat",
			lease, hb.Round(time.Millisecond), attempt.Round(time.Millisecond), minHeartbeatAttempt, minDefaultLease)
	}
	return nil
}

// optionFlags maps the claimer's option names, as its errors give them, to
// exec's flags.
var optionFlags = strings.NewReplacer(
	"runclaim: ", "",
	"WithLease:", "--lease:",
	"WithHeartbeat:", "--heartbeat:",
	"WithMinInterval:", "--min-interval:",
	"WithOwner:", "--owner:",
)

// flagError is an error of runclaim.New, in the words of exec's flags.
func flagError(err error) error {
	return errors.New(optionFlags.Replace(err.Error()))
}

// claimOptions are the claimer's options, with hooks.
func (o *execOptions) claimOptions(hooks runclaim.Hooks) []runclaim.Option {
	opts := []runclaim.Option{
		runclaim.WithLease(o.lease),
		runclaim.WithMinInterval(o.minInterval),
		runclaim.WithMaxRunTime(o.maxRunTime),
		runclaim.WithHooks(hooks),
	}
	if o.heartbeat != 0 {
		opts = append(opts, runclaim.WithHeartbeat(o.heartbeat))
	}
	if o.owner != "" {
		opts = append(opts, runclaim.WithOwner(o.owner))
	}
	return opts
}

// fitKillGrace sets --kill-grace's default, or checks the one given, for
// claimer's timing. The command must be dead before the lease ends: Do
// cancels the run ExpiryMargin before that when heartbeats fail, and half
// of it is left for the SIGKILL to take effect and for timers that fire
// late.
func (o *execOptions) fitKillGrace(claimer *runclaim.Claimer) error {
	maxGrace := claimer.Settings().ExpiryMargin / 2
	switch {
	case o.killGrace == 0:
		o.killGrace = min(maxGrace, defaultKillGraceMax)
	case o.killGrace > maxGrace:
		return fmt.Errorf("--kill-grace %v would let the command outlive its lease: with --lease %v and --heartbeat %v it can be at most %v; lengthen --lease or shorten --heartbeat",
			o.killGrace, claimer.Settings().Lease, claimer.Settings().HeartbeatInterval, maxGrace)
	}
	return nil
}

// runEvents is what the claimer's hooks tell exec about its run.
type runEvents struct {
	lost     atomic.Bool // the run was lost
	recorded atomic.Bool // the outcome was recorded
}

// hooks note the events, and print them on c's stderr if --verbose.
func (e *runEvents) hooks(c *cli, o *execOptions) runclaim.Hooks {
	return runclaim.Hooks{
		Claimed: func(ev runclaim.Event) {
			if o.verbose {
				fmt.Fprintf(c.stderr, "runclaim exec: claimed run %d of %q as %s (lease %v)\n", ev.Run.ID, ev.Run.Source, visible(ev.Run.Owner), o.lease)
			}
		},
		Finished: func(ev runclaim.Event) {
			e.recorded.Store(true)
			if o.verbose {
				fmt.Fprintf(c.stderr, "runclaim exec: run %d of %q recorded as %s\n", ev.Run.ID, ev.Run.Source, ev.Status)
			}
		},
		LeaseLost: func(runclaim.Event) { e.lost.Store(true) },
	}
}

// runExec claims the source and, if it gets it, runs the command under
// the claim: execution.run does, called by Do.
func runExec(ctx context.Context, c *cli, o *execOptions) int {
	path, err := lookCommand(o.argv[0])
	if err != nil { // not found: fail before claiming
		fmt.Fprintf(c.stderr, "runclaim exec: %s\n", lookError(o.argv[0], err))
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	c.stdout, c.stderr = serialize(c.stdout, c.stderr)

	store, err := c.store(ctx)
	if err != nil {
		return c.failCode("exec", err, o.errorCode)
	}
	var events runEvents
	claimer, err := runclaim.New(store, o.claimOptions(events.hooks(c, o))...)
	if err != nil {
		return c.badUsage("%v", flagError(err)) // Validate has checked them
	}
	if err := o.fitKillGrace(claimer); err != nil {
		return c.badUsage("%v", err)
	}

	claimCtx, cancelClaim := context.WithCancelCause(ctx)
	defer cancelClaim(nil)
	fw := newForwarder(cancelClaim)
	stopForwarding := fw.listen()
	defer stopForwarding()

	x := &execution{c: c, o: o, path: path, fw: fw, margin: claimer.Settings().ExpiryMargin}
	var claimOpts []runclaim.ClaimOption
	if !o.tickAt.IsZero() {
		claimOpts = append(claimOpts, runclaim.ForTick(o.tickAt))
	}
	if len(o.keys) > 0 {
		claimOpts = append(claimOpts, runclaim.WithKeys(o.keys...))
	}
	if o.wait {
		claimOpts = append(claimOpts, runclaim.Wait())
	}
	if o.replace {
		claimOpts = append(claimOpts, runclaim.Replace())
	}
	err = claimer.Do(claimCtx, o.source, x.run, claimOpts...)
	return x.exitCode(ctx, claimCtx, err, events.lost.Load(), events.recorded.Load())
}

// lookCommand finds the program that name (argv[0]) runs, as exec.Command
// does, and checks that a path given with a slash names an executable
// file, as the search of PATH does for a bare name: a missing command
// (127) and one that is not executable (126) are both refused before the
// claim, so neither records a run.
func lookCommand(name string) (string, error) {
	cmd := exec.Command(name)
	if cmd.Err == nil && strings.ContainsRune(name, os.PathSeparator) {
		if _, err := exec.LookPath(cmd.Path); err != nil {
			cmd.Err = err
		}
	}
	return cmd.Path, cmd.Err
}

// lookError says why the command name cannot be run, without os/exec's
// "exec: " prefix after exec's own: "cannot run "x": ...".
func lookError(name string, err error) string {
	var ee *exec.Error
	for errors.As(err, &ee) {
		err = ee.Err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // "stat /x: no such file": the path is named already
	}
	return fmt.Sprintf("cannot run %s: %v", strconv.Quote(name), err)
}

// dbEnvVars are the variables exec removes from the command's environment
// unless --pass-db-env: those naming runclaim's database, and every PG*
// variable, which libpq and pgx read.
var dbEnvVars = []string{envDatabaseURL, envTable, envNamespace, envSynchronousCommit}

// commandEnv is the command's environment: env, without runclaim's database
// settings unless passDB, plus the run's variables.
func commandEnv(env []string, passDB bool, run *runclaim.Run) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !passDB && (strings.HasPrefix(name, "PG") || slices.Contains(dbEnvVars, name)) {
			continue
		}
		out = append(out, kv)
	}
	return append(out,
		"RUNCLAIM_RUN_ID="+strconv.FormatInt(run.ID, 10),
		"RUNCLAIM_SOURCE="+run.Source,
		"RUNCLAIM_OWNER="+run.Owner)
}

// exitStatus is how the command ended.
type exitStatus struct {
	code int    // exec's exit code for it: the exit status, or 128+N after signal N
	text string // as os.ProcessState says it: "exit status 3", "signal: killed"
}

// err is nil if the command succeeded, else an error with its text.
func (s exitStatus) err() error {
	if s.text == "exit status 0" {
		return nil
	}
	return errors.New(s.text)
}

// execution is one command run under a claim.
type execution struct {
	c    *cli
	o    *execOptions
	path string // the program
	fw   *forwarder
	// margin is the claimer's ExpiryMargin: the command's group is
	// stopped within it, before the lease can end.
	margin time.Duration

	// Set by run, which Do calls on exitCode's goroutine.
	started  bool
	startErr error
	status   *exitStatus // nil if it is not known how the command ended
}

// run is the function Do calls with the claimed run: it starts the command
// and waits for it, and stops it if ctx ends (the run was lost).
func (x *execution) run(ctx context.Context, run *runclaim.Run) error {
	p := newProc(x.path, x.o.argv, commandEnv(os.Environ(), x.o.passDBEnv, run),
		x.c.stdin, x.c.stdout, x.c.stderr,
		// Bounds the copying of output when stdout or stderr is not a
		// file and a background process of the command keeps the pipe
		// open.
		x.o.killGrace, x.stopBy(run))
	startErr, cause := x.fw.start(ctx, p)
	if cause != nil {
		return cause
	}
	if startErr != nil {
		x.startErr = startErr
		return startErr
	}
	x.started = true
	stopKeeping := x.keepStopBy(run, p)
	stopCause := x.supervise(ctx, run, p)
	stopKeeping()
	x.fw.exited()
	if p.stoppedByKeeper() {
		fmt.Fprintf(x.c.stderr, "runclaim exec: run %d of %q: the keeper killed the command's group on its own: the lease could no longer be known held "+
			"(exec was stopped, or starved, past its end by this host's clock)\n", run.ID, run.Source)
	}
	status, err := p.result()
	if err != nil {
		return err
	}
	x.status = &status
	waitErr := status.err()
	if stopCause != nil {
		if waitErr == nil {
			waitErr = errors.New("exit status 0")
		}
		return fmt.Errorf("%w; stopped because %w", waitErr, stopCause)
	}
	return waitErr
}

// stopBy is the time by which the keeper stops the command's group on its
// own unless a heartbeat moves it: the run's lease end by this process's
// clock, less half of what the expiry margin leaves after the kill grace.
// exec's own stop of a lost run (SIGTERM at the margin, SIGKILL a kill
// grace later) comes first, and the keeper's still before the lease can
// end.
func (x *execution) stopBy(run *runclaim.Run) time.Time {
	return run.LocalDeadline().Add(-(x.margin - x.o.killGrace) / 2)
}

// keepStopBy tells the keeper each later stopBy of run while the command
// runs, until the function it returns is called.
func (x *execution) keepStopBy(run *runclaim.Run, p *proc) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	// Often enough that a heartbeat's extension reaches the keeper long
	// before the time it replaces: a fraction of the margin.
	every := min(x.margin/8, time.Second)
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.setStopBy(x.stopBy(run))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// supervise waits until the command has ended and no process of its group
// is left, which is when the run ends. It stops the group,
// SIGTERM then SIGKILL after the kill grace, when the run is lost (ctx
// ends; it returns the cause), when exec is told to stop (SIGINT or
// SIGTERM, which the forwarder has passed on), and when the command ends
// while processes of its group are still running.
func (x *execution) supervise(ctx context.Context, run *runclaim.Run, p *proc) (stopCause error) {
	stderr, grace := x.c.stderr, x.o.killGrace
	select {
	case <-p.ended():
		return nil
	case <-ctx.Done():
		stopCause = context.Cause(ctx)
		fmt.Fprintf(stderr, "runclaim exec: run %d of %q: %s; sending SIGTERM to the command, SIGKILL in %v\n",
			run.ID, run.Source, x.c.redact(stopReason(run, stopCause)), grace)
		x.fw.signal(syscall.SIGTERM)
	case <-p.leftover():
		fmt.Fprintf(stderr, "runclaim exec: %s, but processes of its group still run; sending SIGTERM to them, SIGKILL in %v\n",
			describeExit(&p.status), grace)
		x.fw.signal(syscall.SIGTERM)
	case <-x.fw.stopping: // the signal is passed on already
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.ended():
		return stopCause
	case <-timer.C:
	}
	fmt.Fprintf(stderr, "runclaim exec: processes of the command's group are still running after %v; sending SIGKILL\n", grace)
	x.fw.signal(syscall.SIGKILL)
	<-p.ended()
	return stopCause
}

// stopReason is why run's context ended, for a line that already names
// the run: without the library's "runclaim: " prefixes and the run's ID
// again, so that "heartbeat run 11: runclaim: lease lost" reads
// "heartbeat: lease lost".
func stopReason(run *runclaim.Run, cause error) string {
	msg := strings.ReplaceAll(cause.Error(), "runclaim: ", "")
	msg = strings.ReplaceAll(msg, fmt.Sprintf("heartbeat run %d: ", run.ID), "heartbeat: ")
	return strings.ReplaceAll(msg, fmt.Sprintf("run %d's lease", run.ID), "its lease")
}

// exitCode reports how the execution went and returns exec's exit code.
// err is what Do returned.
func (x *execution) exitCode(ctx, claimCtx context.Context, err error, lost, recorded bool) int {
	c, o := x.c, x.o
	var nc *runclaim.NotClaimedError
	if errors.As(err, &nc) {
		if !o.quiet {
			fmt.Fprintf(c.stderr, "runclaim exec: skipped: %s\n", skipReason(nc, o.minInterval))
		}
		return o.skipCode
	}
	if !x.started {
		var sigErr *signalError
		var kErr *keeperError
		switch {
		case errors.As(context.Cause(claimCtx), &sigErr):
			fmt.Fprintf(c.stderr, "runclaim exec: %v before the command started\n", sigErr)
			return 128 + signalNumber(sigErr.sig)
		case errors.As(x.startErr, &kErr):
			return c.failCode("exec", fmt.Errorf("cannot run %s: %w", x.path, kErr), o.errorCode)
		case x.startErr != nil:
			// Found and executable before the claim, so 126 even for
			// ENOENT (a script whose interpreter is missing): 127 means
			// "not found, nothing recorded".
			fmt.Fprintf(c.stderr, "runclaim exec: cannot run %s: %v\n", x.path, x.startErr)
			return exitCannotRun
		case err == nil:
			err = errors.New("the command did not start")
		}
		return c.failCode("exec", err, o.errorCode)
	}
	if errors.Is(err, runclaim.ErrReplaced) {
		fmt.Fprintf(c.stderr, "runclaim exec: a claim with Replace asked the run of %q to stop; the command was stopped and the run recorded replaced; %s\n",
			o.source, describeExit(x.status))
		return o.replacedCode
	}
	if lost || errors.Is(err, runclaim.ErrLeaseLost) {
		fmt.Fprintf(c.stderr, "runclaim exec: the run of %q was lost while the command ran, so another holder may have started; %s\n",
			o.source, describeExit(x.status))
		return o.lostCode
	}
	if ctx.Err() != nil {
		fmt.Fprintf(c.stderr, "runclaim exec: stopped: %v; %s\n", context.Cause(ctx), describeExit(x.status))
		return o.errorCode
	}
	if errors.Is(err, runclaim.ErrRunTimeout) {
		fmt.Fprintf(c.stderr, "runclaim exec: the command ran longer than --max-run-time %v and was stopped; %s\n", o.maxRunTime, describeExit(x.status))
		if !recorded {
			fmt.Fprintf(c.stderr, "runclaim exec: the outcome was not recorded, so the run stays running until its lease passes\n")
			return o.unrecordedCode
		}
		return o.timeoutCode
	}
	if x.status == nil {
		return c.failCode("exec", fmt.Errorf("%s: %w", describeExit(nil), err), o.errorCode)
	}
	if !recorded {
		fmt.Fprintf(c.stderr, "runclaim exec: the outcome was not recorded, so the run stays running until its lease passes; %s: %s\n",
			describeExit(x.status), visibleLines(c.redact(describeError("exec", err))))
		return o.unrecordedCode
	}
	return x.status.code
}

// failCode prints err as fail does, and returns code.
func (c *cli) failCode(cmd string, err error, code int) int {
	c.fail(cmd, err)
	return code
}

// parseTick reads --tick: empty for none, "now" for now rounded to the
// nearest multiple of every, or an RFC 3339 time.
func parseTick(s string, every time.Duration, now time.Time) (time.Time, error) {
	switch {
	case s == "" && every != 0:
		return time.Time{}, errors.New("--every goes with --tick now")
	case s == "":
		return time.Time{}, nil
	case s == "now":
		if every <= 0 {
			return time.Time{}, fmt.Errorf("--tick now needs --every, the schedule's period (e.g. 5m for */5 * * * *), got %v", every)
		}
		return now.Round(every), nil
	case every != 0:
		return time.Time{}, errors.New("--every goes with --tick now, not with a time")
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--tick: want an RFC 3339 time (2026-03-01T12:00:00Z) or \"now\": %w", err)
	}
	switch {
	case t.IsZero():
		return time.Time{}, fmt.Errorf("--tick %s: the zero time is not a tick", s)
	case !t.Round(0).UTC().Truncate(time.Microsecond).After(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)):
		// The store keeps ticks to the microsecond, in UTC: this one
		// would be the zero time, which means no tick, or before it.
		return time.Time{}, fmt.Errorf("--tick %s: in UTC, to the microsecond, it is the first microsecond of year 1 (the zero time, no tick) or earlier; a tick is in the years 1 to 9999", s)
	case !t.Before(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)):
		return time.Time{}, fmt.Errorf("--tick %s: in UTC it is in year 10000; a tick is in the years 1 to 9999", s)
	}
	return t, nil
}

// skipReason says, in a line, why a claim was skipped.
func skipReason(nc *runclaim.NotClaimedError, minInterval time.Duration) string {
	switch {
	case errors.Is(nc, runclaim.ErrPaused):
		until := "until resumed ('runclaim resume')"
		if !nc.RetryAfter.IsZero() {
			until = "until " + formatTime(nc.RetryAfter)
		}
		if nc.Note != "" {
			until += ": " + visible(nc.Note)
		}
		return fmt.Sprintf("%q is paused %s", nc.Source, until)
	case errors.Is(nc, runclaim.ErrLimited):
		why := "is limited"
		if nc.Note != "" {
			why = "is cooling down: " + visible(nc.Note)
		}
		return fmt.Sprintf("key %s of %q %s; a claim can succeed after %s (see 'runclaim limits')", visible(nc.Key), nc.Source, why, formatTime(nc.RetryAfter))
	case errors.Is(nc, runclaim.ErrTickDone):
		return fmt.Sprintf("tick %s of %q was run already (the latest tick run is %s)",
			formatTime(nc.Tick), nc.Source, formatTime(nc.DoneTick))
	case errors.Is(nc, runclaim.ErrTooSoon):
		return fmt.Sprintf("too soon: the minimum interval since the last run of %q started has not passed (the longer of --min-interval, %v, and the one that run recorded); a claim can succeed after %s",
			nc.Source, minInterval, formatTime(nc.RetryAfter))
	case nc.Holder != nil:
		return fmt.Sprintf("%q is held by run %d of %s since %s (lease until %s)",
			nc.Source, nc.Holder.ID, visible(nc.Holder.Owner), formatTime(nc.Holder.StartedAt), formatTime(nc.Holder.LeaseUntil))
	default:
		return fmt.Sprintf("another claim of %q is in flight", nc.Source)
	}
}

// describeExit says how the command ended, for a message.
func describeExit(s *exitStatus) string {
	if s == nil {
		return "it is not known how the command ended"
	}
	return "the command ended with " + s.text
}

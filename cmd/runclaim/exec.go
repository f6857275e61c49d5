package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runclaim/runclaim"
)

// Exit codes of exec besides the command's own.
const (
	exitSkipped   = 75  // EX_TEMPFAIL: another holder has the source (default of --skip-exit-code)
	exitLeaseLost = 70  // EX_SOFTWARE: the run was lost while the command ran
	exitCannotRun = 126 // the command was found but could not be started
	exitNotFound  = 127 // the command was not found
)

// defaultKillGrace is how long exec waits after SIGTERM before SIGKILL when
// the lease is lost.
const defaultKillGrace = 10 * time.Second

// forwardedSignals are passed on to the command's process group.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func init() {
	register(&command{
		name:       "exec",
		summary:    "run a command only if this host claims the source (a distributed flock -n)",
		usage:      "exec --source S [--lease D] [--min-interval D] [--owner O] [flags] -- command [args...]",
		positional: -1,
		noJSON:     true,
		help: `Runs a command only if it claims the source, so that a crontab line installed
on several hosts runs the job on one of them at a time: a distributed
"flock -n". While the command runs, exec extends the lease every third of
it (see --heartbeat). When the command ends, its exit status is recorded as
the run's outcome: exit 0 as succeeded, anything else as failed with
"exit status N" or "signal: killed" (see 'runclaim history'). exec then
exits with the command's own exit code.

If another run holds the source (or --min-interval has not passed since the
last run started), the command is not run: exec prints why on stderr
(unless --quiet) and exits with --skip-exit-code.

The command runs with exec's environment plus RUNCLAIM_RUN_ID (the run's ID,
a fencing token that increases with every run: pass it to writes that must
refuse a stale holder), RUNCLAIM_SOURCE and RUNCLAIM_OWNER. It runs in a
process group of its own, with exec's stdin, stdout and stderr. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to exec are forwarded
to that group; the command decides what to do and exec waits for it. A
signal that arrives before the command has started stops exec instead.

If the run is lost while the command runs (an operator released it, or
heartbeats failed for a whole lease so another host may take over), exec
sends SIGTERM to the command's process group, then SIGKILL after
--kill-grace, and exits with 70. When heartbeats fail, that starts a little
before the lease ends, so another host can claim the source while the
command is in its grace period: keep --kill-grace well below --lease where
that matters.

The command should not read from the terminal: it is not in the terminal's
foreground process group.

Examples:
  # crontab on every host: at most one nightly report at a time
  0 2 * * *  DATABASE_URL=postgres://cron@db/app runclaim exec --source nightly-report --quiet -- /opt/app/report
  # a long job: a crashed host frees the source within 2 minutes
  runclaim exec --source reindex --lease 2m -- ./reindex.sh --all
  # every 5 minutes on 3 hosts, but at most once per 4 minutes overall
  */5 * * * *  runclaim exec --source sync --min-interval 4m --quiet -- ./sync

Exit codes:
  0..255  the command's exit code; 128+N if a signal N killed it
          (130 SIGINT, 137 SIGKILL, 143 SIGTERM)
  75      skipped: the source is held by another run, or too soon
          (EX_TEMPFAIL; change with --skip-exit-code, e.g. 0 for cron)
  70      the run was lost while the command ran; the command was stopped
          (EX_SOFTWARE)
  126     the command could not be started (e.g. permission denied)
  127     the command was not found
  1       a database error before the command started (nothing was run), or
          another error of exec itself
  2       bad usage
  128+N   exec was stopped by signal N before the command started
The command's own codes 70, 75, 126 and 127 cannot be told from exec's; the
outcome in 'runclaim history' is exact.
If the command ran but its outcome could not be recorded for a reason other
than a lost run (the database went away), exec prints a warning and exits
with the command's code; the run stays "running" until its lease passes.`,
		flags: func(fs *flag.FlagSet) any {
			o := &execOpts{}
			fs.StringVar(&o.source, "source", "", "claim `source` (required)")
			fs.DurationVar(&o.lease, "lease", runclaim.DefaultLease, "lease: how long the source stays held if exec dies without finishing")
			fs.DurationVar(&o.minInterval, "min-interval", 0, "skip unless the source's last run started at least this long ago")
			fs.DurationVar(&o.heartbeat, "heartbeat", 0, "extend the lease this often (default a third of --lease)")
			fs.StringVar(&o.owner, "owner", "", "holder name recorded with the run (default host-pid-random)")
			fs.DurationVar(&o.killGrace, "kill-grace", defaultKillGrace, "after the run is lost, wait this long between SIGTERM and SIGKILL")
			fs.IntVar(&o.skipCode, "skip-exit-code", exitSkipped, "exit `code` when the source is not claimed (0..255)")
			fs.BoolVar(&o.quiet, "quiet", false, "print nothing when the source is not claimed")
			fs.BoolVar(&o.verbose, "verbose", false, "print the claim and the recorded outcome on stderr")
			return o
		},
		run: runExec,
	})
}

type execOpts struct {
	source                                   string
	lease, minInterval, heartbeat, killGrace time.Duration
	owner                                    string
	skipCode                                 int
	quiet, verbose                           bool
}

func runExec(ctx context.Context, c *cli, opts any, argv []string) int {
	cmd := commands["exec"]
	o := opts.(*execOpts)
	switch {
	case o.source == "":
		return c.usageError(cmd, "--source is required")
	case len(argv) == 0:
		return c.usageError(cmd, "give the command to run after --")
	case o.skipCode < 0 || o.skipCode > 255:
		return c.usageError(cmd, "--skip-exit-code must be between 0 and 255, got %d", o.skipCode)
	case o.killGrace <= 0:
		return c.usageError(cmd, "--kill-grace must be positive, got %v", o.killGrace)
	}
	if err := runclaim.ValidateSource(o.source); err != nil {
		return c.usageError(cmd, "%v", err)
	}

	var (
		lost     atomic.Bool // the run was lost
		recorded atomic.Bool // the outcome was recorded
	)
	claimOpts := []runclaim.Option{
		runclaim.WithLease(o.lease),
		runclaim.WithMinInterval(o.minInterval),
		runclaim.WithHooks(runclaim.Hooks{
			Claimed: func(e runclaim.ClaimedEvent) {
				if o.verbose {
					fmt.Fprintf(c.stderr, "runclaim exec: claimed run %d of %q as %s (lease %v)\n", e.Run.ID, e.Run.Source, e.Run.Owner, o.lease)
				}
			},
			Finished: func(e runclaim.FinishedEvent) {
				recorded.Store(true)
				if o.verbose {
					fmt.Fprintf(c.stderr, "runclaim exec: run %d of %q recorded as %s\n", e.Run.ID, e.Run.Source, e.Status)
				}
			},
			LeaseLost: func(runclaim.LeaseLostEvent) { lost.Store(true) },
		}),
	}
	if o.heartbeat != 0 {
		claimOpts = append(claimOpts, runclaim.WithHeartbeat(o.heartbeat))
	}
	if o.owner != "" {
		claimOpts = append(claimOpts, runclaim.WithOwner(o.owner))
	}

	child := exec.Command(argv[0], argv[1:]...)
	if child.Err == nil && strings.ContainsRune(argv[0], os.PathSeparator) {
		if _, err := os.Stat(child.Path); errors.Is(err, fs.ErrNotExist) {
			child.Err = err
		}
	}
	if child.Err != nil { // not found: fail before claiming
		fmt.Fprintf(c.stderr, "runclaim exec: %v\n", child.Err)
		if errors.Is(child.Err, exec.ErrNotFound) || errors.Is(child.Err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	c.stdout, c.stderr = serialize(c.stdout, c.stderr)
	child.Stdin, child.Stdout, child.Stderr = c.stdin, c.stdout, c.stderr
	// Bounds the copying of output when stdout or stderr is not a file and
	// a background process of the command keeps the pipe open.
	child.WaitDelay = o.killGrace
	setProcessGroup(child)

	store, err := c.store(ctx)
	if err != nil {
		return c.fail("exec", err)
	}
	claimer, err := runclaim.New(store, claimOpts...)
	if err != nil {
		return c.usageError(cmd, "%v", err)
	}

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	claimCtx, cancelClaim := context.WithCancelCause(ctx)
	defer cancelClaim(nil)
	fw := &forwarder{cancel: cancelClaim}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { fw.loop(sigs, done) })
	defer func() {
		close(done)
		wg.Wait()
	}()

	x := &execution{c: c, o: o, child: child, fw: fw}
	err = claimer.Do(claimCtx, o.source, x.run)
	return x.exitCode(ctx, claimCtx, err, lost.Load(), recorded.Load())
}

// execution is one command run under a claim.
type execution struct {
	c     *cli
	o     *execOpts
	child *exec.Cmd
	fw    *forwarder

	// Set by run, which Do calls on exitCode's goroutine.
	started  bool
	startErr error
	state    *os.ProcessState
}

// run is the function Do calls with the claimed run: it starts the command
// and waits for it, and stops it if ctx ends (the run was lost).
func (x *execution) run(ctx context.Context, run *runclaim.Run) error {
	x.child.Env = append(os.Environ(),
		"RUNCLAIM_RUN_ID="+strconv.FormatInt(run.ID, 10),
		"RUNCLAIM_SOURCE="+run.Source,
		"RUNCLAIM_OWNER="+run.Owner)
	startErr, cause := x.fw.start(ctx, x.child)
	if cause != nil {
		return cause
	}
	if startErr != nil {
		x.startErr = startErr
		return startErr
	}
	x.started = true
	exited := make(chan error, 1)
	go func() { exited <- x.child.Wait() }()

	var waitErr, stopCause error
	select {
	case waitErr = <-exited:
	case <-ctx.Done():
		stopCause = context.Cause(ctx)
		fmt.Fprintf(x.c.stderr, "runclaim exec: run %d of %q: %s; sending SIGTERM to the command, SIGKILL in %v\n",
			run.ID, run.Source, x.c.redact(stopCause.Error()), x.o.killGrace)
		x.fw.signal(syscall.SIGTERM)
		grace := time.NewTimer(x.o.killGrace)
		select {
		case waitErr = <-exited:
			grace.Stop()
		case <-grace.C:
			fmt.Fprintf(x.c.stderr, "runclaim exec: the command is still running after %v; sending SIGKILL\n", x.o.killGrace)
			x.fw.signal(syscall.SIGKILL)
			waitErr = <-exited
		}
	}
	x.fw.exited()
	x.state = x.child.ProcessState
	if errors.Is(waitErr, exec.ErrWaitDelay) && x.state != nil && x.state.Success() {
		waitErr = nil // a background process held the output open; the command itself succeeded
	}
	if stopCause != nil {
		if waitErr == nil {
			waitErr = errors.New("exit status 0")
		}
		return fmt.Errorf("%w; stopped because %w", waitErr, stopCause)
	}
	return waitErr
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
		switch {
		case errors.As(context.Cause(claimCtx), &sigErr):
			fmt.Fprintf(c.stderr, "runclaim exec: %v before the command started\n", sigErr)
			return 128 + signalNumber(sigErr.sig)
		case x.startErr != nil:
			fmt.Fprintf(c.stderr, "runclaim exec: cannot run %s: %v\n", x.child.Path, x.startErr)
			if errors.Is(x.startErr, fs.ErrNotExist) {
				return exitNotFound
			}
			return exitCannotRun
		case err == nil:
			err = errors.New("the command did not start")
		}
		return c.fail("exec", err)
	}
	if lost || errors.Is(err, runclaim.ErrLeaseLost) {
		fmt.Fprintf(c.stderr, "runclaim exec: the run of %q was lost while the command ran, so another holder may have started; %s\n",
			o.source, describeExit(x.state))
		return exitLeaseLost
	}
	if ctx.Err() != nil {
		fmt.Fprintf(c.stderr, "runclaim exec: stopped: %v; %s\n", context.Cause(ctx), describeExit(x.state))
		return exitError
	}
	if !recorded && err != nil {
		fmt.Fprintf(c.stderr, "runclaim exec: warning: the outcome was not recorded, so the run stays running until its lease passes: %s\n",
			c.redact(err.Error()))
	}
	if x.state == nil {
		return exitError
	}
	return exitCodeOf(x.state)
}

// skipReason says, in a line, why a claim was skipped.
func skipReason(nc *runclaim.NotClaimedError, minInterval time.Duration) string {
	switch {
	case errors.Is(nc, runclaim.ErrTooSoon):
		return fmt.Sprintf("too soon: the last run of %q started less than %v ago; a claim can succeed after %s",
			nc.Source, minInterval, formatTime(nc.RetryAfter))
	case nc.Holder != nil:
		return fmt.Sprintf("%q is held by run %d of %s since %s (lease until %s)",
			nc.Source, nc.Holder.ID, nc.Holder.Owner, formatTime(nc.Holder.StartedAt), formatTime(nc.Holder.LeaseUntil))
	default:
		return fmt.Sprintf("another claim of %q is in flight", nc.Source)
	}
}

// describeExit says how the command ended, for a message.
func describeExit(ps *os.ProcessState) string {
	if ps == nil {
		return "the command did not finish"
	}
	return "the command ended with " + ps.String()
}

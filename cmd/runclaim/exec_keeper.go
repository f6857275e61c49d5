//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// exec does not start the command itself but through a keeper: a second
// copy of runclaim (found by keeperPath) that runs with keeperName as its
// argv[0] and starts the command in a process group of its own.
//
//	runclaim exec            holds the claim, heartbeats, records the outcome
//	└─ runclaim-exec-keeper  in a group of its own; reaps the command's group, kills it if exec dies
//	   └─ the command        leads its group, with every process it starts
//
// There are three process groups, all in exec's session: exec's, the
// keeper's and the command's. exec starts the keeper as the leader of a
// group of its own (setpgid in the child, before the keeper runs), and the
// keeper starts the command as the leader of another (its ID is the
// command's PID). So a signal sent to exec's group, be it SIGKILL from
// "timeout -s KILL" or "kill -9 -- -PGID", or Ctrl-C at a terminal where
// exec is the foreground job, reaches exec but neither the keeper nor the
// command; exec forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the latter.
// Signals sent to the command's group never reach the keeper either. Both
// the keeper's group and the command's are background groups of the
// terminal, if there is one; the command stays in exec's session, so it
// keeps its controlling terminal. The keeper can tell when the command's
// group is empty: kill(-group, 0) fails with ESRCH. The group's ID is not
// reused while a process of the group lives. On Linux the keeper is also a
// child subreaper (PR_SET_CHILD_SUBREAPER): the command's orphans become
// its children, and it reaps them, so that no zombie keeps the group alive
// whatever PID 1 does.
//
// The keeper exits only once the group is empty. That is how exec knows
// that no process of the command is left: the run ends then, and only then
// does exec record the outcome or exit. A process that leaves
// the group (setsid, a daemon) is out of reach.
//
// The keeper holds the read end of a pipe, the lifeline, whose write end
// only exec holds. The kernel closes it when exec exits, however it exits
// (SIGKILL of exec or of its whole group, and the OOM killer included),
// and the keeper, reading EOF, sends SIGKILL to the command's group until
// it is empty, and only then exits; if exec exits before the command has
// started, the keeper does not start it. The outcome is not recorded
// then, and the run stays running until its lease lapses; the group is
// gone long before, as soon as the kernel has ended its processes. On
// Linux the command also gets SIGKILL if the keeper dies first
// (PR_SET_PDEATHSIG); exec, if it lives, then kills the rest of the group.
// The keeper ignores every signal it can.
//
// What remains: a kill of exec's group between exec's fork of the keeper
// and the child's setpgid kills the child too, but nothing of the command
// has started then, and exec is dead, so nothing runs. A kill of the
// keeper alone (not of a group: its group is its own) after it has started
// the command and before it has reported the command's group to exec
// leaves that group to the death signal, which reaches the command but
// not a process it started in that instant. And the group's ID may be
// reused once the group is empty: exec stops signalling it when the keeper
// exits, so only a signal sent in between, within a poll interval, could
// reach another group, and only if the PIDs had wrapped around meanwhile
// and the new process with that PID had made itself a group leader.
//
// The keeper also enforces the lease on its own. exec writes on the
// lifeline, as "until T", the time by which the command's group must be
// stopped unless a later one comes (T on the system's monotonic clock, in
// nanoseconds: the run's lease end by exec's own clock, less half of what
// the expiry margin leaves after the kill grace, so after exec's own stop
// and before the lease can end), first as the keeper's first argument and
// again after each heartbeat. If T passes, exec was stopped (SIGSTOP to
// its group, Ctrl-Z), starved, or is wedged: the keeper reports
// "lease-expired" and sends SIGKILL to the command's group until it is
// empty, whether exec is alive, dead or stopped.
//
// The keeper reports to exec on a second pipe: "started GROUP" once the
// command runs in the group GROUP, or "start-error CODE MESSAGE" (CODE 127
// when the command does not exist, 126 otherwise) or "keeper-error
// MESSAGE"; then "exit STATUS" with the command's raw wait status when it
// has ended, followed by "remaining" if processes of its group are still
// running then. It exits 0 when the group is empty.
const keeperName = "runclaim-exec-keeper"

// The keeper's extra file descriptors.
const (
	keeperLifelineFD = 3
	keeperReportFD   = 4
)

// groupPollInterval is how often the keeper checks whether the command's
// group is empty once the command has ended.
const groupPollInterval = 10 * time.Millisecond

// init turns this process into a keeper when exec started it as one. It
// runs before main, and before TestMain in a test binary, which exec starts
// as its keeper too. The keeper has nothing to flush, so it exits with
// syscall.Exit: os.Exit would run the race detector's exit work in a test
// binary built with -race, which takes long enough for exec to see the
// command as still running.
func init() {
	if len(os.Args) > 2 && os.Args[0] == keeperName {
		syscall.Exit(keeperMain(os.Args[1], os.Args[2], os.Args[3:]))
	}
}

// monoNow reads the system's monotonic clock, in nanoseconds: the same
// clock in exec and in the keeper, which no change of the wall clock moves.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("runclaim: read the monotonic clock: " + err.Error())
	}
	return ts.Nano()
}

// monoOf returns t, a time of this process with a monotonic reading, on
// the system's monotonic clock. The clock is read before the time left
// until t, so that a stop in between makes the result earlier, never
// later.
func monoOf(t time.Time) int64 {
	now := monoNow()
	return now + int64(time.Until(t))
}

// keeperMain is the keeper: it starts path with args (argv[0] first) in a
// process group of its own, reports on it, and exits once the group is
// empty; it kills the group if exec dies, or once the time by which it
// must stop (until, then the lifeline's "until" lines) has passed.
func keeperMain(until, path string, args []string) int {
	// The command's death signal is tied to the thread that starts it: keep
	// this goroutine, which never returns, on its thread.
	runtime.LockOSThread()
	lifeline := os.NewFile(keeperLifelineFD, "lifeline")
	report := os.NewFile(keeperReportFD, "report")
	if lifeline == nil || report == nil {
		fmt.Fprintf(os.Stderr, "%s: started without its pipes; it is started by runclaim exec\n", keeperName)
		return 2
	}
	syscall.CloseOnExec(keeperLifelineFD)
	syscall.CloseOnExec(keeperReportFD)
	// Ignore every signal that can be ignored, without SIG_IGN, which the
	// command would inherit: signals relayed to a channel that nobody
	// reads are dropped.
	signal.Notify(make(chan os.Signal, 1))
	keeperErr := func(err error) int {
		fmt.Fprintf(report, "keeper-error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}

	// exec started this process as the leader of a process group of its
	// own, so that a kill of exec's group (timeout -s KILL, kill -9 --
	// -PGID) does not reach it.
	if syscall.Getpgrp() != os.Getpid() {
		return keeperErr(errors.New("not in a process group of its own"))
	}
	if err := becomeSubreaper(); err != nil {
		return keeperErr(fmt.Errorf("become a child subreaper: %w", err))
	}
	stopBy, err := strconv.ParseInt(strings.TrimPrefix(until, "until="), 10, 64)
	if err != nil {
		return keeperErr(fmt.Errorf("bad first argument %q: want until=T", until))
	}
	// Once exec has exited, or the time to stop has passed, the command's
	// group gets SIGKILL: at once if the command runs, and again below
	// until the group is empty. If exec exits before the command starts,
	// the command is not started.
	var (
		mu       sync.Mutex // protects orphaned, expired, deadline and group
		orphaned bool       // exec has exited
		expired  bool       // the time to stop passed
		deadline = stopBy   // when to stop, on the monotonic clock
		group    int        // the command's group, once started
		renewed  = make(chan struct{}, 1)
	)
	go func() {
		sc := bufio.NewScanner(lifeline)
		for sc.Scan() { // until exec has exited
			if t, ok := strings.CutPrefix(sc.Text(), "until "); ok {
				if v, err := strconv.ParseInt(t, 10, 64); err == nil {
					mu.Lock()
					if v > deadline {
						deadline = v
					}
					mu.Unlock()
					select {
					case renewed <- struct{}{}:
					default:
					}
				}
			}
		}
		mu.Lock()
		orphaned = true
		g := group
		mu.Unlock()
		if g != 0 {
			_ = syscall.Kill(-g, syscall.SIGKILL)
		}
	}()
	doomed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return orphaned || expired
	}

	cmd := &exec.Cmd{Path: path, Args: args, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
	mu.Lock()
	if orphaned {
		mu.Unlock()
		return keeperErr(errors.New("exec exited before the command started"))
	}
	if monoNow() >= deadline {
		mu.Unlock()
		return keeperErr(errors.New("the run's lease could not be known held when the command was to start"))
	}
	if err := cmd.Start(); err != nil {
		mu.Unlock()
		code := exitCannotRun
		if errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		fmt.Fprintf(report, "start-error %d %s\n", code, strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	group = cmd.Process.Pid
	mu.Unlock()
	fmt.Fprintf(report, "started %d\n", group)

	// The watchdog: once the time to stop passes with no later one, the
	// run's lease can no longer be known held, and the group must go.
	go func() {
		for {
			mu.Lock()
			left := time.Duration(deadline - monoNow())
			if left <= 0 {
				expired = true
				g := group
				mu.Unlock()
				fmt.Fprintln(report, "lease-expired")
				_ = syscall.Kill(-g, syscall.SIGKILL)
				return
			}
			mu.Unlock()
			t := time.NewTimer(left)
			select {
			case <-t.C:
			case <-renewed:
				t.Stop()
			}
		}
	}()

	ws, err := reap(cmd.Process.Pid)
	if err != nil {
		_ = syscall.Kill(-group, syscall.SIGKILL)
		return keeperErr(err)
	}
	fmt.Fprintf(report, "exit %d\n", uint32(ws))
	if groupLeft(group) {
		fmt.Fprintln(report, "remaining")
		for groupLeft(group) {
			if doomed() {
				_ = syscall.Kill(-group, syscall.SIGKILL)
			}
			time.Sleep(groupPollInterval)
		}
	}
	return 0
}

// reap waits for the process pid, a child, and returns its wait status. It
// reaps every other child that ends meanwhile: orphans of the command's
// group that this process, a subreaper, has inherited.
func reap(pid int) (syscall.WaitStatus, error) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
		case err != nil:
			return 0, fmt.Errorf("wait for the command: %w", err)
		case got == pid:
			return ws, nil
		}
	}
}

// groupLeft reaps the children that have ended and reports whether any
// process of group is left.
func groupLeft(group int) bool {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || got <= 0 {
			break
		}
	}
	// EPERM (a member that this user may not signal) counts as left.
	return syscall.Kill(-group, 0) != syscall.ESRCH
}

// keeperPath is the program to start as the keeper: this very binary, even
// if a newer version has replaced it on disk since exec started.
func keeperPath() (string, error) {
	if runtime.GOOS == "linux" {
		return "/proc/self/exe", nil
	}
	return os.Executable()
}

// A proc is the command that exec runs, under a keeper.
type proc struct {
	keeper   *exec.Cmd
	group    int           // the command's process group, once started
	lifeline *os.File      // write end, open until the keeper has exited
	report   *bufio.Reader // the keeper's reports
	reportR  *os.File

	remaining chan struct{} // closed when the command has ended and processes of its group are left
	gone      chan struct{} // closed when the command has ended and its group is empty
	// Set before gone is closed.
	status exitStatus
	err    error

	mu      sync.Mutex // protects reaped and expired
	reaped  bool       // the keeper has exited: the group is empty, its ID may be reused
	expired bool       // the keeper stopped the group: the time to stop passed
	stopBy  int64      // the last time to stop sent to the keeper
}

// newProc prepares to run path with args (argv[0] first) and env, with
// the given standard streams. waitDelay bounds the copying of output that
// a process that left the group keeps open (see exec.Cmd.WaitDelay).
// stopBy is the time by which the command's group must be stopped unless
// stopBy moves later (see stopBy).
func newProc(path string, args, env []string, stdin io.Reader, stdout, stderr io.Writer, waitDelay time.Duration, stopBy time.Time) *proc {
	mono := monoOf(stopBy)
	k := &exec.Cmd{Args: append([]string{keeperName, "until=" + strconv.FormatInt(mono, 10), path}, args...), Env: env,
		Stdin: stdin, Stdout: stdout, Stderr: stderr, WaitDelay: waitDelay,
		// A group of its own, joined before the keeper runs, so that a
		// kill of exec's group does not reach it.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	return &proc{keeper: k, remaining: make(chan struct{}), gone: make(chan struct{}), stopBy: mono}
}

// setStopBy tells the keeper a later time by which the command's group
// must be stopped: the run's lease was extended.
func (p *proc) setStopBy(t time.Time) {
	mono := monoOf(t)
	p.mu.Lock()
	later := mono > p.stopBy
	if later {
		p.stopBy = mono
	}
	p.mu.Unlock()
	if later {
		// An error means the keeper has exited: nothing is left to stop.
		_, _ = fmt.Fprintf(p.lifeline, "until %d\n", mono)
	}
}

// stoppedByKeeper reports whether the keeper stopped the command's group
// on its own, its time to stop having passed.
func (p *proc) stoppedByKeeper() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.expired
}

// keeperError is a failure of the keeper itself, not of the command.
type keeperError struct{ err error }

func (e *keeperError) Error() string { return "the keeper process: " + e.err.Error() }
func (e *keeperError) Unwrap() error { return e.err }

// start starts the keeper and waits until it has started the command. An
// error that the command could not be started matches fs.ErrNotExist when
// it does not exist; a *keeperError when the keeper failed.
func (p *proc) start() error {
	path, err := keeperPath()
	if err != nil {
		return &keeperError{err}
	}
	p.keeper.Path = path
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return &keeperError{err}
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return &keeperError{err}
	}
	p.keeper.ExtraFiles = []*os.File{lifeR, repW} // fds 3 and 4
	err = p.keeper.Start()
	lifeR.Close()
	repW.Close()
	if err != nil {
		lifeW.Close()
		repR.Close()
		return &keeperError{err}
	}
	p.lifeline, p.reportR, p.report = lifeW, repR, bufio.NewReader(repR)

	line, rerr := p.report.ReadString('\n')
	line = strings.TrimSuffix(line, "\n")
	if s, ok := strings.CutPrefix(line, "started "); ok {
		if group, err := strconv.Atoi(s); err == nil && group > 0 {
			p.group = group
			go p.watch()
			return nil
		}
	}
	_ = p.keeper.Wait()
	p.close()
	if msg, ok := strings.CutPrefix(line, "start-error "); ok {
		code, msg, _ := strings.Cut(msg, " ")
		if code == strconv.Itoa(exitNotFound) {
			return fmt.Errorf("%s: %w", msg, fs.ErrNotExist)
		}
		return errors.New(msg)
	}
	if msg, ok := strings.CutPrefix(line, "keeper-error "); ok {
		return &keeperError{errors.New(msg)}
	}
	if rerr == nil {
		rerr = fmt.Errorf("unexpected report %q", line)
	}
	return &keeperError{fmt.Errorf("ended (%v) before starting the command: %w", p.keeper.ProcessState, rerr)}
}

// signal sends sig to the command's process group, unless it is known to
// be empty.
func (p *proc) signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	return signalGroup(p.group, sig)
}

// leftover is closed when the command has ended while processes of its
// group are still running.
func (p *proc) leftover() <-chan struct{} { return p.remaining }

// ended is closed when the command has ended and no process of its group
// is left; then result says how the command ended.
func (p *proc) ended() <-chan struct{} { return p.gone }

// result is how the command ended, once ended is closed.
func (p *proc) result() (exitStatus, error) { return p.status, p.err }

// watch reads the keeper's reports until it exits, then waits for it.
func (p *proc) watch() {
	defer close(p.gone)
	known := false
	for {
		line, err := p.report.ReadString('\n')
		if err != nil {
			break
		}
		line = strings.TrimSuffix(line, "\n")
		if s, ok := strings.CutPrefix(line, "exit "); ok {
			if ws, err := strconv.ParseUint(s, 10, 32); err == nil {
				p.status, known = statusOf(syscall.WaitStatus(ws)), true
			}
		} else if line == "remaining" {
			close(p.remaining)
		} else if line == "lease-expired" {
			p.mu.Lock()
			p.expired = true
			p.mu.Unlock()
		}
	}
	// EOF: the keeper has exited, so the group is empty if it exited 0,
	// and its ID may be reused: signal it no more.
	p.mu.Lock()
	p.reaped = true
	p.mu.Unlock()
	waitErr := p.keeper.Wait()
	p.close()
	if known && p.keeper.ProcessState.Success() {
		return
	}
	// The keeper was killed (SIGKILL, the OOM killer). The command then got
	// SIGKILL too (on Linux), but not the rest of its group, which
	// nothing guards now: kill it and wait until it is empty. Its ID, the
	// command's PID, is reused only once the group is empty and another
	// process becomes a group leader with that PID.
	for syscall.Kill(-p.group, syscall.SIGKILL) == nil {
		time.Sleep(groupPollInterval)
	}
	if known {
		return
	}
	ws, ok := p.keeper.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		p.err = &keeperError{fmt.Errorf("ended (%v, %v) without reporting the command's status", p.keeper.ProcessState, waitErr)}
		return
	}
	p.status = statusOf(ws)
}

// close releases the pipes, once the keeper has exited.
func (p *proc) close() {
	p.lifeline.Close()
	p.reportR.Close()
}

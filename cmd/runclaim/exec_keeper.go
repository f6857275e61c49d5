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
	"sync/atomic"
	"syscall"
	"time"
)

// exec does not start the command itself but through a keeper: a second
// copy of runclaim (found by keeperPath) that runs with keeperName as its
// argv[0] and starts the command in a process group of its own.
//
//	runclaim exec            holds the claim, heartbeats, records the outcome
//	└─ runclaim-exec-keeper  creates the command's group, reaps it, kills it if exec dies
//	   └─ the command        in that group, with every process it starts
//
// The keeper creates the group (its ID is the keeper's own PID), starts the
// command in it, and then moves itself back to exec's group. So the
// group's ID cannot be reused while the keeper lives, signals sent to the
// group never reach the keeper, and the keeper can tell when the group is
// empty: kill(-group, 0) fails with ESRCH. On Linux the keeper is also a
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
// (SIGKILL and the OOM killer included), and the keeper, reading EOF, sends
// SIGKILL to the group until it is empty. On Linux the command also gets
// SIGKILL if the keeper dies first (PR_SET_PDEATHSIG). The keeper ignores
// every signal it can.
//
// The keeper reports to exec on a second pipe: "started" once the command
// runs, or "start-error CODE MESSAGE" (CODE 127 when the command does not
// exist, 126 otherwise) or "keeper-error MESSAGE"; then "exit STATUS" with
// the command's raw wait status when it has ended, followed by "remaining"
// if processes of its group are still running then. It exits 0 when the
// group is empty.
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
	if len(os.Args) > 1 && os.Args[0] == keeperName {
		syscall.Exit(keeperMain(os.Args[1], os.Args[2:]))
	}
}

// keeperMain is the keeper: it starts path with args (argv[0] first) in a
// process group of its own, reports on it, and exits once the group is
// empty; it kills the group if exec dies.
func keeperMain(path string, args []string) int {
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

	home := syscall.Getpgrp() // exec's group
	if err := syscall.Setpgid(0, 0); err != nil {
		return keeperErr(fmt.Errorf("create a process group: %w", err))
	}
	group := os.Getpid()
	if err := becomeSubreaper(); err != nil {
		return keeperErr(fmt.Errorf("become a child subreaper: %w", err))
	}
	// From here on, exec's death kills the group: this process while it is
	// still in it, then the command and all it started.
	var orphaned atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, lifeline) // returns when exec has exited
		orphaned.Store(true)
		_ = syscall.Kill(-group, syscall.SIGKILL)
	}()

	cmd := &exec.Cmd{Path: path, Args: args, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	setDeathSignal(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		code := exitCannotRun
		if errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		fmt.Fprintf(report, "start-error %d %s\n", code, strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	if err := syscall.Setpgid(0, home); err != nil {
		_ = syscall.Kill(-group, syscall.SIGKILL)
		return keeperErr(fmt.Errorf("leave the command's process group: %w", err))
	}
	fmt.Fprintln(report, "started")

	ws, err := reap(cmd.Process.Pid)
	if err != nil {
		_ = syscall.Kill(-group, syscall.SIGKILL)
		return keeperErr(err)
	}
	fmt.Fprintf(report, "exit %d\n", uint32(ws))
	if groupLeft(group) {
		fmt.Fprintln(report, "remaining")
		for groupLeft(group) {
			if orphaned.Load() {
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
	lifeline *os.File      // write end, open until the keeper has exited
	report   *bufio.Reader // the keeper's reports
	reportR  *os.File

	remaining chan struct{} // closed when the command has ended and processes of its group are left
	gone      chan struct{} // closed when the command has ended and its group is empty
	// Set before gone is closed.
	status exitStatus
	err    error

	mu     sync.Mutex // protects reaped
	reaped bool       // the keeper is reaped: the group's ID may be reused
}

// newProc prepares to run path with args (argv[0] first) and env, with
// the given standard streams. waitDelay bounds the copying of output that
// a process that left the group keeps open (see exec.Cmd.WaitDelay).
func newProc(path string, args, env []string, stdin io.Reader, stdout, stderr io.Writer, waitDelay time.Duration) *proc {
	k := &exec.Cmd{Args: append([]string{keeperName, path}, args...), Env: env,
		Stdin: stdin, Stdout: stdout, Stderr: stderr, WaitDelay: waitDelay}
	return &proc{keeper: k, remaining: make(chan struct{}), gone: make(chan struct{})}
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
	if line == "started" {
		go p.watch()
		return nil
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
	return signalGroup(p.keeper.Process, sig)
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
		}
	}
	// EOF: the keeper has exited, so the group is empty if it exited 0.
	// The keeper is not reaped yet, so its PID, the group's ID, is not
	// reused before the lock below is taken.
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
	// nothing guards now: kill it and wait until it is empty. Its ID was
	// the keeper's PID, reused only once the group is empty and another
	// process becomes a group leader with that PID.
	group := p.keeper.Process.Pid
	for syscall.Kill(-group, syscall.SIGKILL) == nil {
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

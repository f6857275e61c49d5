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
	"syscall"
	"time"
)

// exec does not start the command itself but through a keeper: a second
// copy of runclaim (found by keeperPath) that runs with keeperName as its
// argv[0], leads a process group of its own and starts the command in it.
//
//	runclaim exec            holds the claim, heartbeats, records the outcome
//	└─ runclaim-exec-keeper  process group leader; kills the group when exec dies
//	   └─ the command        and everything it starts, in the same group
//
// The keeper holds the read end of a pipe, the lifeline, whose write end
// only exec holds. The kernel closes it when exec exits, however it exits
// (SIGKILL and the OOM killer included), and the keeper, reading EOF, sends
// SIGKILL to its whole process group, itself included. On Linux the
// command also gets SIGKILL if the keeper dies first (PR_SET_PDEATHSIG).
// The keeper ignores every signal it can, so that the signals exec
// forwards to the group reach the command alone.
//
// The keeper reports to exec on a second pipe: "started" once the command
// runs, or "start-error CODE MESSAGE" (CODE 127 when the command does not
// exist, 126 otherwise); then "exit STATUS" with the command's raw wait
// status when it has ended.
const keeperName = "runclaim-exec-keeper"

// The keeper's extra file descriptors.
const (
	keeperLifelineFD = 3
	keeperReportFD   = 4
)

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

// keeperMain is the keeper: it starts path with args (argv[0] first) in its
// own process group, reports on it, and kills the group if exec dies.
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
	go func() {
		_, _ = io.Copy(io.Discard, lifeline) // returns when exec has exited
		_ = syscall.Kill(0, syscall.SIGKILL) // this process group: the keeper, the command and its children
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
	fmt.Fprintln(report, "started")
	_ = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	fmt.Fprintf(report, "exit %d\n", uint32(ws))
	return 0
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
}

// newProc prepares to run path with args (argv[0] first) and env, with
// the given standard streams. waitDelay bounds the copying of output that
// a background process of the command keeps open (see exec.Cmd.WaitDelay).
func newProc(path string, args, env []string, stdin io.Reader, stdout, stderr io.Writer, waitDelay time.Duration) *proc {
	k := &exec.Cmd{Args: append([]string{keeperName, path}, args...), Env: env,
		Stdin: stdin, Stdout: stdout, Stderr: stderr, WaitDelay: waitDelay}
	k.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return &proc{keeper: k}
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
	switch {
	case line == "started\n":
		return nil
	case strings.HasPrefix(line, "start-error "):
		_ = p.keeper.Wait()
		p.close()
		code, msg, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(line, "start-error "), "\n"), " ")
		if code == strconv.Itoa(exitNotFound) {
			return fmt.Errorf("%s: %w", msg, fs.ErrNotExist)
		}
		return errors.New(msg)
	}
	_ = p.keeper.Wait()
	p.close()
	if rerr == nil {
		rerr = fmt.Errorf("unexpected report %q", line)
	}
	return &keeperError{fmt.Errorf("ended (%v) before starting the command: %w", p.keeper.ProcessState, rerr)}
}

// signal sends sig to the command's process group, the keeper's.
func (p *proc) signal(sig os.Signal) error { return signalGroup(p.keeper.Process, sig) }

// wait waits for the command and returns how it ended: as the keeper
// reported it, or, if the keeper was killed before it could (SIGKILL sent
// to the group), as the keeper ended.
func (p *proc) wait() (exitStatus, error) {
	waitErr := p.keeper.Wait()
	defer p.close()
	line, _ := p.report.ReadString('\n')
	if s, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "exit "); ok {
		if ws, err := strconv.ParseUint(s, 10, 32); err == nil {
			return statusOf(syscall.WaitStatus(ws)), nil
		}
	}
	ws, ok := p.keeper.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return exitStatus{}, &keeperError{fmt.Errorf("ended (%v, %v) without reporting the command's status", p.keeper.ProcessState, waitErr)}
	}
	return statusOf(ws), nil
}

// close releases the pipes, once the keeper has exited.
func (p *proc) close() {
	p.lifeline.Close()
	p.reportR.Close()
}

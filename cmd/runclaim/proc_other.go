//go:build !unix

package main

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Without process groups and a death signal, exec starts the command
// directly: it is not stopped if exec dies, and signals reach the command
// alone, not the processes it starts.

// A proc is the command that exec runs.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the command has ended
	// Set before done is closed.
	status exitStatus
	err    error
}

// newProc prepares to run path with args (argv[0] first) and env, with
// the given standard streams. waitDelay bounds the copying of output that
// a background process of the command keeps open (see exec.Cmd.WaitDelay).
func newProc(path string, args, env []string, stdin io.Reader, stdout, stderr io.Writer, waitDelay time.Duration, _ time.Time) *proc {
	return &proc{cmd: &exec.Cmd{Path: path, Args: args, Env: env, Stdin: stdin, Stdout: stdout, Stderr: stderr, WaitDelay: waitDelay},
		done: make(chan struct{})}
}

// keeperError is a failure of exec's own machinery; there is none here.
type keeperError struct{ err error }

func (e *keeperError) Error() string { return e.err.Error() }
func (e *keeperError) Unwrap() error { return e.err }

// start starts the command.
func (p *proc) start() error {
	if err := p.cmd.Start(); err != nil {
		return err
	}
	go p.wait()
	return nil
}

// signal signals the command; only SIGKILL is sure to work.
func (p *proc) signal(sig os.Signal) error {
	if sig == syscall.SIGKILL {
		return p.cmd.Process.Kill()
	}
	return p.cmd.Process.Signal(sig)
}

// wait waits for the command and notes how it ended.
func (p *proc) wait() {
	defer close(p.done)
	err := p.cmd.Wait()
	ps := p.cmd.ProcessState
	if ps == nil {
		p.err = err
		return
	}
	p.status = exitStatus{code: ps.ExitCode(), text: ps.String()}
}

// leftover is never closed: without process groups, exec cannot see the
// processes the command leaves behind.
func (p *proc) leftover() <-chan struct{} { return nil }

// ended is closed when the command has ended; then result says how.
func (p *proc) ended() <-chan struct{} { return p.done }

// result is how the command ended, once ended is closed.
func (p *proc) result() (exitStatus, error) { return p.status, p.err }

// signalNumber is sig's number, for exit codes 128+N.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}

// setStopBy does nothing: without a keeper, nothing stops the command if
// exec is stopped.
func (p *proc) setStopBy(time.Time) {}

// stoppedByKeeper is always false: there is no keeper.
func (p *proc) stoppedByKeeper() bool { return false }

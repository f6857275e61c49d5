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
type proc struct{ cmd *exec.Cmd }

// newProc prepares to run path with args (argv[0] first) and env, with
// the given standard streams. waitDelay bounds the copying of output that
// a background process of the command keeps open (see exec.Cmd.WaitDelay).
func newProc(path string, args, env []string, stdin io.Reader, stdout, stderr io.Writer, waitDelay time.Duration) *proc {
	return &proc{cmd: &exec.Cmd{Path: path, Args: args, Env: env, Stdin: stdin, Stdout: stdout, Stderr: stderr, WaitDelay: waitDelay}}
}

// keeperError is a failure of exec's own machinery; there is none here.
type keeperError struct{ err error }

func (e *keeperError) Error() string { return e.err.Error() }
func (e *keeperError) Unwrap() error { return e.err }

// start starts the command.
func (p *proc) start() error { return p.cmd.Start() }

// signal signals the command; only SIGKILL is sure to work.
func (p *proc) signal(sig os.Signal) error {
	if sig == syscall.SIGKILL {
		return p.cmd.Process.Kill()
	}
	return p.cmd.Process.Signal(sig)
}

// wait waits for the command and returns how it ended.
func (p *proc) wait() (exitStatus, error) {
	err := p.cmd.Wait()
	ps := p.cmd.ProcessState
	if ps == nil {
		return exitStatus{}, err
	}
	return exitStatus{code: ps.ExitCode(), text: ps.String()}, nil
}

// signalNumber is sig's number, for exit codes 128+N.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}

//go:build !unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// setProcessGroup does nothing where there are no process groups.
func setProcessGroup(*exec.Cmd) {}

// signalGroup signals the process itself; only SIGKILL is sure to work.
func signalGroup(p *os.Process, sig os.Signal) error {
	if sig == syscall.SIGKILL {
		return p.Kill()
	}
	return p.Signal(sig)
}

// signalNumber is sig's number, for exit codes 128+N.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}

// exitCodeOf is the process's exit code.
func exitCodeOf(ps *os.ProcessState) int { return ps.ExitCode() }

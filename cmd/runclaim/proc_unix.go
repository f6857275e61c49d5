//go:build unix

package main

import (
	"os"
	"strconv"
	"syscall"
)

// signalGroup sends sig to the process group whose ID is p's PID: the
// group the keeper p created for the command. The ID is not reused while
// p, or any process of the group, is alive.
func signalGroup(p *os.Process, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	return syscall.Kill(-p.Pid, s)
}

// signalNumber is sig's number, for exit codes 128+N.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}

// statusOf describes a process that ended as ws says, as os.ProcessState
// does, with the shell's exit code: its exit status, or 128+N if signal N
// killed it.
func statusOf(ws syscall.WaitStatus) exitStatus {
	var s exitStatus
	switch {
	case ws.Exited():
		s.code = ws.ExitStatus()
		s.text = "exit status " + strconv.Itoa(s.code)
	case ws.Signaled():
		s.code = 128 + int(ws.Signal())
		s.text = "signal: " + ws.Signal().String()
	default:
		s.code = exitCannotRun
		s.text = "unknown wait status " + strconv.Itoa(int(ws))
	}
	if ws.CoreDump() {
		s.text += " (core dumped)"
	}
	return s
}

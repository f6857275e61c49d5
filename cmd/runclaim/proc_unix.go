//go:build unix

package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// signalGroup sends sig to the process group group: the command's group,
// whose ID is the command's PID. The ID is not reused while any process
// of the group is alive.
func signalGroup(group int, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("cannot send %v to a process group", sig)
	}
	return syscall.Kill(-group, s)
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

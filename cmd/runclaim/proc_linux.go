package main

import "syscall"

// setDeathSignal makes the kernel send SIGKILL to the process started with
// a when the thread that started it ends (PR_SET_PDEATHSIG).
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

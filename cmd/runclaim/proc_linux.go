package main

import "syscall"

// setDeathSignal makes the kernel send SIGKILL to the process started with
// a when the thread that started it ends (PR_SET_PDEATHSIG).
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

// becomeSubreaper makes this process the parent of its descendants'
// orphans (PR_SET_CHILD_SUBREAPER), so that it can reap them.
func becomeSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return errno
	}
	return nil
}

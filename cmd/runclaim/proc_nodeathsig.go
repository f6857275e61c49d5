//go:build unix && !linux

package main

import "syscall"

// setDeathSignal does nothing: only Linux has PR_SET_PDEATHSIG. The keeper's
// lifeline still kills the command when exec dies; the command survives
// only the keeper's own death.
func setDeathSignal(*syscall.SysProcAttr) {}

// becomeSubreaper does nothing: only Linux has PR_SET_CHILD_SUBREAPER. The
// command's orphans go to init, which reaps them, so the keeper still sees
// its group empty once they have ended.
func becomeSubreaper() error { return nil }

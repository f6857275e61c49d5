package tcpproxy

import (
	"syscall"
	"time"
)

// preciseSleep sleeps d with nanosleep(2), which the kernel's
// high-resolution timers end within microseconds, blocking its thread (the
// runtime gives the goroutine's P to another thread meanwhile).
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		err := syscall.Nanosleep(&ts, &rem)
		if err != syscall.EINTR {
			return
		}
		ts = rem
	}
}

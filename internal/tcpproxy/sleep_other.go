//go:build !linux

package tcpproxy

import "time"

// preciseSleep sleeps d as precisely as the Go runtime's timers allow.
func preciseSleep(d time.Duration) { time.Sleep(d) }

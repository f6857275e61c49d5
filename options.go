package runclaim

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// An Option configures a Claimer. New and Claimer.With apply the options
// in order and return the first one's error.
type Option func(*config) error

// config is what the options set. The timing derived from it is the
// Claimer's schedule.
type config struct {
	lease       time.Duration
	minInterval time.Duration
	heartbeat   time.Duration // as WithHeartbeat set it; 0: the default, lease/3
	maxRunTime  time.Duration // 0: no limit
	owner       string
	hooks       Hooks
	logger      *slog.Logger
	keysOf      func(source string) []string // WithSourceKeys's; nil: none
}

// WithLease sets how long a claim holds its source without a heartbeat
// (DefaultLease if not set). A holder that crashes frees its source within one
// lease. It must be between MinLease and MaxLease.
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		if d < MinLease || d > MaxLease {
			return fmt.Errorf("runclaim: WithLease: lease must be between %v and %v, got %v", MinLease, MaxLease, d)
		}
		c.lease = d
		return nil
	}
}

// WithMinInterval sets the shortest time between the starts of two runs of a
// source (0, the default, means none). A claim earlier than that is skipped
// with ErrTooSoon. It must not be negative.
func WithMinInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > MaxLease {
			return fmt.Errorf("runclaim: WithMinInterval: interval must be between 0 and %v, got %v", MaxLease, d)
		}
		c.minInterval = d
		return nil
	}
}

// WithHeartbeat sets how often Do and KeepAlive extend the lease of a
// running run. The default is a third of the lease; it must be positive
// and shorter than half the lease, so that one failed heartbeat does not
// lose the run. The rest of the heartbeat timing follows from it and the
// lease (see Settings.ExpiryMargin, Settings.HeartbeatTimeout and
// Settings.RetryDelay).
func WithHeartbeat(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("runclaim: WithHeartbeat: interval must be positive, got %v", d)
		}
		c.heartbeat = d
		return nil
	}
}

// WithMaxRunTime bounds how long Do lets fn run: once d has passed since
// the claim was sent, by this process's clock, Do cancels fn's context with
// a cause matching ErrRunTimeout, and the run is recorded as failed with
// that text, whatever fn then returns (see Do). 0, the default, means no
// limit; d must not be negative.
//
// Like a lost lease, the limit does not end the run by itself: Do keeps
// the run alive until fn returns, so that no other replica starts the
// source while fn winds down. A function that ignores its context still
// holds its source; runclaim exec --max-run-time kills the command's
// process group.
func WithMaxRunTime(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("runclaim: WithMaxRunTime: maximum run time must not be negative, got %v", d)
		}
		c.maxRunTime = d
		return nil
	}
}

// WithOwner names the holder recorded with each run (by default the host
// name, the process ID and a random suffix). It must be valid UTF-8 of at most
// MaxOwnerLen bytes without control characters.
func WithOwner(owner string) Option {
	return func(c *config) error {
		if err := validateName(owner, MaxOwnerLen); err != nil {
			return fmt.Errorf("runclaim: WithOwner: %w", err)
		}
		c.owner = owner
		return nil
	}
}

// applyOptions applies opts to c, in order; fn names the caller in the
// error for a nil option.
func applyOptions(c config, opts []Option, fn string) (config, error) {
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("runclaim: %s: nil Option", fn)
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	if c.heartbeat != 0 && c.heartbeat >= c.lease/2 {
		return c, fmt.Errorf("runclaim: WithHeartbeat: interval %v must be shorter than half the lease (%v)", c.heartbeat, c.lease)
	}
	return c, nil
}

// defaultOwner is "host-pid-random", cut to MaxOwnerLen.
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || validateName(host, MaxOwnerLen-32) != nil {
		host = "unknown"
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(r[:]))
}

// WithSourceKeys gives every claim of a source the keys keysOf returns for
// it, so that code that claims through an adapter (gocronlock, cronlock,
// runclaim exec) names keys without a change at each call site. keysOf
// must be safe for concurrent use and quick; it may return nil for a
// source that names no key. Keys it returns that are invalid make the
// claim fail, as WithKeys's do.
func WithSourceKeys(keysOf func(source string) []string) Option {
	return func(c *config) error {
		if keysOf == nil {
			return errors.New("runclaim: WithSourceKeys: nil function")
		}
		c.keysOf = keysOf
		return nil
	}
}

package runclaim

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Defaults and limits of the Claimer options.
const (
	// DefaultLease is the lease a claim takes unless WithLease sets another.
	DefaultLease = 30 * time.Second
	// MinLease is the shortest lease WithLease accepts.
	MinLease = 10 * time.Millisecond
	// MaxLease is the longest lease WithLease accepts.
	MaxLease = 365 * 24 * time.Hour
	// MaxSourceLen is the longest source name, in bytes.
	MaxSourceLen = 512
	// MaxOwnerLen is the longest owner name, in bytes.
	MaxOwnerLen = 512
)

// An Option configures a Claimer. Options are validated by New.
type Option func(*config)

type config struct {
	lease       time.Duration
	minInterval time.Duration
	heartbeat   time.Duration // 0: lease/3
	maxRunTime  time.Duration // 0: no limit
	owner       string
	hooks       Hooks
	logger      *slog.Logger
	errs        []error
}

// WithLease sets how long a claim holds its source without a heartbeat
// (DefaultLease if not set). A holder that crashes frees its source within one
// lease. It must be between MinLease and MaxLease.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d < MinLease || d > MaxLease {
			c.errs = append(c.errs, fmt.Errorf("runclaim: WithLease: lease must be between %v and %v, got %v", MinLease, MaxLease, d))
			return
		}
		c.lease = d
	}
}

// WithMinInterval sets the shortest time between the starts of two runs of a
// source (0, the default, means none). A claim earlier than that is skipped
// with ErrTooSoon. It must not be negative.
func WithMinInterval(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > MaxLease {
			c.errs = append(c.errs, fmt.Errorf("runclaim: WithMinInterval: interval must be between 0 and %v, got %v", MaxLease, d))
			return
		}
		c.minInterval = d
	}
}

// WithHeartbeat sets how often Do extends the lease of a running run. The
// default is a third of the lease; it must be positive and shorter than half
// the lease, so that one failed heartbeat does not lose the run.
func WithHeartbeat(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("runclaim: WithHeartbeat: interval must be positive, got %v", d))
			return
		}
		c.heartbeat = d
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
	return func(c *config) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("runclaim: WithMaxRunTime: maximum run time must not be negative, got %v", d))
			return
		}
		c.maxRunTime = d
	}
}

// WithOwner names the holder recorded with each run (by default the host
// name, the process ID and a random suffix). It must be valid UTF-8 of at most
// MaxOwnerLen bytes without control characters.
func WithOwner(owner string) Option {
	return func(c *config) {
		if err := validateName(owner, MaxOwnerLen); err != nil {
			c.errs = append(c.errs, fmt.Errorf("runclaim: WithOwner: %w", err))
			return
		}
		c.owner = owner
	}
}

func buildConfig(opts []Option) (config, error) {
	c := config{lease: DefaultLease}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, fmt.Errorf("runclaim: New: nil Option"))
			continue
		}
		o(&c)
	}
	if len(c.errs) > 0 {
		return c, c.errs[0]
	}
	if c.heartbeat == 0 {
		c.heartbeat = c.lease / 3
	} else if c.heartbeat >= c.lease/2 {
		return c, fmt.Errorf("runclaim: WithHeartbeat: interval %v must be shorter than half the lease (%v)", c.heartbeat, c.lease)
	}
	if c.owner == "" {
		c.owner = defaultOwner()
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

package runclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/runclaim/runclaim/internal/rules"
)

// Keys: a key names a target that many sources share ("site:avito"). A
// claim names zero or more keys (WithKeys, WithSourceKeys); a key may have
// a Limit and may be cooling down (see Limiter). Every store decides a
// claim's keys inside the claim, under the key's lock and by its own clock,
// so that a limit binds every replica of every version that names the key.

// Limit bounds the runs of every source whose claims name one key,
// across every replica. Zero means no bound; a key whose limit is zero in
// both counts, and that is not cooling down, constrains nothing.
type Limit struct {
	MaxRunning int           // at most this many running runs of the key at once; 0: no bound
	MaxStarts  int           // at most this many starts in any window of Per; 0: no bound
	Per        time.Duration // the window of MaxStarts
}

// Validate returns an error, naming the field, if l is out of range:
// negative counts, counts above MaxLimitCount, MaxStarts without a Per (or
// a Per without MaxStarts), or a Per that is not whole microseconds or is
// longer than MaxLimitPer.
func (l Limit) Validate() error {
	switch {
	case l.MaxRunning < 0 || l.MaxRunning > MaxLimitCount:
		return fmt.Errorf("runclaim: Limit.MaxRunning must be between 0 and %d, got %d", MaxLimitCount, l.MaxRunning)
	case l.MaxStarts < 0 || l.MaxStarts > MaxLimitCount:
		return fmt.Errorf("runclaim: Limit.MaxStarts must be between 0 and %d, got %d", MaxLimitCount, l.MaxStarts)
	case l.MaxStarts > 0 && l.Per <= 0:
		return fmt.Errorf("runclaim: Limit.Per must be positive with MaxStarts %d, got %v", l.MaxStarts, l.Per)
	case l.MaxStarts == 0 && l.Per != 0:
		return fmt.Errorf("runclaim: Limit.Per is %v but MaxStarts is 0: give both or neither", l.Per)
	case l.Per > MaxLimitPer:
		return fmt.Errorf("runclaim: Limit.Per must be at most %v, got %v", MaxLimitPer, l.Per)
	case l.Per%time.Microsecond != 0:
		return fmt.Errorf("runclaim: Limit.Per must be whole microseconds, got %v", l.Per)
	}
	return nil
}

// A Limiter is a Store that honours keys: it decides every key a claim
// names inside the claim. PostgresStore and MemoryStore implement it.
// Claimer refuses a claim that names keys on a Store that is not one, so
// that a key is never silently ignored.
type Limiter interface {
	Store
	// SetLimit creates or replaces the limit of key. It takes effect for
	// the next claim that names key; runs already started count.
	SetLimit(ctx context.Context, key string, l Limit) error
	// DeleteLimit removes the limit of key, if any; a cooldown stays.
	DeleteLimit(ctx context.Context, key string) error
	// Cooldown skips every claim that names key until until, by the
	// store's clock, with note (at most MaxCooldownNoteLen bytes). It
	// never shortens a cooldown already in force: the later end, with its
	// note, stays. until must be after the store's clock.
	Cooldown(ctx context.Context, key string, until time.Time, note string) error
	// EndCooldown ends key's cooldown, if any.
	EndCooldown(ctx context.Context, key string) error
}

// cooldownForer is a Limiter that can start a cooldown of d from its own
// clock, as Run.Cooldown asks.
type cooldownForer interface {
	cooldownFor(ctx context.Context, key string, d time.Duration, note string) error
}

// validateKey returns an error if key cannot be named by a claim: the
// rules of ValidateSource, with MaxKeyLen.
func validateKey(key string) error { return rules.Key(key, MaxKeyLen) }

// validateKeys returns an error for a list of keys a claim cannot name:
// more than MaxKeys, an invalid key, or a key listed twice.
func validateKeys(keys []string) error {
	if len(keys) > MaxKeys {
		return fmt.Errorf("runclaim: %d keys, more than MaxKeys (%d)", len(keys), MaxKeys)
	}
	for i, k := range keys {
		if err := validateKey(k); err != nil {
			return err
		}
		if slices.Contains(keys[:i], k) {
			return fmt.Errorf("runclaim: key %s is listed twice", quoteForError(k))
		}
	}
	return nil
}

// checkKeyCall validates the arguments of a Limiter call that names one key.
func checkKeyCall(ctx context.Context, key string) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	return validateKey(key)
}

// checkCooldown validates a Cooldown's arguments, all but until's place
// against the store's clock.
func checkCooldown(ctx context.Context, key string, until time.Time, note string) error {
	if err := checkKeyCall(ctx, key); err != nil {
		return err
	}
	if until.IsZero() {
		return fmt.Errorf("runclaim: cooldown %s: zero end; a cooldown ends at a time (EndCooldown ends it early)", quoteForError(key))
	}
	if until.After(maxPauseUntil) {
		return fmt.Errorf("runclaim: cooldown %s: until %s is after year 9999", quoteForError(key), until.Format(time.RFC3339))
	}
	return validateNote("cooldown", note)
}

// checkCooldownFor validates a cooldown of d from now.
func checkCooldownFor(ctx context.Context, key string, d time.Duration, note string) error {
	if err := checkKeyCall(ctx, key); err != nil {
		return err
	}
	if d <= 0 || d > MaxLease {
		return fmt.Errorf("runclaim: cooldown %s: duration must be between 0 (excluded) and %v, got %v", quoteForError(key), MaxLease, d)
	}
	return validateNote("cooldown", note)
}

// pastCooldown is the error for a cooldown that would have ended already.
func pastCooldown(key string, until, now time.Time) error {
	return fmt.Errorf("runclaim: cooldown %s: until %s is not after the store's clock, %s", quoteForError(key), until.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
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

// keysFor returns the keys a claim of source names: keysOf's, then those
// of WithKeys not among them.
func (c *Claimer) keysFor(source string, call []string) ([]string, error) {
	var keys []string
	if c.cfg.keysOf != nil {
		keys = slices.Clone(c.cfg.keysOf(source))
		if err := validateKeys(keys); err != nil {
			return nil, fmt.Errorf("runclaim: the keys WithSourceKeys gives %s: %w", quoteForError(source), err)
		}
	}
	for _, k := range call {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) > MaxKeys {
		return nil, fmt.Errorf("runclaim: claim %s names %d keys, more than MaxKeys (%d)", quoteForError(source), len(keys), MaxKeys)
	}
	if len(keys) > 0 {
		if _, ok := c.store.(Limiter); !ok {
			return nil, fmt.Errorf("runclaim: claim %s names keys, but the store (%T) is not a Limiter, which would ignore them", quoteForError(source), c.store)
		}
	}
	return keys, nil
}

// Cooldown makes every claim that names key wait d from now, by the
// store's clock (PostgresStore's and MemoryStore's; another Limiter is
// given this process's clock plus d), with note: for instance on an HTTP 429 answer, for its
// Retry-After. A cooldown never shortens one already in force. The run
// need not have named key, nor still hold its lease. It returns an error
// if the Claimer's store is not a Limiter, for an invalid key or note, and
// for d not positive or longer than MaxLease.
func (r *Run) Cooldown(ctx context.Context, key string, d time.Duration, note string) error {
	if err := checkCooldownFor(ctx, key, d, note); err != nil {
		return err
	}
	switch s := r.claimer.store.(type) {
	case cooldownForer:
		return s.cooldownFor(ctx, key, d, note)
	case Limiter:
		return s.Cooldown(ctx, key, time.Now().Add(d), note)
	}
	return fmt.Errorf("runclaim: cooldown %s: the store (%T) is not a Limiter", quoteForError(key), r.claimer.store)
}

// KeyState is what Keys reports of one key.
type KeyState struct {
	Key   string
	Limit Limit // zero when the key has none
	// Running is how many runs that named the key are running with a
	// live lease.
	Running int
	// Starts is how many runs that named the key started within the
	// limit's window, counted up to Limit.MaxStarts; 0 without MaxStarts.
	Starts int
	// CoolingUntil is the end of the key's cooldown, zero when none is in
	// force, and Note its note.
	CoolingUntil time.Time
	Note         string
}

package runclaim

import (
	"context"
	"fmt"
	"time"
)

// Keys: a key names a target that many sources share ("site:avito"). A
// claim names zero or more keys (WithKeys, WithSourceKeys); a key may have
// a Limit and may be cooling down (see Limiter). Every store decides a
// claim's keys inside the claim, under the key's lock and by its own clock,
// so that a limit binds every replica of every version that names the key.

// cooldownForer is a Limiter that can start a cooldown of d from its own
// clock, as Run.Cooldown asks.
type cooldownForer interface {
	cooldownFor(ctx context.Context, key string, d time.Duration, note string) error
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
	// LastStart is the key's newest start, when its limit has a MinGap
	// (the next claim may start at LastStart plus MinGap); zero otherwise.
	LastStart time.Time
}

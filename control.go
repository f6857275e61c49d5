package runclaim

import (
	"context"
	"fmt"
	"time"
)

// A Controller is a Store that operators can steer without a deploy: pause
// a source, resume it, and trigger one run of it. PostgresStore and
// MemoryStore are Controllers.
//
// Controller is an interface of its own rather than more methods of Store:
// a Store written for an earlier release stays a Store, the Claimer needs
// none of these methods, and a service that only claims can be given a
// Store whose database role may claim but not pause. Find out whether a
// Store is also a Controller with a type assertion.
//
// The rules, which package storetest checks:
//   - A pause skips every claim of the source with ErrPaused until it ends
//     or Resume is called. It never touches a running run: its heartbeats
//     and its finish go on as before. To stop a run now, release it (the
//     runclaim CLI's release) and its holder's context is cancelled at its
//     next heartbeat.
//   - A trigger makes the next claim of the source win despite the minimum
//     interval or a done tick (ErrTickDone). The claim that wins uses it up; a skipped claim does not.
//     It does not break in on a running run or a pause: while one holds
//     the source, claims are skipped as without it, and the trigger waits.
//   - A skipped claim writes nothing; a claim that uses a trigger consumes
//     it in the same transaction as it starts its run.
//   - A run that a trigger lets in over a done tick does not serve the
//     tick again: the tick's first run stays its run (PostgresStore
//     records the new run without a tick, as the index of ticks served
//     holds one run per tick), though the claim returns the tick asked
//     for.
type Controller interface {
	Store

	// Pause skips every claim of source until until, or, if until is the
	// zero time, until Resume. A pause of a source that is paused
	// already replaces it, note included. until must be later than the
	// store's clock: a time that has passed is refused with an error and
	// changes nothing (a pause that would end at once is a mistake, not
	// a no-op), and so is one after year 9999. note is stored with the
	// pause and shown in skips and in the CLI's status: at most
	// MaxPauseNoteLen bytes of UTF-8 without a NUL byte.
	Pause(ctx context.Context, source string, until time.Time, note string) error

	// Resume ends the pause of source. It returns nil if the source is
	// not paused.
	Resume(ctx context.Context, source string) error

	// Trigger lets the next claim of source win despite the minimum
	// interval or a done tick. It is used once, by the claim that wins; a second Trigger
	// before then changes nothing. It waits while a run holds the source
	// or the source is paused.
	Trigger(ctx context.Context, source string) error
}

// maxPauseUntil is the latest end a pause takes: the last moment of year
// 9999, which every store can keep (a Postgres timestamp can, a pgx
// encoding of a much later one cannot).
var maxPauseUntil = time.Date(9999, time.December, 31, 23, 59, 59, 999999000, time.UTC)

// checkPause validates a Pause's arguments, all but until's place against
// the store's clock.
func checkPause(ctx context.Context, source string, until time.Time, note string) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := ValidateSource(source); err != nil {
		return err
	}
	if until.After(maxPauseUntil) {
		return fmt.Errorf("runclaim: pause %s: until %s is after year 9999; give an earlier time, or the zero time to pause until Resume",
			quoteForError(source), until.Format(time.RFC3339))
	}
	return validateNote("pause", note)
}

// pastUntil is the error for a pause that would have ended already.
func pastUntil(source string, until, now time.Time) error {
	return fmt.Errorf("runclaim: pause %s: until %s is not after the store's clock, %s; give a later time, or the zero time to pause until Resume",
		quoteForError(source), until.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
}

// checkSourceCall validates the arguments of Resume and Trigger.
func checkSourceCall(ctx context.Context, source string) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	return ValidateSource(source)
}

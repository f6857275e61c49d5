package runclaim

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The errors of the package. Skips match ErrNotClaimed and one reason;
// the others are failures.
var (
	// ErrNotClaimed matches, with errors.Is, every error that means "this
	// tick was skipped": the source is held by another run, another claim
	// for it is in flight, the minimum interval has not passed, the tick
	// claimed was served already, the source is paused, or a key the claim
	// names is limited. Nothing was written and no lock is held. Use
	// errors.Is(err, ErrAlreadyRunning), ErrTooSoon, ErrTickDone, ErrPaused
	// or ErrLimited to tell which (SkipReasons lists them), and errors.As
	// with *NotClaimedError for details.
	ErrNotClaimed = errors.New("runclaim: not claimed")

	// ErrAlreadyRunning means another run holds the source, or another claim for
	// it is in flight: a claim's skip, which matches ErrNotClaimed too. (An
	// operator's SetState or ClearState that finds a run holding the source
	// returns ErrSourceHeld instead, which is a refusal, not a skip.)
	ErrAlreadyRunning = newSkip("runclaim: source is already running")

	// ErrTooSoon means the minimum interval since the source's last run start has
	// not passed. It matches ErrNotClaimed too.
	ErrTooSoon = newSkip("runclaim: too soon since the last run")

	// ErrTickDone means a run has served the tick that a claim named with ForTick, or a
	// later one: a run of the source with that tick or a later one is running,
	// succeeded or failed. A run that expired leaves its tick open. It matches
	// ErrNotClaimed too.
	ErrTickDone = newSkip("runclaim: tick already served")

	// ErrPaused means an operator paused the source (see Controller.Pause):
	// every claim of it is skipped until the pause ends or the source is
	// resumed. It matches ErrNotClaimed too; the *NotClaimedError carries the
	// pause's end as RetryAfter (zero for a pause until Resume) and its note.
	ErrPaused = newSkip("runclaim: source is paused")

	// ErrLimited means a key the claim named is limited: it is cooling down,
	// it has MaxRunning runs running, or it had MaxStarts starts within its
	// window. It matches ErrNotClaimed too; the *NotClaimedError names the Key,
	// and RetryAfter says when the key has room again by the store's clock.
	ErrLimited = newSkip("runclaim: a key the claim names is limited")

	// ErrLeaseLost means the run is no longer this holder's: its lease ended and
	// another claim expired it, or an operator released it. Heartbeat and Finish
	// return it (use errors.Is), and Do cancels its function's context with it as
	// the cause (see context.Cause).
	ErrLeaseLost = errors.New("runclaim: lease lost")

	// ErrNoLockExclusion means the database's advisory locks do not
	// exclude across sessions, which every claim relies on: an engine that
	// stubs pg_advisory_xact_lock, makes it a no-op, or sends sessions to
	// different shards. A store that finds it (see
	// PostgresStore.ProveExclusion) refuses Migrate and every claim, and
	// writes nothing; its error names the engine.
	ErrNoLockExclusion = errors.New("runclaim: the database's advisory locks do not exclude across sessions")

	// ErrReplaced means a claim with Replace asked the run to stop: its
	// holder still holds the source until it finishes (the lease is
	// extended as before), and the claim that asked wins once it has.
	// Heartbeat returns it, Do cancels its function's context with it as
	// the cause and returns it once the run is recorded StatusReplaced.
	// It matches ErrLeaseLost too, so that code that stops on a lost run
	// stops.
	ErrReplaced = newLost("runclaim: run replaced: a claim with Replace asked it to stop")

	// ErrRunTimeout means the run lasted longer than WithMaxRunTime allows. Do
	// cancels fn's context with a cause matching it (see context.Cause),
	// records the run as failed with its text, and returns an error matching
	// it (use errors.Is).
	ErrRunTimeout = errors.New("runclaim: maximum run time exceeded")

	// ErrInvalidSource is returned, wrapped with the reason, for a source name that
	// is empty, longer than MaxSourceLen bytes, not valid UTF-8, or contains a NUL
	// byte, another control character or an invisible one (see ValidateSource).
	// Nothing is sent to the store.
	ErrInvalidSource = errors.New("runclaim: invalid source")

	// ErrFenced is returned, wrapped, by Release when it could not lock the run
	// within a second because another transaction holds a lock on the run's
	// row: a transaction fenced with Fence that is still open, as a rule.
	// Nothing was changed. Retry once that transaction has ended.
	ErrFenced = errors.New("runclaim: run is fenced by an open transaction")

	// ErrFinished is returned by Heartbeat after Finish, and by a Finish whose
	// outcome differs from the one already recorded for the run.
	ErrFinished = errors.New("runclaim: run already finished")

	// ErrNotRunning is returned by Release when there is no running run to
	// release.
	ErrNotRunning = errors.New("runclaim: no such running run")

	// ErrKeysTruncated is returned by Keys, wrapped (use errors.Is), together
	// with the first MaxKeyStates keys by name and the clock, when more keys
	// than that have a limit or a cooldown in force.
	ErrKeysTruncated = errors.New("runclaim: more keys have a limit or a cooldown than MaxKeyStates")

	// ErrSourceHeld is returned by SetState and ClearState without force while
	// a run of the source is running with a live lease: the run read the state
	// when it was claimed, and its next save would overwrite the operator's.
	// It is an operator's refusal, not a skip: it does not match
	// ErrNotClaimed (a claim that finds the source held returns
	// ErrAlreadyRunning).
	ErrSourceHeld = errors.New("runclaim: a run of the source is running")

	// SkipReasons are the reasons a claim is skipped for, in the order a
	// claim reports them, each with its label: a short word that stays
	// the same across releases, for logs and metrics (runclaimotel's
	// runclaim.skip.reason attribute, runclaimprom's reason label,
	// cronlock's skip lines). A new reason is added here, once, and every
	// consumer that ranges over the list, or calls NotClaimedError.Label,
	// knows it.
	SkipReasons = []struct {
		Err   error  // the reason, as NotClaimedError.Reason holds it
		Label string // its label: lower case, words joined by "_"
	}{
		{ErrPaused, "paused"},
		{ErrAlreadyRunning, "already_running"},
		{ErrTickDone, "tick_done"},
		{ErrTooSoon, "too_soon"},
		{ErrLimited, "limited"},
	}
)

// skipError is the type of the specific skip sentinels; each one also matches
// ErrNotClaimed.
type skipError struct{ msg string }

// newSkip returns a sentinel error for a reason to skip, with text msg,
// that matches ErrNotClaimed too. Declared as "var ErrX = newSkip(...)",
// a sentinel reads in go doc as errors.New's do.
func newSkip(msg string) error { return &skipError{msg} }

func (e *skipError) Error() string        { return e.msg }
func (e *skipError) Is(target error) bool { return target == ErrNotClaimed }

// NotClaimedError carries the details of a skipped claim. It matches
// ErrNotClaimed and its Reason (ErrAlreadyRunning, ErrTooSoon, ErrTickDone,
// ErrPaused or ErrLimited) with errors.Is; use errors.As to read it. All times are the
// database's, except the ticks, which are the claimers'. A paused skip's
// text includes the pause's note, quoted.
type NotClaimedError struct {
	// Source is the source that was not claimed.
	Source string
	// Reason is ErrAlreadyRunning, ErrTooSoon, ErrTickDone, ErrPaused or
	// ErrLimited.
	Reason error
	// Key is, for ErrLimited, the key that had no room: the first of the
	// claim's keys, in the order named, that is cooling down or at its
	// limit.
	Key string
	// Holder is the run that holds the source, when Reason is
	// ErrAlreadyRunning and the holder is known. It is nil when another claim
	// for the source is in flight and has not committed yet.
	Holder *RunInfo
	// RetryAfter is, for ErrTooSoon, the earliest time at which a claim can
	// succeed (the last start plus the minimum interval); for
	// ErrAlreadyRunning with a known holder, the end of the holder's lease;
	// for ErrPaused, the end of the pause, or zero for a pause that lasts
	// until Resume; for ErrLimited, the end of the key's cooldown, or for
	// its MaxRunning the earliest lease end of the key's running runs, or
	// for its MaxStarts the start in the window that must leave it plus
	// Per.
	RetryAfter time.Time
	// Tick is the tick the claim named; zero for a plain Claim.
	Tick time.Time
	// DoneTick is, for ErrTickDone, the latest tick that a run of the
	// source has served: Tick or a later one.
	DoneTick time.Time
	// Note is, for ErrPaused, the note the operator gave with the pause;
	// for ErrLimited by a cooldown, the cooldown's note.
	Note string
}

// Error describes the skip in one line.
func (e *NotClaimedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "runclaim: source %q not claimed: ", e.Source)
	switch {
	case e.Reason == ErrPaused:
		b.WriteString("paused ")
		if e.RetryAfter.IsZero() {
			b.WriteString("until resumed")
		} else {
			fmt.Fprintf(&b, "until %s", e.RetryAfter.Format(time.RFC3339Nano))
		}
		if e.Note != "" {
			fmt.Fprintf(&b, ": %q", e.Note)
		}
	case e.Reason == ErrLimited:
		fmt.Fprintf(&b, "key %q is limited until %s", e.Key, e.RetryAfter.Format(time.RFC3339Nano))
		if e.Note != "" {
			fmt.Fprintf(&b, ": %q", e.Note)
		}
	case e.Reason == ErrTickDone:
		fmt.Fprintf(&b, "tick %s already served (the latest tick served is %s)", e.Tick.Format(time.RFC3339Nano), e.DoneTick.Format(time.RFC3339Nano))
	case e.Reason == ErrTooSoon:
		fmt.Fprintf(&b, "too soon since the last run; a claim can succeed after %s", e.RetryAfter.Format(time.RFC3339Nano))
	case e.Holder != nil:
		fmt.Fprintf(&b, "already running as run %d by %q since %s, lease until %s",
			e.Holder.ID, e.Holder.Owner, e.Holder.StartedAt.Format(time.RFC3339Nano), e.Holder.LeaseUntil.Format(time.RFC3339Nano))
	default:
		b.WriteString("another claim for it is in flight")
	}
	return b.String()
}

// Unwrap returns the Reason and ErrNotClaimed, so errors.Is matches both.
func (e *NotClaimedError) Unwrap() []error { return []error{e.Reason, ErrNotClaimed} }

// Label returns the label of the skip's reason (see SkipReasons), or
// "other" for a reason not listed there.
func (e *NotClaimedError) Label() string {
	for _, r := range SkipReasons {
		if errors.Is(e.Reason, r.Err) {
			return r.Label
		}
	}
	return "other"
}

// newLost returns a sentinel that matches ErrLeaseLost as well as itself.
func newLost(msg string) error { return &lostError{msg} }

// lostError is a sentinel that matches ErrLeaseLost (see ErrReplaced).
type lostError struct{ msg string }

func (e *lostError) Error() string        { return e.msg }
func (e *lostError) Is(target error) bool { return target == ErrLeaseLost }

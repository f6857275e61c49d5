package runclaim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// A Store records runs and decides claims. Claimer is written against this
// interface; NewPostgresStore and NewMemoryStore implement it, and package
// storetest checks that another implementation behaves the same way.
//
// Every method must be safe for concurrent use, must validate its request
// before it writes anything (see ClaimRequest.Validate), and must return
// ctx's error, wrapped, when ctx ends first.
type Store interface {
	// Claim starts a run of req.Source unless one is running with a live
	// lease, another claim for the source is in flight, req.Tick (when not
	// zero) has been served, or req.MinInterval has not passed since the
	// source's last run started; the reasons are checked in that order. A
	// running run whose lease has ended is marked StatusExpired first. A
	// skip returns a *NotClaimedError, with req.Tick, and writes nothing.
	// The new run's ID is greater than every ID the store issued before.
	//
	// A Store that is a Limiter decides req.Keys too, after every other
	// reason and in the order named: a key cooling down, or at its
	// MaxRunning or MaxStarts, skips the claim with ErrLimited and writes
	// nothing (see Limiter). A Store that is not one is never sent keys.
	//
	// A tick is served once a run of the source with that tick (compared
	// at microsecond precision) or a later one is running with a live
	// lease, succeeded or failed; the claim is then skipped with
	// ErrTickDone, and NotClaimedError.DoneTick is the latest tick served.
	// A run that expired or was released serves no tick. A zero req.Tick is
	// a plain claim, which no tick rule concerns and which serves no tick.
	Claim(ctx context.Context, req ClaimRequest) (RunInfo, error)

	// Heartbeat extends the lease of a running run to req.Lease from now and
	// returns the new end of the lease. It never moves the end back: if the
	// lease already ends later, the end stays, and Heartbeat returns it (two
	// heartbeats of one run that cross in flight leave the later end). It
	// returns ErrLeaseLost if the run is not running any more, or if its
	// lease has ended by the store's clock, whether or not a claim has
	// expired it yet: a lapsed lease is lost.
	Heartbeat(ctx context.Context, req HeartbeatRequest) (time.Time, error)

	// Finish records the outcome of a running run. Repeating a Finish that
	// succeeded, with the same outcome, returns nil and changes nothing, also
	// when the two calls race. It returns ErrLeaseLost if the run was expired
	// or released, or if its lease has ended by the store's clock (the run is
	// then recorded as StatusExpired, as a claim would have), and ErrFinished
	// if it was finished with another outcome.
	Finish(ctx context.Context, req FinishRequest) error
}

// ClaimRequest is what Claimer asks of a Store.
type ClaimRequest struct {
	Source      string        // what to claim; see ValidateSource
	Owner       string        // who claims it
	Lease       time.Duration // how long the run holds the source without a heartbeat
	MinInterval time.Duration // shortest time between two run starts; 0 for none
	Tick        time.Time     // the scheduled tick the run serves; zero for a plain claim
	Keys        []string      // the keys the claim names, decided in this order; see WithKeys and Limiter
	// Replace is the token of a claim with Replace (see Replace), empty for
	// any other: a Store records a stop request on a live holder that has
	// none, and keeps the source for the claim that sends this token once
	// the holder has ended.
	Replace string
}

// Ticks are compared, and kept, at the precision of a Postgres timestamp:
// whole microseconds. A tick is cut down to it.
const tickPrecision = time.Microsecond

// Bounds of a non-zero tick: the years 1 to 9999, after the zero time.
var (
	minTick = time.Date(1, time.January, 1, 0, 0, 0, 0, time.UTC)
	maxTick = time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// normalTick returns tick as stores keep and compare it: cut down to whole
// microseconds, in UTC, without a monotonic clock reading. ForTick
// normalises the tick of a request so; a Store normalises it again.
func normalTick(tick time.Time) time.Time {
	return tick.Round(0).UTC().Truncate(tickPrecision)
}

// validateTick returns an error for a tick out of the bounds a store
// keeps; the zero tick is valid, and means none.
func validateTick(tick time.Time) error {
	if tick.IsZero() {
		return nil
	}
	if !normalTick(tick).After(minTick) || !tick.Before(maxTick) {
		return fmt.Errorf("runclaim: tick %s is out of range: it must be in the years 1 to 9999, and not in the first microsecond of year 1, which is cut down to the zero time (no tick)", tick.Format(time.RFC3339Nano))
	}
	return nil
}

// Validate returns an error if the request is malformed: an invalid source
// (wrapping ErrInvalidSource) or owner, or a lease, interval or tick out of
// range, or keys a claim cannot name (see WithKeys).
func (r ClaimRequest) Validate() error {
	if err := ValidateSource(r.Source); err != nil {
		return err
	}
	if err := validateName(r.Owner, MaxOwnerLen); err != nil {
		return fmt.Errorf("runclaim: invalid owner: %w", err)
	}
	if r.Lease < MinLease || r.Lease > MaxLease {
		return fmt.Errorf("runclaim: lease must be between %v and %v, got %v", MinLease, MaxLease, r.Lease)
	}
	if r.MinInterval < 0 || r.MinInterval > MaxLease {
		return fmt.Errorf("runclaim: minimum interval must be between 0 and %v, got %v", MaxLease, r.MinInterval)
	}
	if err := validateTick(r.Tick); err != nil {
		return err
	}
	if r.Replace != "" {
		if err := validateName(r.Replace, MaxOwnerLen); err != nil {
			return fmt.Errorf("runclaim: invalid Replace token: %w", err)
		}
	}
	return validateKeys(r.Keys)
}

// HeartbeatRequest is what Run.Heartbeat asks of a Store.
type HeartbeatRequest struct {
	ID        int64         // the run
	Source    string        // the run's source; a run of another source is not found
	StartedAt time.Time     // the run's start, as its claim returned it; a run that started at another time is not found
	Lease     time.Duration // the new lease, counted from now; a later end already stored is kept
}

// Validate returns an error if the request is malformed.
func (r HeartbeatRequest) Validate() error {
	if err := validateRunRef(r.ID, r.Source, r.StartedAt); err != nil {
		return err
	}
	if r.Lease < MinLease || r.Lease > MaxLease {
		return fmt.Errorf("runclaim: lease must be between %v and %v, got %v", MinLease, MaxLease, r.Lease)
	}
	return nil
}

// validateRunRef returns an error if a request names no run: an ID that
// is not positive, an invalid source, or no start time.
//
// A run is named by its ID, its source and its start, never by its ID
// alone (G14): after an asynchronous failover, the standby that took over
// may never have received a run, nor the sequence step that gave it its
// ID, and hands that ID out again to the next claim. The new run starts
// later by the database clock, so the old holder's heartbeats and finish,
// which name the old start, find no run and change nothing.
func validateRunRef(id int64, source string, startedAt time.Time) error {
	if id <= 0 {
		return fmt.Errorf("runclaim: invalid run ID %d", id)
	}
	if err := ValidateSource(source); err != nil {
		return err
	}
	if startedAt.IsZero() {
		return fmt.Errorf("runclaim: run %d: no start time: a request names a run by its ID, source and start", id)
	}
	return nil
}

// FinishRequest is what Run.Finish asks of a Store.
type FinishRequest struct {
	ID        int64     // the run
	Source    string    // the run's source; a run of another source is not found
	StartedAt time.Time // the run's start, as its claim returned it; a run that started at another time is not found
	Status    Status    // StatusSucceeded or StatusFailed
	Error     string    // the failure's text: valid UTF-8 without NUL bytes; empty when Status is StatusSucceeded
}

// Validate returns an error if the request is malformed, including an
// error text that a Postgres text column cannot hold (a NUL byte, invalid
// UTF-8). Run.Finish makes any error's text storable before it asks.
func (r FinishRequest) Validate() error {
	if err := validateRunRef(r.ID, r.Source, r.StartedAt); err != nil {
		return err
	}
	switch r.Status {
	case StatusSucceeded:
		if r.Error != "" {
			return errors.New("runclaim: a succeeded run has no error text")
		}
	case StatusFailed:
	default:
		return fmt.Errorf("runclaim: a run finishes as %q or %q, not %q", StatusSucceeded, StatusFailed, r.Status)
	}
	if len(r.Error) > MaxErrorLen+len(truncatedMark) {
		return fmt.Errorf("runclaim: error text is %d bytes, more than %d", len(r.Error), MaxErrorLen)
	}
	if !utf8.ValidString(r.Error) {
		return errors.New("runclaim: error text is not valid UTF-8")
	}
	if i := strings.IndexByte(r.Error, 0); i >= 0 {
		return fmt.Errorf("runclaim: error text has a NUL byte at offset %d", i)
	}
	return nil
}

// RunInfo describes a run recorded in a store.
type RunInfo struct {
	ID         int64     // the run's fencing token
	Source     string    // what was claimed
	Owner      string    // who claimed it
	StartedAt  time.Time // when it was claimed, by the store's clock
	LeaseUntil time.Time // when its lease ends unless extended
	Tick       time.Time // the scheduled tick it serves (ForTick); zero for a plain claim
	State      string    // the source's state when a claim won the run (see StateSaver), as bytes in a string, which keeps RunInfo comparable
	HasState   bool      // whether the source had a state then; false in a NotClaimedError's Holder
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

// Limit bounds the runs of every source whose claims name one key,
// across every replica. Zero means no bound; a key whose limit is zero in
// every field, and that is not cooling down, constrains nothing.
//
// MaxStarts allows a burst at the start of each window; MinGap spreads the
// starts out: a claim of the key within MinGap of its newest start is
// skipped with ErrLimited, and RetryAfter is that start plus MinGap. With
// Wait, sources that share a paced key start one by one, MinGap apart.
// MinGap needs schema version 12; the replicas of the release before do
// not pace (see docs/schema.md).
type Limit struct {
	MaxRunning int           // at most this many running runs of the key at once; 0: no bound
	MaxStarts  int           // at most this many starts in any window of Per; 0: no bound
	Per        time.Duration // the window of MaxStarts
	MinGap     time.Duration // at least this long between two starts of the key, across every replica, by the database clock; 0: no bound
}

const truncatedMark = "…(truncated)"

// errorText is err's text made storable: valid UTF-8, no NUL bytes, at most
// MaxErrorLen bytes plus a truncation mark.
func errorText(err error) string {
	s := err.Error()
	if s == "" {
		s = fmt.Sprintf("%T with empty message", err)
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) > MaxErrorLen {
		cut := MaxErrorLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + truncatedMark
	}
	return s
}

// Validate returns an error, naming the field, if l is out of range:
// negative counts, counts above MaxLimitCount, MaxStarts without a Per (or
// a Per without MaxStarts), or a Per or a MinGap that is negative, not
// whole microseconds or longer than MaxLimitPer.
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
	case l.MinGap < 0 || l.MinGap > MaxLimitPer:
		return fmt.Errorf("runclaim: Limit.MinGap must be between 0 and %v, got %v", MaxLimitPer, l.MinGap)
	case l.MinGap%time.Microsecond != 0:
		return fmt.Errorf("runclaim: Limit.MinGap must be whole microseconds, got %v", l.MinGap)
	}
	return nil
}

// A ManyStore is a Store that decides many claims, and extends many
// leases, in one step each. Claimer's ClaimMany and DoMany use it when
// their Store implements it; otherwise they ask one source at a time with
// Store.Claim, and each run heartbeats on its own, as under Do.
// PostgresStore implements it with one statement per call; MemoryStore
// under one lock.
//
// A Store that is not a ManyStore may still have a method
//
//	Unclaim(ctx context.Context, run RunInfo) error
//
// which takes back a run that a claim has just won, as if the claim had
// never been made: no row or record of it is left, so it serves no tick,
// counts for no minimum interval and no key, and its source is free. It
// returns an error matching ErrLeaseLost if the run is not running
// (finished, expired, released, taken back already, or another run),
// named by its ID, source and StartedAt as a HeartbeatRequest names it.
// ClaimMany, asking such a Store one source at a time, takes back with it
// the runs won before a claim that failed. PostgresStore and MemoryStore
// have it too; a trigger that the claim used up is given back by
// MemoryStore, not by PostgresStore (a run's row does not record it).
type ManyStore interface {
	Store

	// ClaimMany decides every request as Store.Claim would, as one
	// atomic step: the results are in the order of reqs, each either the
	// run started or the skip (a *NotClaimedError). An error that is not
	// a skip claims nothing, and leaves no row: the store either decided
	// every request or none. Before it writes anything it refuses more
	// than MaxClaimMany requests, an invalid one (ClaimRequest.Validate),
	// two for one source, and more than MaxClaimManyKeys distinct keys in
	// all; it returns ctx's error, wrapped, when ctx ends first (as Claim
	// does, a run won after ctx ended is deleted again).
	ClaimMany(ctx context.Context, reqs []ClaimRequest) ([]ClaimResult, error)

	// HeartbeatMany does what Store.Heartbeat does for each request, in
	// one step: the results are in the order of reqs, each either the new
	// end of the lease or an error matching ErrLeaseLost for that run
	// alone. An error of the whole call extends no lease that the caller
	// can count on. It refuses an invalid request, and two requests for
	// one run (the same ID, source and start), before it writes anything.
	// Two requests that share an ID but name other sources or starts are
	// two runs: after an asynchronous failover an ID can be handed out
	// again (G14), and only the request that names the row's run extends
	// it; the other is lost.
	HeartbeatMany(ctx context.Context, reqs []HeartbeatRequest) ([]HeartbeatResult, error)
}

// unclaimer is a Store with the Unclaim method that ManyStore's doc
// describes.
type unclaimer interface {
	Unclaim(ctx context.Context, run RunInfo) error
}

// ClaimResult is the answer to one request of a ManyStore's ClaimMany.
type ClaimResult struct {
	Run RunInfo // the run started, when Err is nil
	Err error   // nil, or why the source was skipped: a *NotClaimedError
}

// HeartbeatResult is the answer to one request of a ManyStore's
// HeartbeatMany.
type HeartbeatResult struct {
	LeaseUntil time.Time // the new end of the lease, when Err is nil
	Err        error     // nil, or an error matching ErrLeaseLost
}

// validateClaims returns an error if reqs cannot be claimed together: more
// than MaxClaimMany requests, an invalid request (see
// ClaimRequest.Validate), two requests for one source, or more than
// MaxClaimManyKeys distinct keys in all. A store checks it before it sends
// anything.
func validateClaims(reqs []ClaimRequest) error {
	if len(reqs) > MaxClaimMany {
		return fmt.Errorf("runclaim: claim many: %d sources, more than MaxClaimMany (%d); claim them in slices of at most %d", len(reqs), MaxClaimMany, MaxClaimMany)
	}
	seen := make(map[string]int, len(reqs))
	var keys map[string]struct{}
	for i, r := range reqs {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("runclaim: claim many: source %d: %w", i, err)
		}
		if j, dup := seen[r.Source]; dup {
			return fmt.Errorf("runclaim: claim many: source %s is listed twice, at %d and %d", quoteForError(r.Source), j, i)
		}
		seen[r.Source] = i
		for _, k := range r.Keys {
			if keys == nil {
				keys = make(map[string]struct{})
			}
			keys[k] = struct{}{}
		}
	}
	if len(keys) > MaxClaimManyKeys {
		return fmt.Errorf("runclaim: claim many: the sources name %d distinct keys, more than MaxClaimManyKeys (%d): the call would hold a lock per source and per key until it commits, in the database server's shared lock table; claim the sources of fewer keys at once",
			len(keys), MaxClaimManyKeys)
	}
	return nil
}

// runRef names a run as a heartbeat does: by its ID, source and start.
// After an asynchronous failover the new primary can hand an ID out
// again, to another source's run (G14), so two requests of one batch may
// share an ID and still name two runs.
type runRef struct {
	id     int64
	source string
	start  int64 // StartedAt in microseconds, the store's precision
}

// refOf returns the run a heartbeat request names.
func refOf(r HeartbeatRequest) runRef {
	return runRef{r.ID, r.Source, r.StartedAt.UnixMicro()}
}

// validateHeartbeats returns an error for an invalid request or two
// requests for one run (the same ID, source and start).
func validateHeartbeats(reqs []HeartbeatRequest) error {
	seen := make(map[runRef]struct{}, len(reqs))
	for _, r := range reqs {
		if err := r.Validate(); err != nil {
			return err
		}
		if _, dup := seen[refOf(r)]; dup {
			return fmt.Errorf("runclaim: heartbeat many: run %d of %s, started at %s, is listed twice",
				r.ID, quoteForError(r.Source), r.StartedAt.UTC().Format(time.RFC3339Nano))
		}
		seen[refOf(r)] = struct{}{}
	}
	return nil
}

// validateFinishes checks a FinishMany call before anything is sent or
// recorded: ctx, the number of requests, and each request as Finish
// checks it.
func validateFinishes(ctx context.Context, reqs []FinishRequest) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if len(reqs) > MaxClaimMany {
		return fmt.Errorf("runclaim: finish %d runs: more than MaxClaimMany (%d)", len(reqs), MaxClaimMany)
	}
	for _, req := range reqs {
		if err := checkRequest(ctx, req); err != nil {
			return err
		}
	}
	return nil
}

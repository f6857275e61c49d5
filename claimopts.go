package runclaim

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// A ClaimOption changes one call of Claim, ClaimMany, Do or DoMany. The
// options are checked before anything is sent to the store: a nil option,
// an invalid one, the same option given twice, or two that conflict make
// the call return an error that is not a skip, and claim nothing.
type ClaimOption func(*claimOptions) error

// claimOptions is what a call's ClaimOptions asked for.
type claimOptions struct {
	tick    time.Time // ForTick's, normalised; zero for a plain claim
	tickSet bool
	wait    bool     // Wait's
	replace bool     // Replace's
	keys    []string // WithKeys's
	keysSet bool
}

// ForTick makes the claim serve one scheduled tick, so that a job runs at
// most once for it across every replica. A claim of a tick that a run has
// served, or of an earlier one, is skipped with an error matching
// ErrTickDone (and ErrNotClaimed), however long after that run it comes
// and whatever the replicas' clocks say. A run serves its tick while it
// runs, and after it succeeded or failed: a failed run does not reopen its
// tick. A run that expired, its holder gone, leaves its tick open for a
// later claim to take over. A live run of the source, of any tick or none,
// still skips the claim with ErrAlreadyRunning, and the minimum interval
// still applies: plain and tick claims share the source. With ClaimMany
// and DoMany the tick is one for every source: one scheduler firing names
// one tick for all the sources it fires.
//
// Name the tick the scheduler fired for (its scheduled time, not the time
// the job started), so that every replica names the same one; see Ticker
// and LatestTick. Ticks compare at microsecond precision: tick is cut down
// to whole microseconds, in UTC, and Run.Tick reports it so. A
// zero tick is an error, and nothing is sent to the store; so is a tick in
// the first microsecond of year 1, which would be cut down to the zero
// time, and a tick after year 9999.
func ForTick(tick time.Time) ClaimOption {
	return func(o *claimOptions) error {
		if o.tickSet {
			return errors.New("runclaim: ForTick given twice")
		}
		if err := checkTick("ForTick", tick); err != nil {
			return err
		}
		o.tick, o.tickSet = normalTick(tick), true
		return nil
	}
}

// Wait makes Claim and Do wait while the source is held, instead of
// skipping: the call returns when its claim wins, when ctx ends (with an
// error matching ctx's, not a skip), or at once on a skip that waiting
// cannot end. For a job that must run once per trigger even when the
// trigger comes while a run holds the source: a webhook, an operator's
// button.
//
// A skip because another run holds the source, or another claim of it is
// in flight (ErrAlreadyRunning), is waited on, and so is a skip for a
// key (ErrLimited: no room under its Limit, or a cooldown; see WithKeys)
// and a skip for a reason of a later release that names no rule below. A
// paused source (ErrPaused) or a minimum interval not yet passed
// (ErrTooSoon) is waited on only when the skip's RetryAfter comes before
// ctx's deadline, by the local clock; without a deadline, or with a pause
// until Resume, the skip is returned at once. A tick already served
// (ErrTickDone) is returned at once: no wait can reopen it.
//
// Waiting is polling, with no session state, so it works through
// PgBouncer in transaction mode and on every Store: the claim is sent
// again after a pause that starts at 50 ms and doubles up to a cap of
// 800 ms, drawn at random between half and all of it, and sooner when the
// skip's RetryAfter (a holder's lease end, a pause's end) comes first. A
// waiter therefore wins within a poll of the holder's Finish or release,
// or of the end of a dead holder's lease, and costs the database under
// two claims a second once it has waited a second, whatever the number
// of waiters. On a MemoryStore a waiter also claims again as soon as a
// run of the source finishes, or the source is resumed or triggered.
//
// Waiters are not queued: whichever polls first wins, and a claim without
// Wait that comes in the instant the source is free wins over them. So
// that a caller that claims again as soon as its run ends does not win
// every time, a waiting claim of a source that a run won by a waiting
// claim of the same Claimer finished less than a cap ago first waits for
// the rest of that cap (unless ctx's deadline comes first), which lets
// every other waiter poll once. The run's lease counts from the claim
// that won. See docs/waiting.md.
//
// A waiting call reports one event to the Hooks, however many times it
// polled: Claimed when it wins, Skipped for the skip it returns, and
// ClaimFailed when ctx ends or the store fails; Event.Waited says how
// long it waited, and Event.Duration is its last claim's. A store error
// (an unreachable database) ends the wait, as it ends a Claim.
//
// ClaimMany and DoMany refuse Wait: a call that claims many sources at
// once does not wait for some of them. Claim a source that must wait with
// Claim or Do of its own.
func Wait() ClaimOption {
	return func(o *claimOptions) error {
		if o.wait {
			return errors.New("runclaim: Wait given twice")
		}
		o.wait = true
		return nil
	}
}

// Replace makes Claim and Do take the source over from its running run
// instead of skipping: the claim asks the running run to stop, then waits
// (bounded by ctx, as Wait does) until that run has ended, and wins it.
// Between the two, the source is reserved for this claim: a claim without
// its token is skipped (ErrAlreadyRunning) until this one wins, or, if it
// never comes back, for its lease after the replaced run ended. A source
// with no running run is claimed at once.
//
// The run asked to stop keeps its lease until it finishes, so that two
// runs of the source never run at once: its heartbeats go on, and return
// an error matching ErrReplaced (and ErrLeaseLost); Run.Replaced closes;
// Do cancels its function's context with cause ErrReplaced, keeps
// heartbeating until the function returns, records StatusReplaced and
// returns an error matching ErrReplaced; Run.Finish records
// StatusReplaced whatever the outcome, and returns nil. A holder that has
// died stops heartbeating: its lease ends, and the claim wins then.
//
// Replace overrides the running run only: a paused source, a tick already
// served (the running run's own, too) and the minimum interval skip the
// claim at once, and it asks nothing; a run younger than the interval
// cannot be replaced. At a key whose MaxRunning is reached, the replaced
// run's slot is free for the claim once that run has ended. Of two claims
// with Replace at once, the first asks and the second waits for the
// first's run, then asks it in turn. Replace with Wait is Replace; ClaimMany
// and DoMany refuse it. It needs a Store that records stop requests: both
// stores of this package do (the Postgres table at schema version 13).
func Replace() ClaimOption {
	return func(o *claimOptions) error {
		if o.replace {
			return errors.New("runclaim: Replace given twice")
		}
		o.replace = true
		return nil
	}
}

// WithKeys makes the claim name keys: the claim is skipped with ErrLimited
// when one of them is cooling down or its Limit has no room, and the run
// it starts counts against the limit of each. With ClaimMany and DoMany
// the keys are named by every source, and each key is honoured across the
// batch, in the order asked. The keys join those WithSourceKeys gives the
// source. No keys, an invalid key, a key listed twice or more than MaxKeys
// are an error, and nothing is sent to the store.
func WithKeys(keys ...string) ClaimOption {
	return func(o *claimOptions) error {
		if o.keysSet {
			return errors.New("runclaim: WithKeys given twice")
		}
		if len(keys) == 0 {
			return errors.New("runclaim: WithKeys: no keys")
		}
		if err := validateKeys(keys); err != nil {
			return fmt.Errorf("runclaim: WithKeys: %w", err)
		}
		o.keys, o.keysSet = slices.Clone(keys), true
		return nil
	}
}

// applyClaimOptions returns what opts ask for, or the error of the first
// that is nil or invalid; what names the call.
func applyClaimOptions(what string, opts []ClaimOption) (claimOptions, error) {
	var o claimOptions
	for _, opt := range opts {
		if opt == nil {
			return claimOptions{}, fmt.Errorf("runclaim: %s: nil ClaimOption", what)
		}
		if err := opt(&o); err != nil {
			return claimOptions{}, err
		}
	}
	return o, nil
}

// checkTick returns an error for a tick that names no tick: the zero
// time, or one that is cut down to it (the first microsecond of
// year 1), which a store would take for a plain claim; or a tick out of
// the range a store keeps. what names the caller.
func checkTick(what string, tick time.Time) error {
	if tick.IsZero() {
		return fmt.Errorf("runclaim: %s: zero tick", what)
	}
	if err := validateTick(tick); err != nil {
		return fmt.Errorf("runclaim: %s: %w", what, err)
	}
	return nil
}

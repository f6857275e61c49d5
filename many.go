package runclaim

import (
	"context"
	"errors"
	"fmt"
	"time"
)

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

// ClaimMany claims each of sources as Claim does, in one call to the
// store: with PostgresStore, one statement, one round trip, one
// transaction and one commit, however many sources (up to MaxClaimMany).
// It returns the runs it won, in the order of sources; a source that was
// skipped (ErrNotClaimed, for any of Claim's reasons) is absent, and is
// reported to Hooks.Skipped and the logger as a skip of Claim is. Each
// source has the guarantees of a single claim: at most one running run,
// a lapsed run taken over, the minimum interval respected, and a skip
// writes nothing. Concurrent calls with overlapping sources, in any
// order, do not wait for each other: a source that another call is
// deciding is skipped with ErrAlreadyRunning.
//
// An error that is not a skip claims nothing. An empty list returns no
// runs and sends nothing. A list longer than MaxClaimMany, an invalid
// source (ErrInvalidSource) or a source listed twice is refused before
// anything is sent. ctx bounds the call as it bounds Claim.
//
// A Store that is not a ManyStore is asked one source at a time. If
// one of those claims fails, the runs already won are taken back with
// Unclaim when the Store has that method (see ManyStore), and the call
// claims nothing.
// Otherwise the Store has no way to remove a run, and the runs already
// won are finished as failed with that error: they then count for the
// minimum interval.
//
// opts change every claim of the call as they change Claim's, but Wait
// is refused, with an error that is not a skip, before anything is sent:
// a call of many sources does not wait for some of them. With
// ForTick every run won serves the tick, and a source whose tick is done
// is skipped with ErrTickDone. The tick is one for the whole call, because
// one scheduler firing names one tick for every source it fires (the top
// of the minute for all the cities of a scraper); sources on different
// schedules fire at different ticks, and then make one call per tick.
//
// An error serves no tick. A Store that is not a ManyStore and has no
// Unclaim could leave ticks served by an error, since a failed run
// serves its tick: on such a Store, ClaimMany with ForTick of more than
// one source is refused before anything is sent, with an error that says
// so; claim those sources one at a time.
//
// Each run must be finished, and kept alive while it lasts longer than
// the lease: DoMany does both.
func (c *Claimer) ClaimMany(ctx context.Context, sources []string, opts ...ClaimOption) ([]*Run, error) {
	o, err := applyClaimOptions("ClaimMany", opts)
	if err != nil {
		c.manyFailed(ctx, sources, err, 0)
		return nil, err
	}
	if o.replace {
		err := errors.New("runclaim: Replace is not supported by ClaimMany or DoMany: a call that claims many sources does not wait for some of them; replace a source's run with Claim or Do, on a goroutine of its own")
		c.manyFailed(ctx, sources, err, 0)
		return nil, err
	}
	if o.wait {
		err := errors.New("runclaim: Wait is not supported by ClaimMany or DoMany: a call that claims many sources does not wait for some of them; claim a source that must wait with Claim or Do, on a goroutine of its own")
		c.manyFailed(ctx, sources, err, 0)
		return nil, err
	}
	return c.claimMany(ctx, sources, o)
}

// claimMany is ClaimMany, with the options o.
func (c *Claimer) claimMany(ctx context.Context, sources []string, o claimOptions) ([]*Run, error) {
	tick := o.tick
	if err := checkContext(ctx); err != nil {
		c.manyFailed(ctx, sources, err, 0)
		return nil, err
	}
	if len(sources) == 0 {
		return nil, nil
	}
	if len(sources) > MaxClaimMany {
		err := validateClaims(make([]ClaimRequest, len(sources)))
		c.claimFailed(ctx, "", err, 0)
		return nil, err
	}
	reqs := make([]ClaimRequest, len(sources))
	for i, s := range sources {
		keys, err := c.keysFor(s, o.keys)
		if err != nil {
			c.manyFailed(ctx, sources, err, 0)
			return nil, err
		}
		reqs[i] = ClaimRequest{Source: s, Owner: c.cfg.owner, Lease: c.sched.lease, MinInterval: c.cfg.minInterval, Tick: tick, Keys: keys}
	}
	if err := validateClaims(reqs); err != nil {
		c.manyFailed(ctx, sources, err, 0)
		return nil, err
	}
	sent := time.Now()
	var (
		results []ClaimResult
		err     error
	)
	mc, many := c.store.(ManyStore)
	_, canUnclaim := c.store.(unclaimer)
	switch {
	case many:
		results, err = mc.ClaimMany(ctx, reqs)
		if err == nil && len(results) != len(reqs) {
			err = fmt.Errorf("runclaim: claim many: the store returned %d results for %d sources", len(results), len(reqs))
		}
	case !tick.IsZero() && !canUnclaim && len(reqs) > 1:
		err = fmt.Errorf("runclaim: claim many for a tick: the store (%T) is not a ManyStore, which claims many sources in one step, and has no Unclaim method, which takes a claim back, so a failed call could leave ticks served; claim the %d sources one at a time", c.store, len(reqs))
		c.manyFailed(ctx, sources, err, 0)
		return nil, err
	default:
		results, err = c.claimEach(ctx, reqs)
	}
	took := time.Since(sent)
	if err != nil {
		c.manyFailed(ctx, sources, err, took)
		return nil, err
	}
	runs := make([]*Run, 0, len(results))
	for i, res := range results {
		if res.Err != nil {
			c.notClaimed(ctx, reqs[i].Source, res.Err, took)
			continue
		}
		run := c.newRun(res.Run, sent)
		c.claimed(ctx, run, took)
		runs = append(runs, run)
	}
	return runs, nil
}

// claimEach claims reqs one at a time, for a Store that is not a
// ManyStore. When a claim fails, it takes back the runs won before, with
// Unclaim where the Store has it and otherwise by finishing them as failed, and
// returns the error. A failed run serves its tick, so claimMany does not
// ask a Store without Unclaim for several sources of a tick.
func (c *Claimer) claimEach(ctx context.Context, reqs []ClaimRequest) ([]ClaimResult, error) {
	results := make([]ClaimResult, len(reqs))
	for i, req := range reqs {
		info, err := c.store.Claim(ctx, req)
		if err == nil || errors.Is(err, ErrNotClaimed) {
			results[i] = ClaimResult{Run: info, Err: err}
			continue
		}
		err = fmt.Errorf("runclaim: claim many: claim %s: %w", quoteForError(req.Source), err)
		fctx, cancel := finishContext(ctx)
		defer cancel()
		uc, canUnclaim := c.store.(unclaimer)
		var undo []error
		for _, r := range results[:i] {
			if r.Err != nil {
				continue
			}
			if canUnclaim {
				if uerr := uc.Unclaim(fctx, r.Run); uerr != nil {
					undo = append(undo, fmt.Errorf("and run %d of %s, won before, could not be taken back: %w", r.Run.ID, quoteForError(r.Run.Source), uerr))
				}
				continue
			}
			ferr := c.store.Finish(fctx, FinishRequest{ID: r.Run.ID, Source: r.Run.Source, StartedAt: r.Run.StartedAt, Status: StatusFailed, Error: errorText(err)})
			if ferr != nil {
				undo = append(undo, fmt.Errorf("and run %d of %s, won before, could not be finished: %w", r.Run.ID, quoteForError(r.Run.Source), ferr))
			}
		}
		return nil, errors.Join(append([]error{err}, undo...)...)
	}
	return results, nil
}

// manyFailed reports a ClaimMany that failed as a failed claim of each of
// its sources.
func (c *Claimer) manyFailed(ctx context.Context, sources []string, err error, d time.Duration) {
	for _, s := range sources {
		c.claimFailed(ctx, s, err, d)
	}
}

// ClaimMany implements ManyStore: it decides every request under the
// store's lock, as one step.
func (s *MemoryStore) ClaimMany(ctx context.Context, reqs []ClaimRequest) ([]ClaimResult, error) {
	return eachLocked(ctx, s, "claim many", validateClaims(reqs), reqs, func(req ClaimRequest) (r ClaimResult) {
		r.Run, r.Err = s.claimLocked(req)
		return r
	})
}

// HeartbeatMany implements ManyStore: it extends every lease under
// the store's lock, as one step.
func (s *MemoryStore) HeartbeatMany(ctx context.Context, reqs []HeartbeatRequest) ([]HeartbeatResult, error) {
	return eachLocked(ctx, s, "heartbeat many", validateHeartbeats(reqs), reqs, func(req HeartbeatRequest) (r HeartbeatResult) {
		r.LeaseUntil, r.Err = s.heartbeatLocked(req)
		return r
	})
}

// eachLocked is the memory store's many-source call (what, for errors):
// once ctx and the requests are checked (invalid is the requests'
// check), it decides each request with one under the store's lock, as
// one step.
func eachLocked[Q, R any](ctx context.Context, s *MemoryStore, what string, invalid error, reqs []Q, one func(Q) R) ([]R, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	if invalid != nil {
		return nil, invalid
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("runclaim: %s: %w", what, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]R, len(reqs))
	for i, req := range reqs {
		out[i] = one(req)
	}
	return out, nil
}

var (
	_ ManyStore = (*MemoryStore)(nil)
	_ unclaimer = (*MemoryStore)(nil)
	_ ManyStore = (*PostgresStore)(nil)
	_ unclaimer = (*PostgresStore)(nil)
)

package runclaim

import (
	"context"
	"errors"
	"fmt"
	"time"
)

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

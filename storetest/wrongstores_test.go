package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runclaim/runclaim"
)

// This file holds deliberately wrong Stores, each with one bug that a real
// backend could have, for TestWrongStoresFail to show that the suite catches
// every one of them. Some wrap runclaim.MemoryStore; the bugs that live
// inside a claim are in copyStore, a copy of the memory store's algorithm
// with a switch for each.

// A bug selects the wrong behaviour of a copyStore; noBug is the memory
// store's own.
type bug int

const (
	noBug bug = iota
	// Check-then-act: the claim checks the source in one critical section
	// and inserts its run in the next, without checking again.
	bugCheckThenAct
	// The check-then-act of bugCheckThenAct, made atomic by a mutex in each
	// Store value: values on one backend still race.
	bugValueMutex
	// A run whose lease has ended is taken over in a critical section of
	// its own, after the one that found it lapsed.
	bugLapsedTakeover
	// The minimum interval is checked before the critical section of the
	// claim, and not again inside it.
	bugIntervalOutside
	// The minimum interval counts from the starts of succeeded runs only.
	bugIntervalSucceededOnly
	// The error text is stored cut to 255 bytes, as in a varchar(255)
	// column, and a repeated Finish is compared with what was stored.
	bugErrorText255
	// A heartbeat extends a running run whose lease has ended, as long as
	// no claim has expired it yet.
	bugLapsedRevived
	// The interval recorded with a run is ignored: only the claimer's own
	// counts.
	bugRecordedIntervalIgnored
	// Finish reads the run in one critical section and writes it in the
	// next, so that a racing identical Finish finds it no longer running.
	bugFinishReadThenWrite
	// Heartbeat and Finish find the run by its ID alone.
	bugSourceIgnored
	bugStartIgnored
	// The tick of a claim is not checked at all.
	bugTickIgnored
	// A failed run does not serve its tick: the tick can be run again.
	bugTickFailedReopens
	// A run serves its tick from its claim on, even once it expired.
	bugTickExpiredServes
	// Only the tick served is done, not the older ones.
	bugTickEqualOnly
	// The tick is checked before the live holder, and a running run
	// serves it: a claim of a running run's tick says ErrTickDone.
	bugTickBeforeHolder
	// A tick claim ignores the minimum interval.
	bugTickNoInterval
	// Ticks compare at nanoseconds.
	bugTickNanos
	// The tick is checked before the claim's critical section, and not
	// again inside it.
	bugTickOutside
	// A tick claim sees only running runs of tick claims: a plain run does
	// not keep it out.
	bugTickPlainSeparate
	// ClaimMany checks every source in one critical section and starts
	// the runs in the next, without checking again.
	bugManyCheckThenAct
	// ClaimMany returns its results sorted by source, not in the order
	// asked.
	bugManySorted
	// ClaimMany ignores the minimum interval.
	bugManyNoInterval
	// ClaimMany ignores ticks.
	bugManyTickIgnored
	// ClaimMany treats a lapsed run as a live holder.
	bugManyNoTakeover
	// ClaimMany validates each request only when it comes to it, after
	// claiming the ones before.
	bugManyValidateLate
	// HeartbeatMany reports every run lost when one of them is.
	bugManyBeatAllLost
	// A heartbeat sets the lease's end to its lease from now, even when
	// that is earlier than the end already stored.
	bugLeaseMovedBack
	// Claims ignore pauses.
	bugPauseIgnored
	// A pause's end is ignored: every pause lasts until Resume.
	bugPauseUntilIgnored
	// A pause until a time that has passed is taken as a pause until
	// Resume.
	bugPastUntilAccepted
	// A pause ends the source's running run as a release would.
	bugPauseStopsRun
	// Resume does nothing.
	bugResumeIgnored
	// A claim that uses a trigger leaves it in place.
	bugTriggerKept
	// A trigger lets a claim in over a running run.
	bugTriggerOverRunning
	// A claim skipped because the source is running uses up the trigger.
	bugSkipUsesTrigger
	// A trigger lets a claim in over a pause.
	bugTriggerOverPause
	// A pause's note is stored unchecked.
	bugNoteUnchecked
	// A trigger does not let a claim in over a done tick.
	bugTriggerNotOverTick
	// The trigger is read before the claim's critical section, and not
	// again inside it: a claim can use a trigger that another one used.
	bugTriggerReadOutside
	// A pause's end after year 9999 is taken.
	bugFarUntilAccepted
	// Unclaim records the run as failed, as a Store without it would
	// finish it: the run serves its tick and counts for the interval.
	bugUnclaimFinishes
	// A key's running runs are counted in one critical section and the
	// run inserted in the next, as a count taken without the key's lock:
	// N+1 runs win under contention.
	bugKeyCountOutside
	// A key's starts are counted for succeeded runs only.
	bugKeyStartsSucceededOnly
	// A key's MinGap is stored but not applied: every claim of a paced
	// key with room otherwise wins.
	bugKeyMinGapIgnored
	// A key's MinGap is measured from its oldest start still recorded,
	// not its newest: the key is paced once, then bursts.
	bugKeyMinGapOldest
	// A shorter cooldown replaces a longer one in force.
	bugCooldownShortened
	// Keys are checked before every other reason to skip.
	bugKeyFirst
	// A save of state is not fenced by the lease: a run whose lease has
	// ended, taken over or not, still saves.
	bugStateUnfenced
	// The state is the one saved by the latest run that succeeded: a
	// run's saves count only once it finishes as succeeded.
	bugStateSucceededOnly
	// ClaimMany counts each key as it was before the batch, not counting
	// the runs the batch itself started.
	bugManyKeysBefore
	// ClaimMany returns no state with the runs it wins.
	bugManyNoState
	// ClaimMany records no start of a key for its wins, as a batch that
	// left its starts to an insert it did not make.
	bugManyStartsUnrecorded
	// A key's running runs are counted among the runs that named it
	// alone: a run that named other keys too does not count, as a count
	// that read one index of running runs' keys and not the other.
	bugKeyCountAloneOnly
	// Unclaim deletes the run but leaves the starts it recorded for its
	// keys, as a store whose Unclaim does not know the run's keys.
	bugUnclaimKeepsStarts
	// HeartbeatMany reports its results by run ID alone: a stale request
	// that shares an extended run's ID (handed out again after a
	// failover) is reported extended too.
	bugManyBeatByID
	// A claim with Replace takes the source at once, marking the live
	// holder replaced: two runs of the source run at once.
	bugReplaceOverlap
	// A claim with Replace asks, but keeps no reservation: a plain claim
	// that comes after the holder ended takes the source.
	bugReplaceNoReserve
	// A holder asked to stop is never told: its heartbeats succeed.
	bugReplaceSilent
	// A reservation whose replacer never comes back is kept for good.
	bugReplaceReserveForever
)

// ignoreRecorded is set in a child process that runs the
// bugRecordedIntervalIgnored store (tooSoon has no store to ask).
var ignoreRecorded bool

// gap stands for the round trip a store on a database makes between two
// statements: other claims run meanwhile.
func gap() { runtime.Gosched() }

// memBackend is what the Store values of one copyStore backend share. Each
// of its methods' steps that a database would run as one statement holds mu.
type memBackend struct {
	mu        sync.Mutex // protects the fields below
	lastID    int64
	runs      map[int64]*memRun
	running   map[string]*memRun   // by source
	lastStart map[string]lastRun   // by source: the latest start that counts
	served    map[string]time.Time // by source: the latest tick served
	pauses    map[string]time.Time // by source: the pause's end, zero for until Resume
	notes     map[string]string    // by source: the pause's note
	triggers  map[string]bool      // by source: a trigger waits
	keys      keyBackend
	states    map[string]string // by source: its state
	unsaved   map[int64]string  // by run: its last save, for bugStateSucceededOnly
	reserved  map[string]reserve
}

// reserve is the reservation of a claim with Replace: its token, the run
// it asked to stop, and its lease.
type reserve struct {
	token string
	run   *memRun
	lease time.Duration
}

// lastRun is the start of a source's latest run and the interval its
// claimer asked for, which binds every later claimer.
type lastRun struct {
	start    time.Time
	interval time.Duration
}

type memRun struct {
	info      runclaim.RunInfo
	interval  time.Duration
	status    runclaim.Status
	errText   string
	prevStart lastRun // the source's latest start that counted before this run, for Unclaim
	hadPrev   bool    // whether there was one
	keys      []string
	stopBy    string    // the token of the claim with Replace that asked it to stop
	finished  time.Time // when it finished
}

func newMemBackend() *memBackend {
	return &memBackend{runs: make(map[int64]*memRun), running: make(map[string]*memRun), lastStart: make(map[string]lastRun), served: make(map[string]time.Time),
		pauses: make(map[string]time.Time), notes: make(map[string]string), triggers: make(map[string]bool), keys: newKeyBackend(),
		states: make(map[string]string), unsaved: make(map[int64]string), reserved: make(map[string]reserve)}
}

// copyStore is one Store value on a memBackend.
type copyStore struct {
	b   *memBackend
	bug bug
	mu  sync.Mutex // the value's own lock, taken by bugValueMutex only
}

func (s *copyStore) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	if err := req.Validate(); err != nil {
		return runclaim.RunInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return runclaim.RunInfo{}, fmt.Errorf("claim %q: %w", req.Source, err)
	}
	b := s.b
	if s.bug != bugTickNanos {
		req.Tick = req.Tick.Round(0).UTC().Truncate(time.Microsecond)
	}
	switch s.bug {
	case bugTriggerReadOutside:
		b.mu.Lock()
		stale := b.triggers[req.Source]
		b.mu.Unlock()
		gap()
		b.mu.Lock()
		defer b.mu.Unlock()
		if stale {
			b.triggers[req.Source] = true // as read before: perhaps used since
		}
		lapsed, err := b.check(req, true, s.bug)
		if err != nil {
			return runclaim.RunInfo{}, err
		}
		return b.act(req, lapsed, s.bug), nil
	case bugTickOutside:
		b.mu.Lock()
		err := b.tickDone(req, s.bug)
		b.mu.Unlock()
		if err != nil {
			return runclaim.RunInfo{}, err
		}
		gap()
		b.mu.Lock()
		defer b.mu.Unlock()
		lapsed, err := b.check(req, true, s.bug)
		if err != nil {
			return runclaim.RunInfo{}, err
		}
		return b.act(req, lapsed, s.bug), nil
	case bugKeyCountOutside:
		b.mu.Lock()
		_, err := b.check(req, true, s.bug)
		b.mu.Unlock()
		if err != nil {
			return runclaim.RunInfo{}, err
		}
		gap()
		b.mu.Lock()
		defer b.mu.Unlock()
		noKeys := req
		noKeys.Keys = nil
		lapsed, err := b.check(noKeys, true, s.bug)
		if err != nil {
			return runclaim.RunInfo{}, err
		}
		return b.act(req, lapsed, s.bug), nil
	case bugValueMutex:
		s.mu.Lock()
		defer s.mu.Unlock()
		fallthrough
	case bugCheckThenAct:
		b.mu.Lock()
		lapsed, err := b.check(req, true, s.bug)
		b.mu.Unlock()
		if err != nil {
			return runclaim.RunInfo{}, err
		}
		gap()
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.act(req, lapsed, s.bug), nil
	case bugLapsedTakeover:
		b.mu.Lock()
		lapsed, err := b.check(req, true, s.bug)
		if err != nil || lapsed == nil {
			defer b.mu.Unlock()
			if err != nil {
				return runclaim.RunInfo{}, err
			}
			return b.act(req, nil, s.bug), nil
		}
		b.mu.Unlock()
		gap()
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.act(req, lapsed, s.bug), nil
	case bugIntervalOutside:
		b.mu.Lock()
		last, ok := b.lastStart[req.Source]
		b.mu.Unlock()
		if err := tooSoon(req, last, ok, time.Now()); err != nil {
			return runclaim.RunInfo{}, err
		}
		gap()
		b.mu.Lock()
		defer b.mu.Unlock()
		lapsed, err := b.check(req, false, s.bug)
		if err != nil {
			return runclaim.RunInfo{}, err
		}
		return b.act(req, lapsed, s.bug), nil
	default:
		b.mu.Lock()
		defer b.mu.Unlock()
		lapsed, err := b.check(req, true, s.bug)
		if err != nil {
			return runclaim.RunInfo{}, err
		}
		return b.act(req, lapsed, s.bug), nil
	}
}

// ClaimMany decides every request in one critical section, in order.
func (s *copyStore) ClaimMany(ctx context.Context, reqs []runclaim.ClaimRequest) ([]runclaim.ClaimResult, error) {
	if s.bug != bugManyValidateLate {
		// What every store refuses before it writes anything, as
		// runclaim checks it (a throwaway MemoryStore's ClaimMany).
		if _, err := runclaim.NewMemoryStore().ClaimMany(context.Background(), reqs); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("claim many: %w", err)
	}
	b := s.b
	out := make([]runclaim.ClaimResult, len(reqs))
	lapsed := make([]*memRun, len(reqs))
	b.mu.Lock()
	var before *keyBackend
	if s.bug == bugManyKeysBefore {
		before = b.keys.clone()
	}
	for i, req := range reqs {
		if s.bug == bugManyValidateLate {
			if err := req.Validate(); err != nil {
				b.mu.Unlock()
				return nil, err
			}
		}
		req.Tick = req.Tick.Round(0).UTC().Truncate(time.Microsecond)
		if s.bug == bugManyTickIgnored {
			req.Tick = time.Time{}
		}
		reqs[i] = req
		if before != nil {
			keys := b.keys
			b.keys = *before
			lapsed[i], out[i].Err = b.check(req, s.bug != bugManyNoInterval, s.bug)
			b.keys = keys
		} else {
			lapsed[i], out[i].Err = b.check(req, s.bug != bugManyNoInterval, s.bug)
		}
		if s.bug == bugManyNoTakeover && out[i].Err == nil && lapsed[i] != nil {
			holder := lapsed[i].info
			out[i].Err = &runclaim.NotClaimedError{Source: req.Source, Reason: runclaim.ErrAlreadyRunning, Holder: &holder, RetryAfter: holder.LeaseUntil}
		}
		if s.bug != bugManyCheckThenAct && out[i].Err == nil {
			out[i].Run = b.act(req, lapsed[i], s.bug)
			if s.bug == bugManyStartsUnrecorded {
				for _, k := range req.Keys {
					b.keys.starts[k] = slices.DeleteFunc(b.keys.starts[k], func(st keyStart) bool { return st.id == out[i].Run.ID })
				}
			}
		}
	}
	b.mu.Unlock()
	if s.bug == bugManyCheckThenAct {
		gap()
		b.mu.Lock()
		for i, req := range reqs {
			if out[i].Err == nil {
				out[i].Run = b.act(req, lapsed[i], s.bug)
			}
		}
		b.mu.Unlock()
	}
	if s.bug == bugManyNoState {
		for i := range out {
			out[i].Run.State, out[i].Run.HasState = "", false
		}
	}
	if s.bug == bugManySorted {
		slices.SortFunc(out, func(x, y runclaim.ClaimResult) int { return strings.Compare(resultSource(x), resultSource(y)) })
	}
	return out, nil
}

// HeartbeatMany extends each lease as Heartbeat does.
func (s *copyStore) HeartbeatMany(ctx context.Context, reqs []runclaim.HeartbeatRequest) ([]runclaim.HeartbeatResult, error) {
	type ref struct {
		id     int64
		source string
		start  int64
	}
	seen := map[ref]bool{}
	for _, r := range reqs {
		k := ref{r.ID, r.Source, r.StartedAt.UnixMicro()}
		if seen[k] {
			return nil, fmt.Errorf("heartbeat many: run %d is listed twice", r.ID)
		}
		seen[k] = true
	}
	out := make([]runclaim.HeartbeatResult, len(reqs))
	lost := false
	for i, r := range reqs {
		out[i].LeaseUntil, out[i].Err = s.Heartbeat(ctx, r)
		if out[i].Err != nil && !errors.Is(out[i].Err, runclaim.ErrLeaseLost) {
			return nil, out[i].Err
		}
		lost = lost || out[i].Err != nil
	}
	if s.bug == bugManyBeatByID {
		extended := map[int64]time.Time{}
		for i, r := range reqs {
			if out[i].Err == nil {
				extended[r.ID] = out[i].LeaseUntil
			}
		}
		for i, r := range reqs {
			if t, ok := extended[r.ID]; ok {
				out[i] = runclaim.HeartbeatResult{LeaseUntil: t}
			}
		}
	}
	if lost && s.bug == bugManyBeatAllLost {
		for i := range out {
			out[i] = runclaim.HeartbeatResult{Err: fmt.Errorf("heartbeat many: %w", runclaim.ErrLeaseLost)}
		}
	}
	return out, nil
}

// resultSource is the source a ClaimResult answers.
func resultSource(r runclaim.ClaimResult) string {
	var nc *runclaim.NotClaimedError
	if errors.As(r.Err, &nc) {
		return nc.Source
	}
	return r.Run.Source
}

// check decides a claim, with b.mu held: a skip, or a claim that takes over
// lapsed (nil if the source is free). It checks the interval if interval.
func (b *memBackend) check(req runclaim.ClaimRequest, interval bool, bug bug) (lapsed *memRun, err error) {
	now := time.Now()
	if bug == bugKeyFirst {
		if err := b.keys.check(req, now, b.running, bug); err != nil {
			return nil, err
		}
	}
	triggered := b.triggers[req.Source]
	if until, ok := b.pauses[req.Source]; ok && bug != bugPauseIgnored && !(triggered && bug == bugTriggerOverPause) &&
		(until.IsZero() || until.After(now) || bug == bugPauseUntilIgnored) {
		return nil, &runclaim.NotClaimedError{Source: req.Source, Reason: runclaim.ErrPaused, RetryAfter: until, Note: b.notes[req.Source], Tick: req.Tick}
	}
	if bug == bugTickBeforeHolder {
		if err := b.tickDone(req, bug); err != nil {
			return nil, err
		}
	}
	cur := b.running[req.Source]
	if bug == bugTickPlainSeparate && !req.Tick.IsZero() && cur != nil && cur.info.Tick.IsZero() {
		cur = nil // and a plain run still running is left so when the tick claim inserts
	}
	if cur != nil {
		if req.Replace != "" && bug == bugReplaceOverlap && cur.info.LeaseUntil.After(now) {
			cur.stopBy, cur.status = req.Replace, runclaim.StatusReplaced
			delete(b.running, req.Source)
			return nil, nil
		}
		if cur.info.LeaseUntil.After(now) && !(triggered && bug == bugTriggerOverRunning) {
			if bug == bugSkipUsesTrigger {
				delete(b.triggers, req.Source)
			}
			if req.Replace != "" && cur.stopBy == "" {
				// Replace: a served tick and the interval skip at once;
				// else the holder is asked to stop and the source
				// reserved.
				done := b.served[req.Source]
				if cur.info.Tick.After(done) {
					done = cur.info.Tick
				}
				if !req.Tick.IsZero() && !triggered && !done.IsZero() && !req.Tick.After(done) {
					return nil, &runclaim.NotClaimedError{Source: req.Source, Reason: runclaim.ErrTickDone, Tick: req.Tick, DoneTick: done}
				}
				if next := cur.info.StartedAt.Add(max(cur.interval, req.MinInterval)); next.After(now) && !triggered {
					return nil, &runclaim.NotClaimedError{Source: req.Source, Reason: runclaim.ErrTooSoon, RetryAfter: next, Tick: req.Tick}
				}
				cur.stopBy = req.Replace
				b.reserved[req.Source] = reserve{req.Replace, cur, req.Lease}
			}
			holder := cur.info
			return nil, &runclaim.NotClaimedError{Source: req.Source, Reason: runclaim.ErrAlreadyRunning, Holder: &holder, RetryAfter: holder.LeaseUntil, Tick: req.Tick}
		}
		lapsed = cur
	}
	// Reserved for another claim with Replace, while the run it asked to
	// stop is the latest: until its end and the replacer's lease after.
	if res, ok := b.reserved[req.Source]; ok && res.token != req.Replace && bug != bugReplaceNoReserve &&
		b.lastStart[req.Source].start.Equal(res.run.info.StartedAt) {
		end := res.run.finished
		if res.run.status == runclaim.StatusRunning || res.run.status == runclaim.StatusExpired {
			end = res.run.info.LeaseUntil
		}
		if end = end.Add(res.lease); end.After(now) || bug == bugReplaceReserveForever {
			return nil, &runclaim.NotClaimedError{Source: req.Source, Reason: runclaim.ErrAlreadyRunning, RetryAfter: end, Tick: req.Tick}
		}
	}
	if bug != bugTickOutside && bug != bugTickBeforeHolder {
		if err := b.tickDone(req, bug); err != nil {
			return nil, err
		}
	}
	if interval && !triggered && (bug != bugTickNoInterval || req.Tick.IsZero()) {
		last, ok := b.lastStart[req.Source]
		if err := tooSoon(req, last, ok, now); err != nil {
			return nil, err
		}
	}
	if bug != bugKeyFirst {
		if err := b.keys.check(req, now, b.running, bug); err != nil {
			return nil, err
		}
	}
	return lapsed, nil
}

// tickDone returns the ErrTickDone skip of a claim whose tick is served,
// with b.mu held.
func (b *memBackend) tickDone(req runclaim.ClaimRequest, bug bug) error {
	if req.Tick.IsZero() || bug == bugTickIgnored || b.triggers[req.Source] && bug != bugTriggerNotOverTick {
		return nil
	}
	done := b.served[req.Source]
	if bug == bugTickBeforeHolder {
		if cur := b.running[req.Source]; cur != nil && cur.info.Tick.After(done) {
			done = cur.info.Tick
		}
	}
	if done.IsZero() || req.Tick.After(done) || bug == bugTickEqualOnly && req.Tick.Before(done) {
		return nil
	}
	return &runclaim.NotClaimedError{Source: req.Source, Reason: runclaim.ErrTickDone, Tick: req.Tick, DoneTick: done}
}

func tooSoon(req runclaim.ClaimRequest, last lastRun, ok bool, now time.Time) error {
	if ignoreRecorded {
		last.interval = 0
	}
	if next := last.start.Add(max(last.interval, req.MinInterval)); ok && next.After(now) {
		return &runclaim.NotClaimedError{Source: req.Source, Reason: runclaim.ErrTooSoon, RetryAfter: next, Tick: req.Tick}
	}
	return nil
}

// act starts the run check allowed, with b.mu held, expiring lapsed first.
func (b *memBackend) act(req runclaim.ClaimRequest, lapsed *memRun, bug bug) runclaim.RunInfo {
	now := time.Now()
	if lapsed != nil {
		lapsed.status = runclaim.StatusExpired
	}
	b.lastID++
	r := &memRun{
		info:     runclaim.RunInfo{ID: b.lastID, Source: req.Source, Owner: req.Owner, StartedAt: now, LeaseUntil: now.Add(req.Lease), Tick: req.Tick},
		interval: req.MinInterval,
		status:   runclaim.StatusRunning,
		keys:     slices.Clone(req.Keys),
	}
	if bug != bugKeyStartsSucceededOnly {
		b.keys.started(r.keys, now, r.info.ID)
	}
	r.prevStart, r.hadPrev = b.lastStart[req.Source]
	b.runs[r.info.ID] = r
	b.running[req.Source] = r
	if bug != bugTriggerKept {
		delete(b.triggers, req.Source)
	}
	if res, ok := b.reserved[req.Source]; ok && res.token == req.Replace {
		delete(b.reserved, req.Source)
	}
	if bug == bugTickExpiredServes && req.Tick.After(b.served[req.Source]) {
		b.served[req.Source] = req.Tick
	}
	if bug != bugIntervalSucceededOnly {
		b.lastStart[req.Source] = lastRun{now, req.MinInterval}
	}
	info := r.info
	info.State, info.HasState = b.states[req.Source]
	return info
}

// SaveState implements runclaim.StateSaver.
func (s *copyStore) SaveState(ctx context.Context, req runclaim.RunInfo, state []byte) error {
	// What the stores refuse before they send anything: runclaim's own
	// check, through a MemoryStore's (with no such run, the rest is
	// ErrLeaseLost).
	if err := runclaim.NewMemoryStore().SaveState(ctx, req, state); !errors.Is(err, runclaim.ErrLeaseLost) {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("save state of run %d: %w", req.ID, err)
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	r := s.b.runs[req.ID]
	if r == nil || r.info.Source != req.Source || r.info.Owner != req.Owner || !r.info.StartedAt.Equal(req.StartedAt) ||
		(r.status != runclaim.StatusRunning || !r.info.LeaseUntil.After(time.Now())) && s.bug != bugStateUnfenced {
		return fmt.Errorf("save state of run %d: %w", req.ID, runclaim.ErrLeaseLost)
	}
	if s.bug == bugStateSucceededOnly {
		s.b.unsaved[req.ID] = string(state)
		return nil
	}
	s.b.states[req.Source] = string(state)
	return nil
}

func (s *copyStore) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	if err := req.Validate(); err != nil {
		return time.Time{}, err
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, fmt.Errorf("heartbeat run %d: %w", req.ID, err)
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	r := s.b.runs[req.ID]
	now := time.Now()
	if r != nil && s.bug == bugSourceIgnored {
		req.Source = r.info.Source
	}
	if r != nil && s.bug == bugStartIgnored {
		req.StartedAt = r.info.StartedAt
	}
	if r == nil || r.info.Source != req.Source || !r.info.StartedAt.Equal(req.StartedAt) || r.status != runclaim.StatusRunning || !r.info.LeaseUntil.After(now) && s.bug != bugLapsedRevived {
		return time.Time{}, fmt.Errorf("heartbeat run %d: %w", req.ID, runclaim.ErrLeaseLost)
	}
	if until := now.Add(req.Lease); until.After(r.info.LeaseUntil) || s.bug == bugLeaseMovedBack {
		r.info.LeaseUntil = until
	}
	if r.stopBy != "" && s.bug != bugReplaceSilent {
		return r.info.LeaseUntil, fmt.Errorf("heartbeat run %d: %w", req.ID, runclaim.ErrReplaced)
	}
	return r.info.LeaseUntil, nil
}

func (s *copyStore) Finish(ctx context.Context, req runclaim.FinishRequest) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("finish run %d: %w", req.ID, err)
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	r := s.b.runs[req.ID]
	if s.bug == bugFinishReadThenWrite && r != nil && r.status == runclaim.StatusRunning {
		s.b.mu.Unlock()
		gap()
		s.b.mu.Lock()
		if r.status != runclaim.StatusRunning {
			return fmt.Errorf("finish run %d: %w", req.ID, runclaim.ErrLeaseLost)
		}
	}
	if r != nil && s.bug == bugSourceIgnored {
		req.Source = r.info.Source
	}
	if r != nil && s.bug == bugStartIgnored {
		req.StartedAt = r.info.StartedAt
	}
	if r != nil && (r.info.Source != req.Source || !r.info.StartedAt.Equal(req.StartedAt)) {
		r = nil
	}
	if r != nil && r.status == runclaim.StatusRunning && !r.info.LeaseUntil.After(time.Now()) {
		r.status = runclaim.StatusExpired // a lapsed lease is lost
		delete(s.b.running, r.info.Source)
	}
	switch {
	case r == nil:
		return fmt.Errorf("finish run %d: %w", req.ID, runclaim.ErrLeaseLost)
	case r.status == req.Status && r.errText == req.Error:
		return nil // the same Finish again
	case r.status == runclaim.StatusReplaced:
		return nil // recorded replaced, whatever the outcome
	case r.status == runclaim.StatusSucceeded || r.status == runclaim.StatusFailed:
		return fmt.Errorf("finish run %d: %w", req.ID, runclaim.ErrFinished)
	case r.status != runclaim.StatusRunning:
		return fmt.Errorf("finish run %d: %w", req.ID, runclaim.ErrLeaseLost)
	}
	r.status, r.errText, r.finished = req.Status, req.Error, time.Now()
	if r.stopBy != "" {
		r.status = runclaim.StatusReplaced
	}
	if s.bug == bugErrorText255 && len(r.errText) > 255 {
		r.errText = r.errText[:255]
	}
	if s.bug == bugIntervalSucceededOnly && req.Status == runclaim.StatusSucceeded {
		s.b.lastStart[r.info.Source] = lastRun{r.info.StartedAt, r.interval}
	}
	if s.bug == bugKeyStartsSucceededOnly && req.Status == runclaim.StatusSucceeded {
		s.b.keys.started(r.keys, r.info.StartedAt, r.info.ID)
	}
	if st, ok := s.b.unsaved[r.info.ID]; ok && req.Status == runclaim.StatusSucceeded {
		s.b.states[r.info.Source] = st
	}
	delete(s.b.running, r.info.Source)
	if (req.Status == runclaim.StatusSucceeded || s.bug != bugTickFailedReopens) && r.info.Tick.After(s.b.served[r.info.Source]) {
		s.b.served[r.info.Source] = r.info.Tick
	}
	return nil
}

// Unclaim takes a run back (see runclaim.ManyStore): it forgets the run, and the
// source's start before it counts again. A trigger the claim used up stays
// used up, as in the Postgres store.
func (s *copyStore) Unclaim(ctx context.Context, run runclaim.RunInfo) error {
	if run.ID <= 0 || run.StartedAt.IsZero() {
		return fmt.Errorf("unclaim run %d: no run named", run.ID)
	}
	if err := runclaim.ValidateSource(run.Source); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("unclaim run %d: %w", run.ID, err)
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	r := s.b.runs[run.ID]
	if r == nil || r.info.Source != run.Source || !r.info.StartedAt.Equal(run.StartedAt) || r.status != runclaim.StatusRunning {
		return fmt.Errorf("unclaim run %d: %w", run.ID, runclaim.ErrLeaseLost)
	}
	delete(s.b.running, r.info.Source)
	if s.bug != bugUnclaimKeepsStarts {
		s.b.keys.unstarted(r.keys, r.info.ID)
	}
	if s.bug == bugUnclaimFinishes {
		r.status, r.errText = runclaim.StatusFailed, "taken back"
		if r.info.Tick.After(s.b.served[r.info.Source]) {
			s.b.served[r.info.Source] = r.info.Tick
		}
		return nil
	}
	delete(s.b.runs, r.info.ID)
	if last, ok := s.b.lastStart[r.info.Source]; ok && last.start.Equal(r.info.StartedAt) {
		if r.hadPrev {
			s.b.lastStart[r.info.Source] = r.prevStart
		} else {
			delete(s.b.lastStart, r.info.Source)
		}
	}
	return nil
}

func (s *copyStore) Pause(ctx context.Context, source string, until time.Time, note string) error {
	if err := runclaim.ValidateSource(source); err != nil {
		return err
	}
	if err := noteErr("pause", note); err != nil && s.bug != bugNoteUnchecked {
		return err
	}
	if until.Year() > 9999 && s.bug != bugFarUntilAccepted {
		return fmt.Errorf("pause %q: until %v is after year 9999", source, until)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pause %q: %w", source, err)
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if !until.IsZero() && !until.After(time.Now()) {
		if s.bug != bugPastUntilAccepted {
			return fmt.Errorf("pause %q: until %v has passed", source, until)
		}
		until = time.Time{}
	}
	s.b.pauses[source], s.b.notes[source] = until, note
	if r := s.b.running[source]; r != nil && s.bug == bugPauseStopsRun {
		r.status = runclaim.StatusReleased
		delete(s.b.running, source)
	}
	return nil
}

func (s *copyStore) Resume(ctx context.Context, source string) error {
	if err := runclaim.ValidateSource(source); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("resume %q: %w", source, err)
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.bug != bugResumeIgnored {
		delete(s.b.pauses, source)
	}
	return nil
}

func (s *copyStore) Trigger(ctx context.Context, source string) error {
	if err := runclaim.ValidateSource(source); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("trigger %q: %w", source, err)
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.triggers[source] = true
	return nil
}

// caseInsensitive compares sources without regard to case, as a store
// whose source column has a case-insensitive type or collation does: a run
// keeps the source as its claimant spelled it, and a claim of the same
// source spelled in another case finds it.
type caseInsensitive struct {
	*runclaim.MemoryStore
	spelling *sync.Map // lowercased source → the spelling of its first claim
}

func (s caseInsensitive) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	source := req.Source
	first, _ := s.spelling.LoadOrStore(strings.ToLower(source), source)
	req.Source = first.(string)
	info, err := s.MemoryStore.Claim(ctx, req)
	var nc *runclaim.NotClaimedError
	if errors.As(err, &nc) {
		nc.Source = source
	}
	if err == nil {
		info.Source = source
	}
	return info, err
}

// leaseRounded keeps every lease rounded up to a whole second, as a store
// that keeps lease ends in whole seconds does, and reports the lease end it
// was asked for.
type leaseRounded struct{ *runclaim.MemoryStore }

func roundUp(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

func (s leaseRounded) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	if err := req.Validate(); err != nil {
		return runclaim.RunInfo{}, err
	}
	asked := req.Lease
	req.Lease = roundUp(asked)
	info, err := s.MemoryStore.Claim(ctx, req)
	if err == nil {
		info.LeaseUntil = info.StartedAt.Add(asked)
	}
	return info, err
}

func (s leaseRounded) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	if err := req.Validate(); err != nil {
		return time.Time{}, err
	}
	asked := req.Lease
	req.Lease = roundUp(asked)
	until, err := s.MemoryStore.Heartbeat(ctx, req)
	if err == nil {
		until = until.Add(asked - req.Lease)
	}
	return until, err
}

// answerLost lets a claim go through whatever its context does once it is
// sent, and returns the context's error when it ended meanwhile, as a
// driver does when a context ends while the answer is on its way: the run
// it wrote then holds its source for a whole lease, with nobody to run it.
type answerLost struct{ *runclaim.MemoryStore }

func (s answerLost) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	if err := ctx.Err(); err != nil {
		return runclaim.RunInfo{}, fmt.Errorf("claim %q: %w", req.Source, err)
	}
	info, err := s.MemoryStore.Claim(context.WithoutCancel(ctx), req)
	if err != nil {
		return info, err
	}
	if err := ctx.Err(); err != nil {
		return runclaim.RunInfo{}, fmt.Errorf("claim %q: reading the answer: %w", req.Source, err)
	}
	return info, nil
}

// reentrant hands a running run back to a claim by the owner that holds
// it, as a store whose claim is "idempotent per owner" does: a claimer that
// retries after a lost answer gets its run, and so does every other
// goroutine of that claimer.
type reentrant struct{ *runclaim.MemoryStore }

func (s reentrant) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	info, err := s.MemoryStore.Claim(ctx, req)
	var nc *runclaim.NotClaimedError
	if errors.As(err, &nc) && nc.Holder != nil && nc.Holder.Owner == req.Owner {
		return *nc.Holder, nil
	}
	return info, err
}

// skipWaits answers a claim of a held source only once the holder's lease
// has ended or the claim's context has, as a store whose claim waits on a
// lock that the holder's transaction keeps does.
type skipWaits struct{ *runclaim.MemoryStore }

func (s skipWaits) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	info, err := s.MemoryStore.Claim(ctx, req)
	var nc *runclaim.NotClaimedError
	if errors.As(err, &nc) && nc.Holder != nil {
		wait := time.NewTimer(time.Until(nc.Holder.LeaseUntil))
		defer wait.Stop()
		select {
		case <-wait.C:
		case <-ctx.Done():
		}
	}
	return info, err
}

// A wrongStore is a Store with one bug, and the subtest of the suite meant
// to catch it.
type wrongStore struct {
	name     string // as STORETEST_WRONG_STORE selects it
	bug      string // what is wrong, in a few words
	caughtBy string // the subtest meant to catch it
	// newBackend is for storetest.RunReplicas.
	newBackend func() func() runclaim.Store
}

// copyBackend opens copyStore values with bug on one new memBackend.
func copyBackend(b bug) func() func() runclaim.Store {
	return func() func() runclaim.Store {
		backend := newMemBackend()
		return func() runclaim.Store { return &copyStore{b: backend, bug: b} }
	}
}

// wrapBackend opens the wrapper that wrap makes of one new memory store.
func wrapBackend(wrap func(*runclaim.MemoryStore) runclaim.Store) func() func() runclaim.Store {
	return func() func() runclaim.Store {
		mem := runclaim.NewMemoryStore()
		return func() runclaim.Store { return wrap(mem) }
	}
}

// correctCopy is copyStore without a bug: it must pass the whole suite, so
// that what makes each wrong copy fail is its bug.
var correctCopy = wrongStore{name: "correct-copy", bug: "none: the memory store's algorithm, copied", newBackend: copyBackend(noBug)}

var wrongStores = []wrongStore{
	{"check-then-act", "the classic check-then-act race: check, then insert in another critical section",
		"ExclusionUnderContention", copyBackend(bugCheckThenAct)},
	{"value-mutex", "check-then-act made atomic by a mutex in each Store value only",
		"ExclusionOnFreshSources", copyBackend(bugValueMutex)},
	{"lapsed-takeover", "a lapsed run taken over in a critical section of its own",
		"ExclusionOnLapsedRuns", copyBackend(bugLapsedTakeover)},
	{"interval-outside", "the minimum interval checked outside the claim's critical section",
		"MinIntervalUnderContention", copyBackend(bugIntervalOutside)},
	{"interval-succeeded-only", "the interval counted from succeeded runs only",
		"MinIntervalCountsEveryRun", copyBackend(bugIntervalSucceededOnly)},
	{"error-text-255", "error text cut to 255 bytes, a repeated Finish compared with it",
		"FinishLongErrorText", copyBackend(bugErrorText255)},
	{"lapsed-revived", "a heartbeat revives a run whose lease ended, until a claim expires it",
		"LapsedLeaseIsLost", copyBackend(bugLapsedRevived)},
	{"recorded-interval-ignored", "only the claimer's own minimum interval counts, not the one recorded with the last run",
		"MinInterval", copyBackend(bugRecordedIntervalIgnored)},
	{"finish-read-then-write", "Finish reads the run, then writes it in another critical section",
		"FinishRace", copyBackend(bugFinishReadThenWrite)},
	{"source-ignored", "heartbeats and finishes find the run by its ID alone",
		"SourceMustMatch", copyBackend(bugSourceIgnored)},
	{"start-ignored", "heartbeats and finishes find the run by its ID and source, not its start",
		"StartMustMatch", copyBackend(bugStartIgnored)},
	{"tick-ignored", "the tick of a claim not checked", "TickDone", copyBackend(bugTickIgnored)},
	{"tick-failed-reopens", "a failed run does not serve its tick", "TickDone", copyBackend(bugTickFailedReopens)},
	{"tick-expired-serves", "an expired run keeps its tick served", "TickExpiredReopens", copyBackend(bugTickExpiredServes)},
	{"tick-equal-only", "only the tick served is done, not older ones", "TickDone", copyBackend(bugTickEqualOnly)},
	{"tick-before-holder", "the tick checked before the live holder, so a running run's tick says ErrTickDone",
		"TickLiveRun", copyBackend(bugTickBeforeHolder)},
	{"tick-no-interval", "a tick claim ignores the minimum interval", "TickMinInterval", copyBackend(bugTickNoInterval)},
	{"tick-nanos", "ticks compared and kept at nanoseconds", "TickPrecision", copyBackend(bugTickNanos)},
	{"tick-outside", "the tick checked outside the claim's critical section", "TickUnderContention", copyBackend(bugTickOutside)},
	{"tick-plain-separate", "a tick claim not kept out by a running plain run", "TickPlainShare", copyBackend(bugTickPlainSeparate)},
	{"many-check-then-act", "ClaimMany checks all sources, then starts the runs in another critical section",
		"ManyExclusive", copyBackend(bugManyCheckThenAct)},
	{"many-sorted", "ClaimMany's results sorted by source, not in the order asked", "ManyResult", copyBackend(bugManySorted)},
	{"many-no-interval", "ClaimMany ignores the minimum interval", "ManyMinInterval", copyBackend(bugManyNoInterval)},
	{"many-tick-ignored", "ClaimMany ignores ticks", "ManyTickDone", copyBackend(bugManyTickIgnored)},
	{"many-no-takeover", "ClaimMany treats a lapsed run as a live holder", "ManyTakeover", copyBackend(bugManyNoTakeover)},
	{"many-validate-late", "ClaimMany validates each request when it comes to it, after claiming the ones before",
		"ManyBadInput", copyBackend(bugManyValidateLate)},
	{"many-beat-all-lost", "HeartbeatMany reports every run lost when one is", "ManyHeartbeats", copyBackend(bugManyBeatAllLost)},
	{"lease-moved-back", "a heartbeat with a shorter lease moves the lease's end back", "HeartbeatExtendsLease", copyBackend(bugLeaseMovedBack)},
	{"pause-ignored", "claims ignore pauses",
		"Pause", copyBackend(bugPauseIgnored)},
	{"pause-until-ignored", "every pause lasts until Resume, whatever its end",
		"TimedPause", copyBackend(bugPauseUntilIgnored)},
	{"past-until-accepted", "a pause until a time that has passed pauses until Resume",
		"TimedPause", copyBackend(bugPastUntilAccepted)},
	{"pause-stops-run", "a pause releases the running run",
		"Pause", copyBackend(bugPauseStopsRun)},
	{"resume-ignored", "Resume does nothing",
		"Pause", copyBackend(bugResumeIgnored)},
	{"trigger-kept", "a claim that uses a trigger leaves it in place",
		"TriggerOnce", copyBackend(bugTriggerKept)},
	{"trigger-over-running", "a trigger lets a claim in over a running run",
		"TriggerNotOverRunning", copyBackend(bugTriggerOverRunning)},
	{"skip-uses-trigger", "a claim skipped for a running run uses the trigger up",
		"TriggerNotOverRunning", copyBackend(bugSkipUsesTrigger)},
	{"trigger-over-pause", "a trigger lets a claim in over a pause",
		"TriggerNotOverPause", copyBackend(bugTriggerOverPause)},
	{"note-unchecked", "a pause's note is stored unchecked",
		"ControlBadInput", copyBackend(bugNoteUnchecked)},
	{"trigger-not-over-tick", "a trigger does not let a claim in over a done tick",
		"TriggerTickDone", copyBackend(bugTriggerNotOverTick)},
	{"trigger-read-outside", "the trigger read outside the claim's critical section",
		"TriggerUnderContention", copyBackend(bugTriggerReadOutside)},
	{"far-until-accepted", "a pause's end after year 9999 taken",
		"ControlBadInput", copyBackend(bugFarUntilAccepted)},
	{"unclaim-finishes", "Unclaim records the run as failed: it serves its tick and counts for the interval",
		"Unclaim", copyBackend(bugUnclaimFinishes)},
	{"key-count-outside", "a key's running runs counted without the key's lock: N+1 win under contention",
		"KeyReplicas", copyBackend(bugKeyCountOutside)},
	{"key-starts-succeeded-only", "a key's starts counted for succeeded runs only",
		"KeyMaxStarts", copyBackend(bugKeyStartsSucceededOnly)},
	{"replace-overlap", "a claim with Replace takes the source at once, the holder still running",
		"ReplaceAsks", copyBackend(bugReplaceOverlap)},
	{"replace-no-reserve", "a claim with Replace asks but keeps no reservation",
		"ReplaceAsks", copyBackend(bugReplaceNoReserve)},
	{"replace-silent", "a holder asked to stop is never told",
		"ReplaceAsks", copyBackend(bugReplaceSilent)},
	{"replace-reserve-forever", "a reservation whose replacer never comes back is kept for good",
		"ReplaceDead", copyBackend(bugReplaceReserveForever)},
	{"key-min-gap-ignored", "a key's MinGap stored but not applied",
		"KeyMinGap", copyBackend(bugKeyMinGapIgnored)},
	{"key-min-gap-oldest", "a key's MinGap measured from its oldest start, not its newest",
		"KeyMinGap", copyBackend(bugKeyMinGapOldest)},
	{"cooldown-shortened", "a shorter cooldown replaces a longer one in force",
		"KeyCooldown", copyBackend(bugCooldownShortened)},
	{"key-first", "keys checked before every other reason to skip",
		"KeyOrder", copyBackend(bugKeyFirst)},
	{"many-keys-before", "ClaimMany counts each key as before the batch, not its own runs",
		"ManyKeys", copyBackend(bugManyKeysBefore)},
	{"many-no-state", "ClaimMany returns no state with the runs it wins",
		"StateMany", copyBackend(bugManyNoState)},
	{"many-starts-unrecorded", "ClaimMany records no start for the keys of its wins",
		"ManyKeysRoom", copyBackend(bugManyStartsUnrecorded)},
	{"key-count-alone-only", "a key's running runs counted among runs naming it alone",
		"KeyShared", copyBackend(bugKeyCountAloneOnly)},
	{"many-beat-by-id", "HeartbeatMany's results keyed by run ID alone: a stale run sharing a live run's ID is extended too",
		"ManyHeartbeatsByRun", copyBackend(bugManyBeatByID)},
	{"unclaim-keeps-starts", "a run taken back with Unclaim leaves its keys' starts behind",
		"KeyUnclaim", copyBackend(bugUnclaimKeepsStarts)},
	{"state-unfenced", "a save of state not fenced by the lease: a run whose lease ended still saves",
		"StateFencedByLease", copyBackend(bugStateUnfenced)},
	{"state-succeeded-only", "the state taken from the latest succeeded run only",
		"StateHandedOn", copyBackend(bugStateSucceededOnly)},
	{"case-insensitive", "sources compared without regard to case",
		"LookalikeSources", func() func() runclaim.Store {
			mem, spelling := runclaim.NewMemoryStore(), new(sync.Map)
			return func() runclaim.Store { return caseInsensitive{mem, spelling} }
		}},
	{"lease-rounded", "the lease kept rounded up to a whole second",
		"ClaimResult", wrapBackend(func(m *runclaim.MemoryStore) runclaim.Store { return leaseRounded{m} })},
	{"answer-lost", "a claim that ignores a context cancelled mid-call: it commits and returns the context's error",
		"ContextCancelledMidCall", wrapBackend(func(m *runclaim.MemoryStore) runclaim.Store { return answerLost{m} })},
	{"reentrant", "a claim by the owner of the running run gets that run back",
		"LostClaimAnswer", wrapBackend(func(m *runclaim.MemoryStore) runclaim.Store { return reentrant{m} })},
	{"skip-waits", "a skip that waits for the holder before it answers",
		"SkipDoesNotWait", wrapBackend(func(m *runclaim.MemoryStore) runclaim.Store { return skipWaits{m} })},
	{"finish-many-all-ok", "FinishMany records each outcome but answers nil for every request",
		"FinishMany", wrapBackend(func(m *runclaim.MemoryStore) runclaim.Store { return finishManyAllOK{m} })},
	{"finish-many-unrecorded", "FinishMany answers nil for every request, and records nothing",
		"FinishMany", wrapBackend(func(m *runclaim.MemoryStore) runclaim.Store { return finishManyUnrecorded{m} })},
}

// finishManyAllOK records each outcome, and hides every refusal.
type finishManyAllOK struct{ *runclaim.MemoryStore }

func (s finishManyAllOK) FinishMany(ctx context.Context, reqs []runclaim.FinishRequest) ([]error, error) {
	errs, err := s.MemoryStore.FinishMany(ctx, reqs)
	for i := range errs {
		errs[i] = nil
	}
	return errs, err
}

// finishManyUnrecorded answers nil for every request, and records
// nothing.
type finishManyUnrecorded struct{ *runclaim.MemoryStore }

func (s finishManyUnrecorded) FinishMany(_ context.Context, reqs []runclaim.FinishRequest) ([]error, error) {
	return make([]error, len(reqs)), nil
}

// FinishMany is Finish for each request, in order.
func (s *copyStore) FinishMany(ctx context.Context, reqs []runclaim.FinishRequest) ([]error, error) {
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		errs[i] = s.Finish(ctx, req)
	}
	return errs, nil
}

package runclaim

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MemoryStore is a Store that keeps runs in this process's memory, with the
// same semantics as the Postgres store: for unit tests of code that uses a
// Claimer, and for tools that run as a single instance. It is safe for
// concurrent use. Its zero value is not usable; call NewMemoryStore.
type MemoryStore struct {
	now func() time.Time // the store's clock

	mu       sync.Mutex // protects the fields below
	lastID   int64
	runs     map[int64]*memRun
	running  map[string]*memRun       // by source
	latest   map[string]*memRun       // by source: the run that started last
	served   map[string]time.Time     // by source: the latest tick of a run that succeeded or failed
	pauses   map[string]memPause      // by source
	triggers map[string]time.Time     // by source: when the pending trigger was made
	wakes    map[string]chan struct{} // by source: closed, and dropped, when a claim of it may win now (see claimWake)
	limits   map[string]Limit         // by key
	cools    map[string]memCooldown   // by key
	starts   map[string][]memStart    // by key: the starts of runs that named it, oldest first
	states   map[string]SavedState    // by source: its state (see StateSaver)
	reserved map[string]memReserve    // by source: the reservation of a claim with Replace
}

// memReserve is the reservation of a claim with Replace: its token, the
// run it asked to stop, and its lease.
type memReserve struct {
	token string
	run   *memRun
	lease time.Duration
}

// memCooldown is a key's cooldown.
type memCooldown struct {
	until time.Time
	note  string
}

// memStart is the start of a run that named a key.
type memStart struct {
	at time.Time
	id int64
}

// memPause is a source's pause.
type memPause struct {
	at    time.Time // when it was made
	until time.Time // zero: until Resume
	note  string
}

// holds reports whether the pause skips a claim at now.
func (p memPause) holds(now time.Time) bool { return p.until.IsZero() || p.until.After(now) }

type memRun struct {
	info        RunInfo
	minInterval time.Duration // the interval its claim asked for
	prev        *memRun       // the run of the source that started last before it, for Unclaim
	trigger     time.Time     // when the trigger its claim used up was made; zero if none
	keys        []string      // the keys its claim named
	status      Status
	errText     string
	finished    time.Time
	stopBy      string // the token of the claim with Replace that asked it to stop, if any
}

var (
	_ Controller = (*MemoryStore)(nil)
	_ StateSaver = (*MemoryStore)(nil)
	_ ManyStore  = (*MemoryStore)(nil)
	_ unclaimer  = (*MemoryStore)(nil)
)

// NewMemoryStore returns an empty in-memory Store. WithClock gives it
// another clock than time.Now.
func NewMemoryStore(opts ...ClockOption) *MemoryStore {
	s := &MemoryStore{
		now:      time.Now,
		runs:     make(map[int64]*memRun),
		running:  make(map[string]*memRun),
		latest:   make(map[string]*memRun),
		served:   make(map[string]time.Time),
		pauses:   make(map[string]memPause),
		triggers: make(map[string]time.Time),
		wakes:    make(map[string]chan struct{}),
		limits:   make(map[string]Limit),
		cools:    make(map[string]memCooldown),
		starts:   make(map[string][]memStart),
		states:   make(map[string]SavedState),
		reserved: make(map[string]memReserve),
	}
	for _, o := range opts {
		if o.now != nil {
			s.now = o.now
		}
	}
	return s
}

// Claim implements Store.
func (s *MemoryStore) Claim(ctx context.Context, req ClaimRequest) (RunInfo, error) {
	unlock, err := s.enter(ctx, checkRequest(ctx, req), "claim", req.Source)
	if err != nil {
		return RunInfo{}, err
	}
	defer unlock()
	return s.claimLocked(req)
}

// claimLocked decides a valid claim, with s.mu held.
func (s *MemoryStore) claimLocked(req ClaimRequest) (RunInfo, error) {
	now := s.now()
	tick := normalTick(req.Tick)
	if p, ok := s.pauses[req.Source]; ok && p.holds(now) {
		return RunInfo{}, &NotClaimedError{Source: req.Source, Reason: ErrPaused, RetryAfter: p.until, Note: p.note, Tick: tick}
	}
	cur := s.running[req.Source]
	triggerAt, triggered := s.triggers[req.Source]
	if cur != nil && cur.info.LeaseUntil.After(now) {
		if req.Replace != "" && cur.stopBy == "" {
			// Replace: a served tick and the interval skip at once; else
			// the holder is asked to stop, and the source reserved.
			done := s.served[req.Source]
			if cur.info.Tick.After(done) {
				done = cur.info.Tick
			}
			if !tick.IsZero() && !triggered && !done.IsZero() && !tick.After(done) {
				return RunInfo{}, &NotClaimedError{Source: req.Source, Reason: ErrTickDone, Tick: tick, DoneTick: done}
			}
			if next := cur.info.StartedAt.Add(max(cur.minInterval, req.MinInterval)); next.After(now) && !triggered {
				return RunInfo{}, &NotClaimedError{Source: req.Source, Reason: ErrTooSoon, RetryAfter: next, Tick: tick}
			}
			cur.stopBy = req.Replace
			s.reserved[req.Source] = memReserve{token: req.Replace, run: cur, lease: req.Lease}
		}
		holder := cur.info
		return RunInfo{}, &NotClaimedError{Source: req.Source, Reason: ErrAlreadyRunning, Holder: &holder, RetryAfter: holder.LeaseUntil, Tick: tick}
	}
	// Reserved for another claim with Replace: while the run it asked to
	// stop is the source's latest, until that run's end and the
	// replacer's lease after it.
	if r, ok := s.reserved[req.Source]; ok && r.token != req.Replace && s.latest[req.Source] == r.run {
		end := r.run.finished
		if r.run.status == StatusRunning || r.run.status == StatusExpired {
			end = r.run.info.LeaseUntil
		}
		if end = end.Add(r.lease); end.After(now) {
			return RunInfo{}, &NotClaimedError{Source: req.Source, Reason: ErrAlreadyRunning, RetryAfter: end, Tick: tick}
		}
	}
	// The tick and the interval are decided before a lapsed run is
	// expired: a skip writes nothing. A lapsed run serves no tick, so the
	// latest tick served is that of a finished run. A pending trigger lets
	// the claim in despite a done tick and the interval.
	if !tick.IsZero() && !triggered {
		if done := s.served[req.Source]; !done.IsZero() && !tick.After(done) {
			return RunInfo{}, &NotClaimedError{Source: req.Source, Reason: ErrTickDone, Tick: tick, DoneTick: done}
		}
	}
	if last := s.latest[req.Source]; last != nil && !triggered {
		if next := last.info.StartedAt.Add(max(last.minInterval, req.MinInterval)); next.After(now) {
			return RunInfo{}, &NotClaimedError{Source: req.Source, Reason: ErrTooSoon, RetryAfter: next, Tick: tick}
		}
	}
	// Keys come after every other reason, and a skip for one writes
	// nothing.
	if nc := s.keysLocked(req, now, tick); nc != nil {
		return RunInfo{}, nc
	}
	if cur != nil {
		cur.status, cur.finished = StatusExpired, now
		delete(s.running, req.Source)
	}
	s.lastID++
	r := &memRun{
		info:        RunInfo{ID: s.lastID, Source: req.Source, Owner: req.Owner, StartedAt: now, LeaseUntil: now.Add(req.Lease), Tick: tick},
		minInterval: req.MinInterval,
		prev:        s.latest[req.Source],
		trigger:     triggerAt,
		keys:        slices.Clone(req.Keys),
		status:      StatusRunning,
	}
	for _, k := range req.Keys {
		st := s.starts[k]
		i := 0
		for i < len(st) && !st[i].at.After(now.Add(-MaxLimitPer)) {
			i++
		}
		s.starts[k] = append(st[i:], memStart{at: now, id: s.lastID})
	}
	s.runs[r.info.ID] = r
	s.running[req.Source] = r
	s.latest[req.Source] = r
	delete(s.triggers, req.Source) // the claim that wins uses the trigger up
	if r, ok := s.reserved[req.Source]; ok && r.token == req.Replace {
		delete(s.reserved, req.Source) // the reservation, its own
	}
	info := r.info
	if st, ok := s.states[req.Source]; ok {
		info.State, info.HasState = string(st.State), true
	}
	return info, nil
}

// Unclaim takes back a run that a claim has just won (see ManyStore): it forgets the run, makes the run of the
// source that started before it the latest again, and gives back the
// trigger that the claim used up, unless another one is pending.
func (s *MemoryStore) Unclaim(ctx context.Context, run RunInfo) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := validateRunRef(run.ID, run.Source, run.StartedAt); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("runclaim: unclaim run %d: %w", run.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[run.ID]
	if r == nil || r.info.Source != run.Source || !r.info.StartedAt.Equal(run.StartedAt) || r.status != StatusRunning {
		return fmt.Errorf("runclaim: unclaim run %d: %w", run.ID, ErrLeaseLost)
	}
	// A running run is the source's latest: a later claim either was
	// skipped or expired it.
	delete(s.runs, r.info.ID)
	delete(s.running, r.info.Source)
	s.wakeLocked(r.info.Source)
	if r.prev != nil {
		s.latest[r.info.Source] = r.prev
	} else {
		delete(s.latest, r.info.Source)
	}
	if _, pending := s.triggers[r.info.Source]; !r.trigger.IsZero() && !pending {
		s.triggers[r.info.Source] = r.trigger
	}
	for _, k := range r.keys {
		s.starts[k] = slices.DeleteFunc(s.starts[k], func(st memStart) bool { return st.id == r.info.ID })
	}
	return nil
}

// keysLocked decides req's keys at now, in the order named, with s.mu
// held: the skip of the first key with no room, or nil.
func (s *MemoryStore) keysLocked(req ClaimRequest, now, tick time.Time) *NotClaimedError {
	for _, k := range req.Keys {
		limited := func(retry time.Time, note string) *NotClaimedError {
			return &NotClaimedError{Source: req.Source, Reason: ErrLimited, Key: k, RetryAfter: retry, Note: note, Tick: tick}
		}
		if c, ok := s.cools[k]; ok && c.until.After(now) {
			return limited(c.until, c.note)
		}
		l := s.limits[k]
		if l.MaxRunning > 0 {
			n, first := 0, time.Time{}
			for _, r := range s.running {
				if r.info.LeaseUntil.After(now) && slices.Contains(r.keys, k) {
					n++
					if first.IsZero() || r.info.LeaseUntil.Before(first) {
						first = r.info.LeaseUntil
					}
				}
			}
			if n >= l.MaxRunning {
				return limited(first, "")
			}
		}
		if l.MaxStarts > 0 {
			var in []time.Time
			for _, st := range s.starts[k] {
				if st.at.After(now.Add(-l.Per)) {
					in = append(in, st.at)
				}
			}
			if len(in) >= l.MaxStarts {
				slices.SortFunc(in, func(a, b time.Time) int { return a.Compare(b) })
				return limited(in[len(in)-l.MaxStarts].Add(l.Per), "")
			}
		}
		if st := s.starts[k]; l.MinGap > 0 && len(st) > 0 {
			// The newest start, the last recorded: the key is paced until
			// MinGap after it.
			if next := st[len(st)-1].at.Add(l.MinGap); next.After(now) {
				return limited(next, "")
			}
		}
	}
	return nil
}

var _ Limiter = (*MemoryStore)(nil)

// SetLimit implements Limiter.
func (s *MemoryStore) SetLimit(ctx context.Context, key string, l Limit) error {
	return s.update(ctx, cmp.Or(checkKeyCall(ctx, key), l.Validate()), "set limit", key, func() error {
		s.limits[key] = l
		return nil
	})
}

// DeleteLimit implements Limiter.
func (s *MemoryStore) DeleteLimit(ctx context.Context, key string) error {
	return s.update(ctx, checkKeyCall(ctx, key), "delete limit", key, func() error {
		delete(s.limits, key)
		return nil
	})
}

// Cooldown implements Limiter.
func (s *MemoryStore) Cooldown(ctx context.Context, key string, until time.Time, note string) error {
	return s.update(ctx, checkCooldown(ctx, key, until, note), "cooldown", key, func() error {
		now := s.now()
		if !until.After(now) {
			return pastCooldown(key, until, now)
		}
		s.coolLocked(key, until, note)
		return nil
	})
}

// cooldownFor is Run.Cooldown's: a cooldown of d from the store's clock.
func (s *MemoryStore) cooldownFor(ctx context.Context, key string, d time.Duration, note string) error {
	return s.update(ctx, checkCooldownFor(ctx, key, d, note), "cooldown", key, func() error {
		s.coolLocked(key, s.now().Add(d), note)
		return nil
	})
}

// coolLocked records a cooldown of key until until, unless one in force
// ends later. s.mu must be held.
func (s *MemoryStore) coolLocked(key string, until time.Time, note string) {
	if c, ok := s.cools[key]; ok && !until.After(c.until) {
		return
	}
	s.cools[key] = memCooldown{until: until, note: note}
}

// EndCooldown implements Limiter.
func (s *MemoryStore) EndCooldown(ctx context.Context, key string) error {
	return s.update(ctx, checkKeyCall(ctx, key), "end cooldown", key, func() error {
		delete(s.cools, key)
		return nil
	})
}

// Pause implements Controller.
func (s *MemoryStore) Pause(ctx context.Context, source string, until time.Time, note string) error {
	return s.update(ctx, checkPause(ctx, source, until, note), "pause", source, func() error {
		now := s.now()
		if !until.IsZero() && !until.After(now) {
			return pastUntil(source, until, now)
		}
		s.pauses[source] = memPause{at: now, until: until, note: note}
		return nil
	})
}

// Resume implements Controller.
func (s *MemoryStore) Resume(ctx context.Context, source string) error {
	return s.update(ctx, checkSourceCall(ctx, source), "resume", source, func() error {
		delete(s.pauses, source)
		s.wakeLocked(source)
		return nil
	})
}

// Trigger implements Controller.
func (s *MemoryStore) Trigger(ctx context.Context, source string) error {
	return s.update(ctx, checkSourceCall(ctx, source), "trigger", source, func() error {
		if _, ok := s.triggers[source]; !ok {
			s.triggers[source] = s.now()
			s.wakeLocked(source)
		}
		return nil
	})
}

// Heartbeat implements Store.
func (s *MemoryStore) Heartbeat(ctx context.Context, req HeartbeatRequest) (time.Time, error) {
	if err := checkRequest(ctx, req); err != nil {
		return time.Time{}, err
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, fmt.Errorf("runclaim: heartbeat run %d: %w", req.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heartbeatLocked(req)
}

// heartbeatLocked extends a lease for a valid request, with s.mu held.
func (s *MemoryStore) heartbeatLocked(req HeartbeatRequest) (time.Time, error) {
	r := s.runs[req.ID]
	now := s.now()
	if r == nil || r.info.Source != req.Source || !r.info.StartedAt.Equal(req.StartedAt) || r.status != StatusRunning || !r.info.LeaseUntil.After(now) {
		return time.Time{}, fmt.Errorf("runclaim: heartbeat run %d: %w", req.ID, ErrLeaseLost)
	}
	// Never back: a heartbeat with a shorter lease than the one left
	// leaves the end in place, as in PostgresStore.
	if until := now.Add(req.Lease); until.After(r.info.LeaseUntil) {
		r.info.LeaseUntil = until
	}
	if r.stopBy != "" {
		return r.info.LeaseUntil, fmt.Errorf("runclaim: heartbeat run %d: %w", req.ID, ErrReplaced)
	}
	return r.info.LeaseUntil, nil
}

// FinishMany implements PostgresStore.FinishMany's contract: each
// request as Finish would decide it, in order.
func (s *MemoryStore) FinishMany(ctx context.Context, reqs []FinishRequest) ([]error, error) {
	if err := validateFinishes(ctx, reqs); err != nil {
		return nil, err
	}
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		errs[i] = s.Finish(ctx, req)
	}
	return errs, nil
}

// Finish implements Store.
func (s *MemoryStore) Finish(ctx context.Context, req FinishRequest) error {
	if err := checkRequest(ctx, req); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("runclaim: finish run %d: %w", req.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[req.ID]
	if r != nil && (r.info.Source != req.Source || !r.info.StartedAt.Equal(req.StartedAt)) {
		r = nil // another run (see validateRunRef)
	}
	now := s.now()
	if r != nil && r.status == StatusRunning && !r.info.LeaseUntil.After(now) {
		// The lease has lapsed: the run is lost, as if a claim had expired it.
		r.status, r.finished = StatusExpired, now
		delete(s.running, r.info.Source)
		s.wakeLocked(r.info.Source)
	}
	if r == nil || r.status != StatusRunning {
		var status, errText *string
		if r != nil {
			st := string(r.status)
			status = &st
			if r.status == StatusFailed {
				errText = &r.errText
			}
		}
		return finishConflict(req, status, errText)
	}
	r.status, r.errText, r.finished = req.Status, req.Error, now
	if r.stopBy != "" {
		r.status = StatusReplaced // asked to stop: whatever the outcome
	}
	delete(s.running, r.info.Source)
	s.wakeLocked(r.info.Source)
	if r.info.Tick.After(s.served[r.info.Source]) {
		s.served[r.info.Source] = r.info.Tick
	}
	return nil
}

// claimWake implements claimWaker: the channel closes when a claim of
// source may win now (a run of it finished or was unclaimed, or it was
// resumed or triggered), so that a waiting claim on a MemoryStore wins at
// once rather than at its next poll. A channel nobody wakes stays until
// the next such change of its source.
func (s *MemoryStore) claimWake(source string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.wakes[source]
	if !ok {
		ch = make(chan struct{})
		s.wakes[source] = ch
	}
	return ch
}

// wakeLocked wakes the waiting claims of source. s.mu must be held.
func (s *MemoryStore) wakeLocked(source string) {
	if ch, ok := s.wakes[source]; ok {
		close(ch)
		delete(s.wakes, source)
	}
}

// SaveState implements StateSaver.
func (s *MemoryStore) SaveState(ctx context.Context, run RunInfo, state []byte) error {
	if err := checkSave(ctx, run, state); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("runclaim: save state of run %d: %w", run.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[run.ID]
	if r == nil || r.info.Source != run.Source || r.info.Owner != run.Owner || !r.info.StartedAt.Equal(run.StartedAt) ||
		r.status != StatusRunning || !r.info.LeaseUntil.After(s.now()) {
		return fmt.Errorf("runclaim: save state of run %d: %w", run.ID, ErrLeaseLost)
	}
	s.states[run.Source] = SavedState{State: append([]byte{}, state...), SavedAt: s.now(), RunID: run.ID}
	return nil
}

// State returns the state of source, and whether it has one, as
// PostgresStore.State does.
func (s *MemoryStore) State(ctx context.Context, source string) (SavedState, bool, error) {
	if err := checkSourceCall(ctx, source); err != nil {
		return SavedState{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.states[source]
	if ok {
		st.State = append([]byte{}, st.State...)
	}
	return st, ok, nil
}

// enter is a method's way in: invalid, the error of the check of its
// arguments, if there is one; else ctx's error, if it has ended, as the
// error of what on name; else s's lock, which the caller releases with
// unlock.
func (s *MemoryStore) enter(ctx context.Context, invalid error, what, name string) (unlock func(), err error) {
	if invalid != nil {
		return nil, invalid
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("runclaim: %s %s: %w", what, quoteForError(name), err)
	}
	s.mu.Lock()
	return s.mu.Unlock, nil
}

// update is enter for a method that returns only an error: it runs f
// under s's lock.
func (s *MemoryStore) update(ctx context.Context, invalid error, what, name string, f func() error) error {
	unlock, err := s.enter(ctx, invalid, what, name)
	if err != nil {
		return err
	}
	defer unlock()
	return f()
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

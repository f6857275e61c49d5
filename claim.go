package runclaim

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// A Claimer claims sources in a Store on behalf of one holder. It is safe
// for concurrent use; create one per process and share it.
type Claimer struct {
	store Store
	cfg   config
	sched schedule   // derived from cfg
	hb    heartbeats // of DoMany's runs
	yl    yields     // of its waiting claims
	fin   finishes   // its runs' finishes, batched while one is sent
}

// New returns a Claimer that claims sources in store. It returns an error,
// naming the option, if an option is invalid.
func New(store Store, opts ...Option) (*Claimer, error) {
	if isNil(store) {
		return nil, errors.New("runclaim: New: nil Store")
	}
	cfg, err := applyOptions(config{lease: DefaultLease}, opts, "New")
	if err != nil {
		return nil, err
	}
	sched := newSchedule(cfg.lease, cfg.heartbeat)
	if cfg.owner == "" {
		cfg.owner = defaultOwner()
	}
	return &Claimer{store: store, cfg: cfg, sched: sched}, nil
}

// Claim starts a run of source if no other run holds it. It never waits for
// another holder: when the source is taken it returns an error matching
// ErrNotClaimed (and ErrAlreadyRunning, ErrTooSoon, ErrTickDone, ErrPaused or ErrLimited) at once. Any other
// error is a real failure, such as an invalid source (ErrInvalidSource) or an
// unreachable database; the store's error is wrapped. ctx bounds the claim
// only, not the run; if ctx ends first, its error is returned, wrapped. (The
// Postgres store lets a claim that is already on the wire run for up to 5 s
// more to learn whether it won, and deletes a run won after ctx ended, so
// that a cancelled claim never leaves behind a run nobody holds.)
//
// The caller must end the run with Finish, and keep it alive with Heartbeat
// when it may last longer than the lease; Do does both.
//
// opts change the claim: ForTick makes it serve one scheduled tick,
// WithKeys makes it name keys (ErrLimited), and Wait makes it wait while
// the source is held instead of skipping. An invalid option is an error,
// not a skip, and nothing is claimed.
func (c *Claimer) Claim(ctx context.Context, source string, opts ...ClaimOption) (*Run, error) {
	o, err := applyClaimOptions("Claim", opts)
	if err != nil {
		c.claimFailed(ctx, source, err, 0)
		return nil, err
	}
	if o.wait || o.replace {
		return c.claimWaiting(ctx, source, o)
	}
	return c.claim(ctx, source, o)
}

// checkedRequest is the request of a claim of source with the options o,
// once ctx and the request are checked; a failed check is reported to the
// hooks as a failed claim, and nothing is sent.
func (c *Claimer) checkedRequest(ctx context.Context, source string, o claimOptions) (ClaimRequest, error) {
	err := checkContext(ctx)
	var req ClaimRequest
	if err == nil {
		req, err = c.claimRequest(source, o)
	}
	if err != nil {
		c.claimFailed(ctx, source, err, 0)
	}
	return req, err
}

// claim is Claim, with the options o.
func (c *Claimer) claim(ctx context.Context, source string, o claimOptions) (*Run, error) {
	req, err := c.checkedRequest(ctx, source, o)
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	info, err := c.store.Claim(ctx, req)
	if err != nil {
		c.notClaimed(ctx, source, err, time.Since(sent))
		return nil, err
	}
	run := c.newRun(info, sent)
	c.claimed(ctx, run, time.Since(sent))
	return run, nil
}

// claimRequest returns the checked request of a claim of source with the
// options o: its keys are those o names and those WithSourceKeys gives.
func (c *Claimer) claimRequest(source string, o claimOptions) (ClaimRequest, error) {
	keys, err := c.keysFor(source, o.keys)
	if err != nil {
		return ClaimRequest{}, err
	}
	req := ClaimRequest{Source: source, Owner: c.cfg.owner, Lease: c.sched.lease, MinInterval: c.cfg.minInterval, Tick: o.tick, Keys: keys}
	if o.replace {
		req.Replace = replaceToken()
	}
	return req, req.Validate()
}

// newRun returns the Run of info, won by a claim sent at sent.
func (c *Claimer) newRun(info RunInfo, sent time.Time) *Run {
	return &Run{
		ID:          info.ID,
		Source:      info.Source,
		Owner:       info.Owner,
		StartedAt:   info.StartedAt,
		LeaseUntil:  info.LeaseUntil,
		Tick:        info.Tick,
		state:       info.State,
		hasState:    info.HasState,
		claimer:     c,
		leaseUntil:  info.LeaseUntil,
		claimedAt:   sent,
		localExpiry: c.sched.localEnd(sent),
		replacedCh:  make(chan struct{}),
	}
}

// A Run is one claimed run of a source. Its exported fields do not change.
// Its methods are safe for concurrent use.
type Run struct {
	// ID identifies the run. IDs strictly increase in a store, so ID is a
	// fencing token: pass it to downstream writes and have them refuse a
	// token lower than the highest they have seen. After a failover to an
	// asynchronous standby, IDs that the old primary handed out can be
	// handed out again: see docs/failover.md for what ID promises under
	// each kind of replication.
	ID int64
	// Source is the claimed source.
	Source string
	// Owner is the holder recorded with the run.
	Owner string
	// StartedAt is when the run started, by the database clock.
	StartedAt time.Time
	// LeaseUntil is when the lease granted by the claim ends, by the
	// database clock. Heartbeats extend the lease; Deadline reports its
	// current end.
	LeaseUntil time.Time
	// Tick is the scheduled tick the run serves (see ForTick), in UTC
	// and whole microseconds; zero for a run of a plain Claim.
	Tick time.Time

	claimer   *Claimer
	state     string    // the source's state when the run was claimed; see State
	hasState  bool      // whether it had one
	claimedAt time.Time // when the claim was sent, local clock
	waited    bool      // won by a claim with Wait

	finishMu sync.Mutex // serialises Finish calls, so that racing ones agree

	mu          sync.Mutex // protects the fields below
	leaseUntil  time.Time  // current lease end, database clock
	localExpiry time.Time  // lease end by this process's monotonic clock
	finished    *FinishRequest
	finishing   bool          // a Finish call is in flight
	finishWait  chan struct{} // closed when it returns; made by a heartbeat that waits for it
	lostErr     error         // why the run is lost; nil until it is known lost
	lostCh      chan struct{} // closed once lostErr is set; made by Lost
	watch       *time.Timer   // sets lostErr by the local clock; armed by Lost
	replacedCh  chan struct{} // closed once a heartbeat learnt of a stop request (Replace)
}

// Replaced returns a channel that is closed once a heartbeat has learnt
// that a claim with Replace asked the run to stop (see Replace). The run
// keeps its lease, and its heartbeats go on, until it finishes; the work
// should stop soon, and Finish then records StatusReplaced. Do cancels its
// function's context with cause ErrReplaced at that moment.
func (r *Run) Replaced() <-chan struct{} { return r.replacedCh }

// replaced reports whether a stop request has reached the run.
func (r *Run) replaced() bool {
	select {
	case <-r.replacedCh:
		return true
	default:
		return false
	}
}

// Deadline returns the current end of the run's lease, by the database
// clock, as of the last successful Heartbeat.
func (r *Run) Deadline() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leaseUntil
}

// LocalDeadline returns the end of the run's lease by this process's
// monotonic clock: a full lease from when the claim, or the last
// successful heartbeat, was sent. It is never later than Deadline, by the
// database clock, since the store read its clock after the request was
// sent. Lost closes ExpiryMargin before it (see Settings). A process that
// watches over the run's work on its own, such as runclaim exec's keeper,
// stops the work by then if the time passes without a newer one.
func (r *Run) LocalDeadline() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.localExpiry
}

// Heartbeat extends the run's lease to a full lease from now. It returns an
// error matching ErrLeaseLost if the run is not running any more (another
// claim expired it, or an operator released it) or its lease has already
// ended by the store's clock, and then closes Lost; it returns ErrFinished
// after Finish (also when a Finish recorded the run while this heartbeat
// was on its way), and the store's error, wrapped, otherwise. ctx bounds
// this call only.
func (r *Run) Heartbeat(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	done := r.finished != nil
	r.mu.Unlock()
	if done {
		return fmt.Errorf("runclaim: heartbeat run %d: %w", r.ID, ErrFinished)
	}
	sent := time.Now()
	until, err := r.claimer.store.Heartbeat(ctx, r.heartbeatRequest())
	return r.heartbeatAnswer(ctx, sent, until, err)
}

// heartbeatRequest is the store request of a heartbeat of r.
func (r *Run) heartbeatRequest() HeartbeatRequest {
	return HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: r.claimer.sched.lease}
}

// heartbeatAnswer takes in the store's answer to a heartbeat sent at sent
// (until, or err), and returns what Heartbeat returns.
func (r *Run) heartbeatAnswer(ctx context.Context, sent, until time.Time, err error) error {
	if errors.Is(err, ErrReplaced) && !until.IsZero() {
		// Asked to stop: the lease was extended all the same.
		_ = r.heartbeatAnswer(ctx, sent, until, nil)
		r.mu.Lock()
		first := !r.replaced()
		if first {
			close(r.replacedCh)
		}
		r.mu.Unlock()
		if first {
			r.replacedEvent()
		}
		return err
	}
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			if ferr := r.finishedMeanwhile(ctx, "heartbeat"); ferr != nil {
				return ferr
			}
		}
		if ctx.Err() == nil || !errors.Is(err, ctx.Err()) { // not a heartbeat its caller called off
			r.failed(err, true)
		}
		return err
	}
	r.mu.Lock()
	r.leaseUntil = until
	if exp := r.claimer.sched.localEnd(sent); exp.After(r.localExpiry) {
		r.localExpiry = exp
	}
	r.mu.Unlock()
	return nil
}

// finishedMeanwhile tells a heartbeat or a save of state (what) that the
// store found not running whether a Finish of this run got there first:
// it waits for a Finish in flight (or for ctx), and returns ErrFinished if
// the run is now finished, nil if it is not, and ctx's error if ctx ended
// first.
func (r *Run) finishedMeanwhile(ctx context.Context, what string) error {
	r.mu.Lock()
	var inFlight chan struct{}
	if r.finishing {
		if r.finishWait == nil {
			r.finishWait = make(chan struct{})
		}
		inFlight = r.finishWait
	}
	r.mu.Unlock()
	if inFlight != nil {
		select {
		case <-inFlight:
		case <-ctx.Done():
			return fmt.Errorf("runclaim: %s run %d: waiting for the Finish in flight: %w", what, r.ID, ctx.Err())
		}
	}
	r.mu.Lock()
	done := r.finished != nil
	r.mu.Unlock()
	if done {
		return fmt.Errorf("runclaim: %s run %d: %w", what, r.ID, ErrFinished)
	}
	return nil
}

// Lost returns a channel that is closed once the run is known lost: a
// heartbeat (Heartbeat, or the background ones of Do and KeepAlive) found
// it gone, a Finish returned ErrLeaseLost, or its lease is about to end by
// this process's own clock without a successful heartbeat, ExpiryMargin
// before its end (counted from when the claim or the last successful
// heartbeat was sent). From then on another replica may run the source,
// so the work must stop. It stays closed.
//
// It does not close on a shutdown, when the context given to Do or
// KeepAlive ends, nor on Finish. That makes it the signal to watch while
// winding down: once a shutdown has cancelled the run's context with its
// own cause, that context cannot tell of a lost run any more, so a job
// that goes on writing after ctx.Done() (a flush, a checkpoint) selects
// on Lost too:
//
//	<-ctx.Done() // the shutdown
//	select {
//	case <-flushed:
//	case <-run.Lost():
//		return errors.New("run lost while winding down; stopped the flush")
//	}
//
// Under Do and KeepAlive, Lost closes before the run's context is
// cancelled with ErrLeaseLost. A holder that heartbeats by hand gets the
// local clock's deadline from its first call of Lost on: the clock is not
// watched for runs whose Lost nobody asked for. Do stops watching when
// it returns.
func (r *Run) Lost() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lostCh == nil {
		r.lostCh = make(chan struct{})
		if r.lostErr != nil {
			close(r.lostCh)
		}
	}
	if r.watch == nil && r.lostErr == nil && r.finished == nil {
		r.watch = time.AfterFunc(time.Until(r.claimer.sched.lostAt(r.localExpiry)), r.checkExpiry)
	}
	return r.lostCh
}

// lostAtStart returns why the run is lost if it is lost already, as Do
// is about to call fn: it checks the local clock itself, at once, rather
// than wait for Lost's watch, which a claim whose answer came after the
// lease had ended by this process's clock fires only a moment later.
func (r *Run) lostAtStart() error {
	r.mu.Lock()
	if r.lostErr == nil && r.finished == nil && time.Until(r.claimer.sched.lostAt(r.localExpiry)) <= 0 {
		err := fmt.Errorf("%w: run %d's lease was ending by the local clock when the claim's answer came", ErrLeaseLost, r.ID)
		if r.setLostLocked(err) {
			r.mu.Unlock()
			r.lostEvent(err)
			return err
		}
	}
	err := r.lostErr
	r.mu.Unlock()
	return err
}

// checkExpiry is the watch of Lost: it marks the run lost once its lease is
// within the expiry margin of its end by the local clock, and otherwise
// (a heartbeat moved the end) waits again.
func (r *Run) checkExpiry() {
	r.mu.Lock()
	if r.lostErr != nil || r.finished != nil || r.watch == nil {
		r.mu.Unlock()
		return
	}
	if d := time.Until(r.claimer.sched.lostAt(r.localExpiry)); d > 0 {
		r.watch.Reset(d)
		r.mu.Unlock()
		return
	}
	err := fmt.Errorf("%w: run %d's lease is ending by the local clock without a successful heartbeat", ErrLeaseLost, r.ID)
	r.setLostLocked(err)
	r.mu.Unlock()
	r.lostEvent(err)
}

// setLostLocked records that the run is lost, closing Lost. It reports whether
// this call did it (false if the run was already lost). r.mu must be held.
func (r *Run) setLostLocked(err error) bool {
	if r.lostErr != nil {
		return false
	}
	r.lostErr = err
	if r.lostCh != nil {
		close(r.lostCh)
	}
	r.stopWatchLocked()
	return true
}

// lostCause is why the run is lost, or nil while it is not known lost.
func (r *Run) lostCause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lostErr
}

// stopWatchLocked stops the local clock's watch of Lost. r.mu must be held.
func (r *Run) stopWatchLocked() {
	if r.watch != nil {
		r.watch.Stop()
		r.watch = nil
	}
}

// stopWatch stops the local clock's watch of Lost.
func (r *Run) stopWatch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopWatchLocked()
}

// Finish records the run's outcome: succeeded if jobErr is nil, else failed
// with jobErr's text (made valid UTF-8 without NUL bytes, and cut to
// MaxErrorLen bytes). A cancelled ctx does not stop it, so that a deferred
// Finish still records the outcome of a cancelled job; it gives up after
// FinishTimeout or at ctx's deadline, whichever is later.
//
// Finish returns an error matching ErrLeaseLost if the run was taken over or
// released before it finished, or if its lease had already ended by the
// store's clock: the store then records the run as expired, whether or not
// another claim got there first, because another replica may already be
// running the source. Calling it again, also concurrently, with the same
// outcome returns nil once a call has succeeded; a different outcome
// returns ErrFinished.
func (r *Run) Finish(ctx context.Context, jobErr error) error {
	if ctx == nil {
		ctx = context.Background()
	}
	req := FinishRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Status: StatusSucceeded}
	if jobErr != nil {
		req.Status, req.Error = StatusFailed, errorText(jobErr)
	}
	r.finishMu.Lock()
	defer r.finishMu.Unlock()
	if r.waited {
		// Once this Finish has returned, a waiting claim of the source by
		// this Claimer lets the other waiters poll first (see Wait).
		defer func() { r.claimer.yl.end(r.Source, time.Now()) }()
	}
	r.mu.Lock()
	prev := r.finished
	r.mu.Unlock()
	if prev != nil {
		if *prev == req {
			return nil
		}
		return fmt.Errorf("runclaim: finish run %d: %w as %s", r.ID, ErrFinished, prev.Status)
	}
	fctx, cancel := finishContext(ctx)
	defer cancel()
	r.mu.Lock()
	r.finishing = true
	r.mu.Unlock()
	err := r.claimer.finish(fctx, req)
	r.mu.Lock()
	if err == nil {
		r.finished = &req
		r.stopWatchLocked()
	}
	r.finishing = false
	if r.finishWait != nil {
		close(r.finishWait)
		r.finishWait = nil
	}
	r.mu.Unlock()
	if err != nil {
		r.failed(err, false)
		return err
	}
	status := req.Status
	if r.replaced() {
		status = StatusReplaced // as the store recorded it
	}
	r.finishedEvent(status, jobErr)
	return nil
}

// finishContext is ctx without its cancellation, with a deadline of
// FinishTimeout from now or ctx's own deadline, whichever is later.
func finishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(FinishTimeout)
	if d, ok := ctx.Deadline(); ok && d.After(deadline) {
		deadline = d
	}
	return context.WithDeadline(context.WithoutCancel(ctx), deadline)
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

// replaceToken is a new token of a claim with Replace: random, so that no
// other claim holds the same.
func replaceToken() string {
	var b [12]byte
	_, _ = cryptorand.Read(b[:])
	return "replace-" + hex.EncodeToString(b[:])
}

// finishManyStore is a Store that records many outcomes in one call
// (PostgresStore, MemoryStore): see PostgresStore.FinishMany.
type finishManyStore interface {
	FinishMany(ctx context.Context, reqs []FinishRequest) ([]error, error)
}

// finishes batches a Claimer's Finishes, as a database batches commits: a
// Finish that comes while none is being sent goes at once, alone; those
// that come while one is in flight wait for it, and go together in the
// next call (up to MaxClaimMany). A DoMany whose runs end together so
// records their outcomes in a few statements instead of one each, and a
// lone Finish waits for nothing.
type finishes struct {
	mu      sync.Mutex
	queue   []*finishCall
	sending bool // a goroutine is sending the queue
}

// finishCall is one Finish waiting for its answer.
type finishCall struct {
	ctx  context.Context // finishContext's: no cancellation, a deadline
	req  FinishRequest
	err  error
	done chan struct{}
}

// finish records req's outcome through the store: batched with the
// others that wait when the store has FinishMany.
func (c *Claimer) finish(ctx context.Context, req FinishRequest) error {
	fm, ok := c.store.(finishManyStore)
	if !ok {
		return c.store.Finish(ctx, req)
	}
	call := &finishCall{ctx: ctx, req: req, done: make(chan struct{})}
	f := &c.fin
	f.mu.Lock()
	f.queue = append(f.queue, call)
	start := !f.sending
	f.sending = true
	f.mu.Unlock()
	if start {
		go c.sendFinishes(fm)
	}
	<-call.done
	return call.err
}

// sendFinishes sends the queued finishes until none is left: one alone
// with Finish, more with FinishMany, whose whole-call error sends them one
// by one.
func (c *Claimer) sendFinishes(fm finishManyStore) {
	f := &c.fin
	for {
		f.mu.Lock()
		n := min(len(f.queue), MaxClaimMany)
		if n == 0 {
			f.sending = false
			f.mu.Unlock()
			return
		}
		batch := slices.Clone(f.queue[:n])
		f.queue = f.queue[n:]
		f.mu.Unlock()
		if len(batch) == 1 {
			batch[0].err = c.store.Finish(batch[0].ctx, batch[0].req)
			close(batch[0].done)
			continue
		}
		// The batch's deadline is the latest of its calls'.
		deadline := time.Now().Add(FinishTimeout)
		reqs := make([]FinishRequest, len(batch))
		for i, call := range batch {
			reqs[i] = call.req
			if d, ok := call.ctx.Deadline(); ok && d.After(deadline) {
				deadline = d
			}
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		errs, err := fm.FinishMany(ctx, reqs)
		cancel()
		for i, call := range batch {
			if err != nil {
				call.err = c.store.Finish(call.ctx, call.req)
			} else {
				call.err = errs[i]
			}
			close(call.done)
		}
	}
}

package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runclaim/runclaim"
)

// These tests cover every path of Claimer.Do on the memory store. They wait
// on channels with timeouts; the only clocks they depend on are the leases
// under test. spyStore shows what Do asked of the store, and fails or
// blocks heartbeats and finishes on demand.

// doWait bounds every wait for something that should happen promptly.
const doWait = 5 * time.Second

// spyStore wraps a Store, records the Finish requests that reach it, and
// lets a test replace Heartbeat, Finish or Claim.
type spyStore struct {
	inner runclaim.Store

	mu        sync.Mutex // protects the fields below
	claim     func(context.Context, runclaim.ClaimRequest) (runclaim.RunInfo, error)
	heartbeat func(context.Context, runclaim.HeartbeatRequest) (time.Time, error)
	finish    func(context.Context, runclaim.FinishRequest) error
	finishes  []spyFinish
	beats     int
}

// spyFinish is one Finish call: the request, whether its context had
// already ended, and what the store returned.
type spyFinish struct {
	req    runclaim.FinishRequest
	ctxErr error
	err    error
}

func newSpyStore(inner runclaim.Store) *spyStore { return &spyStore{inner: inner} }

var _ runclaim.Store = (*spyStore)(nil)

func (s *spyStore) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	s.mu.Lock()
	f := s.claim
	s.mu.Unlock()
	if f != nil {
		return f(ctx, req)
	}
	return s.inner.Claim(ctx, req)
}

func (s *spyStore) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	s.mu.Lock()
	f := s.heartbeat
	s.beats++
	s.mu.Unlock()
	if f != nil {
		return f(ctx, req)
	}
	return s.inner.Heartbeat(ctx, req)
}

func (s *spyStore) Finish(ctx context.Context, req runclaim.FinishRequest) error {
	s.mu.Lock()
	f := s.finish
	s.mu.Unlock()
	var err error
	if f != nil {
		err = f(ctx, req)
	} else {
		err = s.inner.Finish(ctx, req)
	}
	s.mu.Lock()
	s.finishes = append(s.finishes, spyFinish{req: req, ctxErr: ctx.Err(), err: err})
	s.mu.Unlock()
	return err
}

func (s *spyStore) setHeartbeat(f func(context.Context, runclaim.HeartbeatRequest) (time.Time, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heartbeat = f
}

func (s *spyStore) setFinish(f func(context.Context, runclaim.FinishRequest) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finish = f
}

func (s *spyStore) setClaim(f func(context.Context, runclaim.ClaimRequest) (runclaim.RunInfo, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claim = f
}

func (s *spyStore) finishCalls() []spyFinish {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]spyFinish(nil), s.finishes...)
}

func (s *spyStore) heartbeats() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.beats
}

// wantOneFinish checks that Do sent exactly one Finish, of run id, with
// status and an error text containing text, on a live context.
func (s *spyStore) wantOneFinish(t *testing.T, id int64, status runclaim.Status, text string) spyFinish {
	t.Helper()
	calls := s.finishCalls()
	if len(calls) != 1 {
		t.Fatalf("Do sent %d Finish calls, want 1: %+v", len(calls), calls)
	}
	f := calls[0]
	if f.req.ID != id || f.req.Status != status || !strings.Contains(f.req.Error, text) {
		t.Errorf("Do sent Finish %+v, want run %d %s with an error text containing %q", f.req, id, status, text)
	}
	if status == runclaim.StatusSucceeded && f.req.Error != "" {
		t.Errorf("succeeded run recorded with error text %q", f.req.Error)
	}
	if f.ctxErr != nil {
		t.Errorf("Do's Finish ran on an ended context: %v", f.ctxErr)
	}
	return f
}

// wantRecorded checks, through the store's own behaviour, that run id was
// recorded with req: repeating the same Finish is accepted, and another
// outcome is refused with ErrFinished.
func wantRecorded(t *testing.T, s runclaim.Store, req runclaim.FinishRequest) {
	t.Helper()
	ctx := t.Context()
	if err := s.Finish(ctx, req); err != nil {
		t.Errorf("the store did not record %+v: repeating it returned %v", req, err)
	}
	other := runclaim.FinishRequest{ID: req.ID, Source: req.Source, StartedAt: req.StartedAt, Status: runclaim.StatusFailed, Error: "a different outcome"}
	if err := s.Finish(ctx, other); !errors.Is(err, runclaim.ErrFinished) {
		t.Errorf("the store let run %d finish again as %+v: %v", req.ID, other, err)
	}
}

func doClaimer(t *testing.T, s runclaim.Store, opts ...runclaim.Option) *runclaim.Claimer {
	t.Helper()
	c, err := runclaim.New(s, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// awaitRecv receives from ch or fails the test after within.
func awaitRecv[T any](t *testing.T, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", within, what)
		panic("unreachable")
	}
}

// trySend sends v on ch unless ch is full: hooks run on Do's goroutines
// and must not block them.
func trySend[T any](ch chan<- T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// goDo runs c.Do in a goroutine and returns a channel with its result.
func goDo(ctx context.Context, c *runclaim.Claimer, source string, fn func(context.Context, *runclaim.Run) error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.Do(ctx, source, fn) }()
	return done
}

type ctxKey struct{}

func TestDoSucceeded(t *testing.T) {
	spy := newSpyStore(runclaim.NewMemoryStore())
	c := doClaimer(t, spy, runclaim.WithOwner("replica-a"))
	ctx := context.WithValue(t.Context(), ctxKey{}, "parent value")

	var (
		calls  int
		runCtx context.Context
		got    *runclaim.Run
	)
	err := c.Do(ctx, "src", func(ctx context.Context, run *runclaim.Run) error {
		calls++
		runCtx, got = ctx, run
		if ctx.Value(ctxKey{}) != "parent value" {
			t.Error("fn's context does not derive from Do's")
		}
		if err := ctx.Err(); err != nil {
			t.Errorf("fn's context is already done: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if calls != 1 {
		t.Fatalf("fn called %d times, want 1", calls)
	}
	if got.ID <= 0 || got.Source != "src" || got.Owner != "replica-a" || got.StartedAt.IsZero() || !got.LeaseUntil.After(got.StartedAt) {
		t.Errorf("fn got run %+v", got)
	}
	if runCtx.Err() == nil {
		t.Error("fn's context is still live after Do returned")
	}
	spy.wantOneFinish(t, got.ID, runclaim.StatusSucceeded, "")
	wantRecorded(t, spy, runclaim.FinishRequest{ID: got.ID, Source: got.Source, StartedAt: got.StartedAt, Status: runclaim.StatusSucceeded})

	// The source is free for the next tick.
	if err := c.Do(t.Context(), "src", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
		t.Fatalf("second Do: %v", err)
	}
}

var errSweep = errors.New("sweep broke")

func TestDoFnError(t *testing.T) {
	spy := newSpyStore(runclaim.NewMemoryStore())
	c := doClaimer(t, spy)
	var id int64
	err := c.Do(t.Context(), "src", func(ctx context.Context, run *runclaim.Run) error {
		id = run.ID
		return fmt.Errorf("page 3: %w", errSweep)
	})
	if !errors.Is(err, errSweep) {
		t.Fatalf("Do = %v, want an error matching fn's", err)
	}
	if errors.Is(err, runclaim.ErrNotClaimed) || errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Do = %v: fn's failure must not look like a skip or a lost lease", err)
	}
	if !strings.Contains(err.Error(), "page 3: sweep broke") {
		t.Errorf("Do = %q, want fn's text in it", err)
	}
	f := spy.wantOneFinish(t, id, runclaim.StatusFailed, "page 3: sweep broke")
	if f.req.Error != "page 3: sweep broke" {
		t.Errorf("recorded error text %q, want exactly fn's error text", f.req.Error)
	}
	wantRecorded(t, spy, f.req)
}

func TestDoSkipped(t *testing.T) {
	mem := runclaim.NewMemoryStore()
	holder := doClaimer(t, mem, runclaim.WithOwner("holder"))
	run, err := holder.Claim(t.Context(), "src")
	if err != nil {
		t.Fatal(err)
	}

	spy := newSpyStore(mem)
	c := doClaimer(t, spy, runclaim.WithOwner("late"))
	called := false
	err = c.Do(t.Context(), "src", func(context.Context, *runclaim.Run) error {
		called = true
		return nil
	})
	if called {
		t.Error("fn was called for a skipped claim")
	}
	var nc *runclaim.NotClaimedError
	if !errors.Is(err, runclaim.ErrNotClaimed) || !errors.Is(err, runclaim.ErrAlreadyRunning) || !errors.As(err, &nc) {
		t.Fatalf("Do = %v, want ErrNotClaimed, ErrAlreadyRunning and a *NotClaimedError", err)
	}
	if nc.Holder == nil || nc.Holder.ID != run.ID || nc.Holder.Owner != "holder" {
		t.Errorf("skip names holder %+v, want run %d by holder", nc.Holder, run.ID)
	}
	if n := len(spy.finishCalls()); n != 0 {
		t.Errorf("a skipped Do sent %d Finish calls", n)
	}
	if err := run.Finish(t.Context(), nil); err != nil {
		t.Fatal(err)
	}

	// Too soon is a skip too.
	paced := doClaimer(t, mem, runclaim.WithMinInterval(time.Hour))
	if err := paced.Do(t.Context(), "paced", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err = paced.Do(t.Context(), "paced", func(context.Context, *runclaim.Run) error {
		t.Error("fn was called for a too-soon claim")
		return nil
	})
	if !errors.Is(err, runclaim.ErrNotClaimed) || !errors.Is(err, runclaim.ErrTooSoon) {
		t.Fatalf("Do = %v, want ErrTooSoon", err)
	}
}

// A claim that fails for real is returned as is, and fn is not called.
func TestDoClaimFails(t *testing.T) {
	errDown := errors.New("database is down")
	spy := newSpyStore(runclaim.NewMemoryStore())
	spy.setClaim(func(context.Context, runclaim.ClaimRequest) (runclaim.RunInfo, error) {
		return runclaim.RunInfo{}, fmt.Errorf("claim: %w", errDown)
	})
	c := doClaimer(t, spy)
	fn := func(context.Context, *runclaim.Run) error {
		t.Error("fn was called without a run")
		return nil
	}
	if err := c.Do(t.Context(), "src", fn); !errors.Is(err, errDown) || errors.Is(err, runclaim.ErrNotClaimed) {
		t.Errorf("Do = %v, want the store's error and no skip", err)
	}
	if err := c.Do(t.Context(), "", fn); !errors.Is(err, runclaim.ErrInvalidSource) {
		t.Errorf("Do with an empty source = %v, want ErrInvalidSource", err)
	}
	if n := len(spy.finishCalls()); n != 0 {
		t.Errorf("a failed claim sent %d Finish calls", n)
	}
}

func TestDoNilArguments(t *testing.T) {
	mem := runclaim.NewMemoryStore()
	c := doClaimer(t, mem)
	if err := c.Do(t.Context(), "src", nil); err == nil || !strings.Contains(err.Error(), "nil function") {
		t.Errorf("Do with a nil fn = %v, want an error about the nil function", err)
	}
	//lint:ignore SA1012 the nil-context guard is under test
	err := c.Do(nil, "src", func(context.Context, *runclaim.Run) error {
		t.Error("fn was called with a nil context")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Errorf("Do with a nil context = %v, want an error about the nil context", err)
	}
	// Neither claimed the source.
	run, err := c.Claim(t.Context(), "src")
	if err != nil {
		t.Fatalf("claim after the refused calls: %v", err)
	}
	if err := run.Finish(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
}

// Heartbeats keep a run alive past several leases: while fn works for three
// leases, another replica's claims are refused, also after the first lease
// ended, and fn's context stays live.
//
// It runs in a synctest bubble: its timers and leases pass in no real time,
// and a busy machine cannot starve its heartbeats.
func TestDoHeartbeatsKeepRunAlive(t *testing.T) { synctest.Test(t, testDoHeartbeatsKeepRunAlive) }

func testDoHeartbeatsKeepRunAlive(t *testing.T) {
	const lease = 300 * time.Millisecond
	mem := runclaim.NewMemoryStore() // the real clock: leases end on their own
	spy := newSpyStore(mem)
	c := doClaimer(t, spy, runclaim.WithLease(lease), runclaim.WithHeartbeat(lease/6), runclaim.WithOwner("worker"))
	other := doClaimer(t, mem, runclaim.WithLease(lease), runclaim.WithOwner("other"))

	var refusedAfterLease int
	var id int64
	err := c.Do(t.Context(), "src", func(ctx context.Context, run *runclaim.Run) error {
		id = run.ID
		work := time.NewTimer(3 * lease) // the job itself
		defer work.Stop()
		probe := time.NewTicker(lease / 6)
		defer probe.Stop()
		for {
			select {
			case <-work.C:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("fn's context ended while heartbeats should keep it alive: %w", context.Cause(ctx))
			case <-probe.C:
				sent := time.Now()
				_, err := other.Claim(ctx, "src")
				var nc *runclaim.NotClaimedError
				if !errors.As(err, &nc) || nc.Holder == nil || nc.Holder.ID != run.ID {
					return fmt.Errorf("another replica's claim at %v: %v, want a skip naming run %d", sent, err, run.ID)
				}
				if sent.After(run.LeaseUntil) {
					refusedAfterLease++
				}
			}
		}
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if refusedAfterLease == 0 {
		t.Error("no claim was tried after the first lease ended")
	}
	if n := spy.heartbeats(); n < 3 {
		t.Errorf("%d heartbeats in three leases, want at least 3", n)
	}
	t.Logf("%d heartbeats, %d claims refused after the first lease ended", spy.heartbeats(), refusedAfterLease)
	spy.wantOneFinish(t, id, runclaim.StatusSucceeded, "")
}

// One failed heartbeat does not lose the run: the next one extends it.
//
// It runs in a synctest bubble: its timers and leases pass in no real time,
// and a busy machine cannot starve its heartbeats.
func TestDoHeartbeatFailsOnce(t *testing.T) { synctest.Test(t, testDoHeartbeatFailsOnce) }

func testDoHeartbeatFailsOnce(t *testing.T) {
	mem := runclaim.NewMemoryStore()
	spy := newSpyStore(mem)
	errBlip := errors.New("connection reset")
	var calls atomic.Int32
	recovered := make(chan struct{})
	spy.setHeartbeat(func(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
		switch calls.Add(1) {
		case 1:
			return time.Time{}, errBlip
		case 3:
			// Do sends one heartbeat at a time, so the second one, which
			// succeeded, has been fully handled.
			close(recovered)
		}
		return mem.Heartbeat(ctx, req)
	})
	failures := make(chan error, 10)
	c := doClaimer(t, spy, runclaim.WithLease(time.Second), runclaim.WithHeartbeat(20*time.Millisecond),
		runclaim.WithHooks(runclaim.Hooks{HeartbeatFailed: func(e runclaim.Event) { trySend(failures, e.Err) }}))

	err := c.Do(t.Context(), "src", func(ctx context.Context, run *runclaim.Run) error {
		awaitRecv(t, recovered, doWait, "a successful heartbeat after the failed one")
		deadline := run.Deadline()
		if !deadline.After(run.LeaseUntil) {
			t.Errorf("deadline %v not extended past the claim's lease end %v", deadline, run.LeaseUntil)
		}
		return context.Cause(ctx)
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got := awaitRecv(t, failures, doWait, "the HeartbeatFailed hook"); !errors.Is(got, errBlip) {
		t.Errorf("HeartbeatFailed got %v, want the injected error", got)
	}
}

// A partitioned holder: its heartbeats and its finish fail without reaching
// the store (an injected error, not ErrLeaseLost). fn's context is
// cancelled, with cause ErrLeaseLost, before the lease ends by the store's
// clock; another replica's claims are refused until the lease ends, and
// then one takes the source over.
//
// It runs in a synctest bubble: its timers and leases pass in no real time,
// and a busy machine cannot starve its heartbeats.
func TestDoPartitionedHolder(t *testing.T) { synctest.Test(t, testDoPartitionedHolder) }

func testDoPartitionedHolder(t *testing.T) {
	const lease = 300 * time.Millisecond
	mem := runclaim.NewMemoryStore() // its clock is time.Now: comparable with the test's
	spy := newSpyStore(mem)
	errPartition := errors.New("network is unreachable")
	spy.setHeartbeat(func(context.Context, runclaim.HeartbeatRequest) (time.Time, error) {
		return time.Time{}, errPartition
	})
	spy.setFinish(func(context.Context, runclaim.FinishRequest) error { return errPartition })
	lost := make(chan runclaim.Event, 1)
	// Frequent heartbeats leave Do a wide margin (see Claimer.ExpiryMargin), so the
	// cancellation is seen in time even on a loaded machine.
	c := doClaimer(t, spy, runclaim.WithLease(lease), runclaim.WithHeartbeat(lease/20), runclaim.WithOwner("partitioned"),
		runclaim.WithHooks(runclaim.Hooks{LeaseLost: func(e runclaim.Event) { trySend(lost, e) }}))
	other := doClaimer(t, mem, runclaim.WithLease(time.Minute), runclaim.WithOwner("other"))

	type observed struct {
		run   *runclaim.Run
		at    time.Time
		cause error
	}
	started := make(chan *runclaim.Run, 1)
	cancelled := make(chan observed, 1)
	done := goDo(t.Context(), c, "src", func(ctx context.Context, run *runclaim.Run) error {
		started <- run
		timeout := time.NewTimer(doWait)
		defer timeout.Stop()
		select {
		case <-ctx.Done():
			cancelled <- observed{run, time.Now(), context.Cause(ctx)}
			return ctx.Err()
		case <-timeout.C:
			return errors.New("fn's context was never cancelled")
		}
	})
	run := awaitRecv(t, started, doWait, "fn to start")

	// Another replica tries all along; it gets the source only once the
	// lease has ended by the store's clock.
	var refused int
	tick := time.NewTicker(lease / 30)
	defer tick.Stop()
	giveUp := time.NewTimer(doWait)
	defer giveUp.Stop()
	var taken *runclaim.Run
	for taken == nil {
		r, err := other.Claim(t.Context(), "src")
		switch {
		case err == nil:
			taken = r
			continue
		case !errors.Is(err, runclaim.ErrAlreadyRunning):
			t.Fatalf("other's claim: %v", err)
		}
		refused++
		select {
		case <-tick.C:
		case <-giveUp.C:
			t.Fatalf("the source was not taken over within %v of a %v lease", doWait, lease)
		}
	}
	if taken.StartedAt.Before(run.LeaseUntil) {
		t.Errorf("run %d took over at %v, before the partitioned run's lease ended at %v", taken.ID, taken.StartedAt, run.LeaseUntil)
	}
	if refused == 0 {
		t.Error("no claim was refused while the partitioned run held its lease")
	}

	obs := awaitRecv(t, cancelled, doWait, "fn's context to be cancelled")
	if !errors.Is(obs.cause, runclaim.ErrLeaseLost) {
		t.Errorf("fn's context cause = %v, want ErrLeaseLost", obs.cause)
	}
	if !obs.at.Before(run.LeaseUntil) {
		t.Errorf("fn saw its context cancelled at %v, not before the lease ended at %v by the store's clock", obs.at, run.LeaseUntil)
	}
	t.Logf("cancelled %v before the lease ended; taken over %v after it; %d claims refused",
		run.LeaseUntil.Sub(obs.at), taken.StartedAt.Sub(run.LeaseUntil), refused)

	err := awaitRecv(t, done, doWait, "Do to return")
	if !errors.Is(err, runclaim.ErrLeaseLost) || !errors.Is(err, context.Canceled) || !errors.Is(err, errPartition) {
		t.Errorf("Do = %v, want ErrLeaseLost, fn's context.Canceled and the failed finish's error", err)
	}
	if e := awaitRecv(t, lost, doWait, "the LeaseLost hook"); e.Run != run || !errors.Is(e.Err, runclaim.ErrLeaseLost) {
		t.Errorf("LeaseLost hook got run %p cause %v, want run %p and ErrLeaseLost", e.Run, e.Err, run)
	}
	if spy.heartbeats() == 0 {
		t.Error("no heartbeat was tried")
	}
	f := spy.wantOneFinish(t, run.ID, runclaim.StatusFailed, "lease lost")
	if !errors.Is(f.err, errPartition) {
		t.Errorf("the finish returned %v, want the injected error", f.err)
	}
	if err := taken.Finish(t.Context(), nil); err != nil {
		t.Errorf("the new holder's Finish: %v", err)
	}
}

// A holder whose run another claimer expired: its next heartbeat finds the
// run gone and cancels fn's context with cause ErrLeaseLost. The store's
// clock is a manual one, so the lease ends exactly when the test says.
//
// It runs in a synctest bubble: its timers and leases pass in no real time,
// and a busy machine cannot starve its heartbeats.
func TestDoRunTakenOver(t *testing.T) { synctest.Test(t, testDoRunTakenOver) }

func testDoRunTakenOver(t *testing.T) {
	clk := newManualClock()
	mem := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
	spy := newSpyStore(mem)
	lost := make(chan runclaim.Event, 1)
	// The lease is long by the local clock, so only the store can end it;
	// heartbeats are frequent, so the loss is noticed at once.
	c := doClaimer(t, spy, runclaim.WithLease(time.Minute), runclaim.WithHeartbeat(10*time.Millisecond), runclaim.WithOwner("slow"),
		runclaim.WithHooks(runclaim.Hooks{LeaseLost: func(e runclaim.Event) { trySend(lost, e) }}))
	other := doClaimer(t, mem, runclaim.WithLease(time.Minute), runclaim.WithOwner("other"))

	started := make(chan *runclaim.Run, 1)
	cause := make(chan error, 1)
	done := goDo(t.Context(), c, "src", func(ctx context.Context, run *runclaim.Run) error {
		started <- run
		timeout := time.NewTimer(doWait)
		defer timeout.Stop()
		select {
		case <-ctx.Done():
			cause <- context.Cause(ctx)
			return ctx.Err()
		case <-timeout.C:
			return errors.New("fn's context was never cancelled")
		}
	})
	run := awaitRecv(t, started, doWait, "fn to start")

	if _, err := other.Claim(t.Context(), "src"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("claim during the lease: %v, want ErrAlreadyRunning", err)
	}
	clk.Advance(2 * time.Minute) // past any lease a heartbeat gave it
	taken, err := other.Claim(t.Context(), "src")
	if err != nil {
		t.Fatalf("claim after the lease: %v", err)
	}

	if got := awaitRecv(t, cause, doWait, "fn's context to be cancelled"); !errors.Is(got, runclaim.ErrLeaseLost) {
		t.Errorf("fn's context cause = %v, want ErrLeaseLost", got)
	}
	err = awaitRecv(t, done, doWait, "Do to return")
	if !errors.Is(err, runclaim.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
		t.Errorf("Do = %v, want ErrLeaseLost and fn's context.Canceled", err)
	}
	if e := awaitRecv(t, lost, doWait, "the LeaseLost hook"); e.Run != run {
		t.Errorf("LeaseLost hook got run %p, want %p", e.Run, run)
	}
	// Do tried to record the failure; the store refused, as the run is gone.
	f := spy.wantOneFinish(t, run.ID, runclaim.StatusFailed, "lease lost")
	if !errors.Is(f.err, runclaim.ErrLeaseLost) {
		t.Errorf("Finish of the lost run returned %v, want ErrLeaseLost", f.err)
	}
	// The new holder was not disturbed.
	if err := taken.Heartbeat(t.Context()); err != nil {
		t.Errorf("the new holder's heartbeat: %v", err)
	}
	if err := taken.Finish(t.Context(), nil); err != nil {
		t.Errorf("the new holder's Finish: %v", err)
	}
}

// panicValue is compared by identity: Do must re-panic with the very value.
type panicValue struct{ msg string }

func (p *panicValue) String() string { return p.msg }

// A panic in fn is recorded as failed and re-panicked with the same value,
// and Do has stopped its heartbeat goroutine, with a heartbeat in flight,
// by then. The same holds when fn returns normally.
func TestDoStopsHeartbeatsBeforeReturning(t *testing.T) {
	for _, panics := range []bool{true, false} {
		name := "returns"
		if panics {
			name = "panics"
		}
		t.Run(name, func(t *testing.T) {
			mem := runclaim.NewMemoryStore()
			spy := newSpyStore(mem)
			var inFlight atomic.Int32
			hbStarted := make(chan struct{}, 1)
			// The heartbeat hangs until Do gives up on it.
			spy.setHeartbeat(func(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
				inFlight.Add(1)
				defer inFlight.Add(-1)
				select {
				case hbStarted <- struct{}{}:
				default:
				}
				<-ctx.Done()
				return time.Time{}, ctx.Err()
			})
			c := doClaimer(t, spy, runclaim.WithLease(time.Minute), runclaim.WithHeartbeat(5*time.Millisecond))
			val := &panicValue{"index out of range"}

			var id int64
			var recovered any
			var err error
			func() {
				defer func() { recovered = recover() }()
				err = c.Do(t.Context(), "src", func(ctx context.Context, run *runclaim.Run) error {
					id = run.ID
					awaitRecv(t, hbStarted, doWait, "a heartbeat to start")
					if panics {
						panic(val)
					}
					return nil
				})
			}()
			if n := inFlight.Load(); n != 0 {
				t.Errorf("%d heartbeats still in flight after Do ended", n)
			}
			if panics {
				if recovered != val {
					t.Fatalf("Do re-panicked with %#v, want the very value fn panicked with", recovered)
				}
				f := spy.wantOneFinish(t, id, runclaim.StatusFailed, "panic: index out of range")
				wantRecorded(t, spy, f.req)
				return
			}
			if recovered != nil || err != nil {
				t.Fatalf("Do = %v, panic %v; want nil", err, recovered)
			}
			spy.wantOneFinish(t, id, runclaim.StatusSucceeded, "")
		})
	}
}

// A panic with an error value is recorded with the error's text.
func TestDoPanicWithError(t *testing.T) {
	spy := newSpyStore(runclaim.NewMemoryStore())
	c := doClaimer(t, spy)
	var id int64
	defer func() {
		if got := recover(); got != errSweep {
			t.Fatalf("re-panicked with %#v, want errSweep", got)
		}
		spy.wantOneFinish(t, id, runclaim.StatusFailed, "panic: sweep broke")
	}()
	_ = c.Do(t.Context(), "src", func(ctx context.Context, run *runclaim.Run) error {
		id = run.ID
		panic(errSweep)
	})
	t.Fatal("Do returned instead of re-panicking")
}

// Cancelling Do's context cancels fn's, and the run is still recorded as
// failed with the cause: the finish runs on a context without the
// cancellation.
func TestDoParentCancelled(t *testing.T) {
	errShutdown := errors.New("shutting down")
	for _, tc := range []struct {
		name   string
		fnErr  func(ctx context.Context) error // fn's result once its context ended
		record string                          // in the recorded error text
	}{
		{"fn returns ctx.Err", func(ctx context.Context) error { return ctx.Err() }, "context canceled (cause: shutting down)"},
		{"fn returns the cause", func(ctx context.Context) error { return context.Cause(ctx) }, "shutting down"},
		{"fn returns nil", func(context.Context) error { return nil }, "cancelled: shutting down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spy := newSpyStore(runclaim.NewMemoryStore())
			c := doClaimer(t, spy)
			parent, cancel := context.WithCancelCause(t.Context())
			defer cancel(nil)

			started := make(chan *runclaim.Run, 1)
			seen := make(chan error, 1)
			done := goDo(parent, c, "src", func(ctx context.Context, run *runclaim.Run) error {
				started <- run
				timeout := time.NewTimer(doWait)
				defer timeout.Stop()
				select {
				case <-ctx.Done():
					seen <- context.Cause(ctx)
					return tc.fnErr(ctx)
				case <-timeout.C:
					return errors.New("fn's context was never cancelled")
				}
			})
			run := awaitRecv(t, started, doWait, "fn to start")
			cancel(errShutdown)

			if got := awaitRecv(t, seen, doWait, "fn's context to be cancelled"); got != errShutdown {
				t.Errorf("fn's context cause = %v, want the parent's", got)
			}
			err := awaitRecv(t, done, doWait, "Do to return")
			if !errors.Is(err, errShutdown) || errors.Is(err, runclaim.ErrLeaseLost) {
				t.Errorf("Do = %v, want the parent's cause and no lost lease", err)
			}
			f := spy.wantOneFinish(t, run.ID, runclaim.StatusFailed, tc.record)
			if f.err != nil {
				t.Errorf("Finish after the cancellation: %v", f.err)
			}
			wantRecorded(t, spy, f.req)
		})
	}
}

// Do's context ending before the claim is an error from the claim, not a
// skip, and fn is not called.
func TestDoContextCancelledBeforeClaim(t *testing.T) {
	c := doClaimer(t, runclaim.NewMemoryStore())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := c.Do(ctx, "src", func(context.Context, *runclaim.Run) error {
		t.Error("fn was called on a cancelled context")
		return nil
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, runclaim.ErrNotClaimed) {
		t.Errorf("Do = %v, want context.Canceled and no skip", err)
	}
}

func TestWithHeartbeatValidation(t *testing.T) {
	mem := runclaim.NewMemoryStore()
	for _, tc := range []struct {
		lease, heartbeat time.Duration
		ok               bool
	}{
		{time.Second, 499 * time.Millisecond, true},
		{time.Second, time.Millisecond, true},
		{time.Second, 500 * time.Millisecond, false}, // lease/2: one missed beat would lose the run
		{time.Second, 600 * time.Millisecond, false},
		{time.Second, 2 * time.Second, false},
		{time.Second, 0, false},
		{time.Second, -time.Second, false},
		{0, 15 * time.Second, false}, // the default lease, 30s
		{0, 14 * time.Second, true},
	} {
		opts := []runclaim.Option{runclaim.WithHeartbeat(tc.heartbeat)}
		if tc.lease != 0 {
			opts = append(opts, runclaim.WithLease(tc.lease))
		}
		c, err := runclaim.New(mem, opts...)
		switch {
		case tc.ok && err != nil:
			t.Errorf("lease %v heartbeat %v: %v", tc.lease, tc.heartbeat, err)
		case tc.ok && c.Settings().HeartbeatInterval != tc.heartbeat:
			t.Errorf("lease %v heartbeat %v: HeartbeatInterval() = %v", tc.lease, tc.heartbeat, c.Settings().HeartbeatInterval)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "WithHeartbeat")):
			t.Errorf("lease %v heartbeat %v: New = %v, want an error naming WithHeartbeat", tc.lease, tc.heartbeat, err)
		}
	}
	// The default is a third of the lease, whichever way the options come.
	for _, opts := range [][]runclaim.Option{
		{runclaim.WithLease(900 * time.Millisecond)},
		{runclaim.WithLease(900 * time.Millisecond), runclaim.WithHeartbeat(300 * time.Millisecond)},
		{runclaim.WithHeartbeat(300 * time.Millisecond), runclaim.WithLease(900 * time.Millisecond)},
	} {
		c := doClaimer(t, mem, opts...)
		if got := c.Settings().HeartbeatInterval; got != 300*time.Millisecond {
			t.Errorf("HeartbeatInterval() = %v, want 300ms", got)
		}
	}
	if got := doClaimer(t, mem).Settings().HeartbeatInterval; got != runclaim.DefaultLease/3 {
		t.Errorf("default HeartbeatInterval() = %v, want %v", got, runclaim.DefaultLease/3)
	}
}

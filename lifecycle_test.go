package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runclaim/runclaim"
)

// These tests cover the edges of a run's life that a redeploy reaches: a
// graceful shutdown while fn winds down, a heartbeat that hangs, racing
// Finish calls, a lease that lapses without a takeover, fn leaving through
// runtime.Goexit, and a panic's stack. They use the memory store, which has
// the Postgres store's semantics; lifecycle_pg_test.go repeats the
// store-specific ones on Postgres.

// probeHeld claims source with other every step until stop is closed, and
// returns an error for the first claim that was not skipped as
// ErrAlreadyRunning naming holder. It returns how many claims were refused.
func probeHeld(ctx context.Context, other *runclaim.Claimer, source string, holder int64, step time.Duration, stop <-chan struct{}) (int, error) {
	tick := time.NewTicker(step)
	defer tick.Stop()
	refused := 0
	for {
		select {
		case <-stop:
			return refused, nil
		case <-tick.C:
		}
		run, err := other.Claim(ctx, source)
		if err == nil {
			_ = run.Finish(ctx, errors.New("probe"))
			return refused, fmt.Errorf("another replica claimed %q as run %d while run %d was still running", source, run.ID, holder)
		}
		var nc *runclaim.NotClaimedError
		if !errors.As(err, &nc) || !errors.Is(err, runclaim.ErrAlreadyRunning) || nc.Holder == nil || nc.Holder.ID != holder {
			return refused, fmt.Errorf("another replica's claim: %v, want a skip naming run %d", err, holder)
		}
		refused++
	}
}

// shutdownWhileWindingDown runs the graceful-shutdown scenario against a
// store: Do's ctx is cancelled (SIGTERM in a redeploy), fn sees it at once
// but takes three leases to wind down, and meanwhile another replica's
// claims must all be refused. The run is then recorded as failed
// ("cancelled"), not lost.
func shutdownWhileWindingDown(t *testing.T, store runclaim.Store, lease time.Duration) {
	t.Helper()
	var lost atomic.Int32
	c := doClaimer(t, store, runclaim.WithLease(lease), runclaim.WithOwner("old-replica"),
		runclaim.WithHooks(runclaim.Hooks{LeaseLost: func(runclaim.Event) { lost.Add(1) }}))
	other := doClaimer(t, store, runclaim.WithLease(lease), runclaim.WithOwner("new-replica"))
	source := "shutdown/" + t.Name()

	ctx, sigterm := context.WithCancel(t.Context())
	defer sigterm()
	started := make(chan *runclaim.Run, 1)
	windDown := make(chan struct{})
	var sawCause error
	done := goDo(ctx, c, source, func(ctx context.Context, run *runclaim.Run) error {
		started <- run
		<-ctx.Done()
		sawCause = context.Cause(ctx)
		<-windDown // flushing, closing, writing a checkpoint...
		return ctx.Err()
	})
	run := awaitRecv(t, started, doWait, "fn to start")
	sigterm()

	stop := make(chan struct{})
	time.AfterFunc(3*lease, func() { close(stop) })
	refused, err := probeHeld(t.Context(), other, source, run.ID, lease/10, stop)
	close(windDown)
	doErr := awaitRecv(t, done, doWait, "Do to return")
	if err != nil {
		t.Fatal(err)
	}
	if refused == 0 {
		t.Fatal("no claim was tried while fn wound down")
	}
	if !errors.Is(sawCause, context.Canceled) || errors.Is(sawCause, runclaim.ErrLeaseLost) {
		t.Errorf("fn's context cause = %v, want the shutdown (context.Canceled), not a lost lease", sawCause)
	}
	if n := lost.Load(); n != 0 {
		t.Errorf("LeaseLost fired %d times for a run kept alive through the shutdown", n)
	}
	if !errors.Is(doErr, context.Canceled) || errors.Is(doErr, runclaim.ErrLeaseLost) {
		t.Errorf("Do = %v, want the cancellation, recorded", doErr)
	}
	t.Logf("%d claims refused during a wind-down of 3 leases", refused)
}

// Rule: a run is kept alive until fn returns, whatever happens to Do's ctx.
// In a synctest bubble: the three leases of wind-down pass in no real time,
// however busy the machine.
func TestDoKeepsRunAliveThroughShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shutdownWhileWindingDown(t, runclaim.NewMemoryStore(), time.Minute)
	})
}

// KeepAlive follows the same rule: the heartbeats go on after ctx ends,
// until stop, so that a scheduler's lock outlives the job's cancelled
// context while the job winds down.
// In a synctest bubble, as above.
func TestKeepAliveOutlivesContext(t *testing.T) {
	synctest.Test(t, keepAliveOutlivesContext)
}

func keepAliveOutlivesContext(t *testing.T) {
	const lease = time.Minute
	mem := runclaim.NewMemoryStore()
	c := doClaimer(t, mem, runclaim.WithLease(lease))
	other := doClaimer(t, mem, runclaim.WithLease(lease), runclaim.WithOwner("other"))
	run, err := c.Claim(t.Context(), "src")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	runCtx, stop := run.KeepAlive(ctx)
	cancel()
	if !errors.Is(context.Cause(runCtx), context.Canceled) {
		t.Fatalf("KeepAlive's context cause = %v after its parent was cancelled", context.Cause(runCtx))
	}
	probeStop := make(chan struct{})
	time.AfterFunc(3*lease, func() { close(probeStop) })
	refused, err := probeHeld(t.Context(), other, "src", run.ID, lease/10, probeStop)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if refused == 0 {
		t.Fatal("no claim was tried")
	}
	if err := run.Finish(t.Context(), nil); err != nil {
		t.Errorf("Finish after three leases kept alive by KeepAlive: %v", err)
	}
}

// hangingHeartbeats makes the spy's first heartbeats hang. With honour, a
// hung attempt returns when its context ends (as a pgx query on a dead
// connection does); without, it returns only after ignore, as a Store that
// ignores ctx would. It returns a counter of hung attempts.
func hangingHeartbeats(spy *spyStore, mem runclaim.Store, hung int32, honour bool, ignore time.Duration) *atomic.Int32 {
	var calls, hanging atomic.Int32
	spy.setHeartbeat(func(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
		if calls.Add(1) > hung {
			return mem.Heartbeat(ctx, req)
		}
		hanging.Add(1)
		if honour {
			<-ctx.Done()
			return time.Time{}, fmt.Errorf("read tcp: i/o timeout: %w", ctx.Err())
		}
		time.Sleep(ignore)
		return time.Time{}, errors.New("answered far too late")
	})
	return &hanging
}

// Rule: each heartbeat attempt is bounded, and a late one is abandoned and
// retried, so one hung heartbeat does not lose a healthy run. In a synctest
// bubble: a lease of a minute, and a hang of three, in no real time.
func TestDoHungHeartbeat(t *testing.T) {
	for _, honour := range []bool{true, false} {
		name := "store honours ctx"
		if !honour {
			name = "store ignores ctx"
		}
		t.Run(name, func(t *testing.T) { synctest.Test(t, func(t *testing.T) { doHungHeartbeat(t, honour) }) })
	}
}

func doHungHeartbeat(t *testing.T, honour bool) {
	const lease = time.Minute
	mem := runclaim.NewMemoryStore()
	spy := newSpyStore(mem)
	hung := hangingHeartbeats(spy, mem, 1, honour, 3*lease)
	var lost, failed atomic.Int32
	c := doClaimer(t, spy, runclaim.WithLease(lease), runclaim.WithHooks(runclaim.Hooks{
		LeaseLost:       func(runclaim.Event) { lost.Add(1) },
		HeartbeatFailed: func(runclaim.Event) { failed.Add(1) },
	}))
	err := c.Do(t.Context(), "src", func(ctx context.Context, run *runclaim.Run) error {
		work := time.NewTimer(4 * lease)
		defer work.Stop()
		select {
		case <-work.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("fn's context ended: %w", context.Cause(ctx))
		}
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if hung.Load() != 1 || failed.Load() == 0 {
		t.Fatalf("%d heartbeats hung and %d were reported failed; the scenario did not happen", hung.Load(), failed.Load())
	}
	if lost.Load() != 0 {
		t.Errorf("LeaseLost fired for a run whose store was healthy")
	}
}

// Rule: when every heartbeat hangs, Do cancels fn's context with
// ErrLeaseLost at the lease's end by the holder's clock less the expiry
// margin, (lease − 2·heartbeat)/4, and records the run as failed (G3). In a
// synctest bubble the claim takes no time, so the moment is exact; the
// Postgres form of this test (TestDoCancelsAtLocalLeaseEnd) checks the
// same against a real database with bounds instead.
func TestDoCancelsAtLocalLeaseEndMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease, heartbeat = time.Minute, 3 * time.Second
		mem := runclaim.NewMemoryStore()
		spy := newSpyStore(mem)
		hung := hangingHeartbeats(spy, mem, math.MaxInt32, true, 0)
		c := doClaimer(t, spy, runclaim.WithLease(lease), runclaim.WithHeartbeat(heartbeat))
		start := time.Now()
		var id int64
		var after time.Duration
		var cause error
		err := c.Do(t.Context(), "src", func(ctx context.Context, run *runclaim.Run) error {
			id = run.ID
			<-ctx.Done()
			after, cause = time.Since(start), context.Cause(ctx)
			return ctx.Err()
		})
		if !errors.Is(err, runclaim.ErrLeaseLost) || !errors.Is(cause, runclaim.ErrLeaseLost) {
			t.Errorf("Do = %v, fn's cause %v; want ErrLeaseLost for both", err, cause)
		}
		if want := lease - (lease-2*heartbeat)/4; after != want {
			t.Errorf("fn's context ended %v after the claim, want exactly %v", after, want)
		}
		if hung.Load() < 2 {
			t.Errorf("%d heartbeats hung; the scenario did not happen", hung.Load())
		}
		spy.wantOneFinish(t, id, runclaim.StatusFailed, "lease")
	})
}

// Rule: Finish called twice at once with the same outcome returns nil to
// both callers, and no LeaseLost event fires.
func TestRunFinishConcurrent(t *testing.T) {
	var lost atomic.Int32
	c := doClaimer(t, runclaim.NewMemoryStore(), runclaim.WithHooks(runclaim.Hooks{LeaseLost: func(runclaim.Event) { lost.Add(1) }}))
	finishConcurrently(t, c)
	if lost.Load() != 0 {
		t.Errorf("LeaseLost fired for a run that finished")
	}
}

// finishConcurrently claims a run with c and has eight goroutines finish it
// at once, four times over.
func finishConcurrently(t *testing.T, c *runclaim.Claimer) {
	t.Helper()
	for round := range 4 {
		run, err := c.Claim(t.Context(), fmt.Sprintf("finish-race-%d", round))
		if err != nil {
			t.Fatal(err)
		}
		for i, err := range atOnce(8, func() error { return run.Finish(t.Context(), nil) }) {
			if err != nil {
				t.Errorf("round %d: Finish #%d: %v", round, i, err)
			}
		}
	}
}

// atOnce calls f from n goroutines released together and returns what
// each call returned.
func atOnce(n int, f func() error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			<-start
			errs[i] = f()
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// Rule: a lease that has ended by the store's clock is lost, whether or not
// a claim has expired the run yet. Heartbeat returns ErrLeaseLost; Finish
// returns ErrLeaseLost and records the run as expired.
func TestMemoryStoreLapsedLease(t *testing.T) {
	clk := newManualClock()
	s := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
	ctx := t.Context()
	const lease = time.Minute

	a := memMustClaim(t, s, "src", "a", lease, 0)
	clk.Advance(lease)
	if _, err := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: lease}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Fatalf("Heartbeat at the lease end = %v, want ErrLeaseLost", err)
	}
	if err := s.Finish(ctx, runclaim.FinishRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Status: runclaim.StatusSucceeded}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Fatalf("Finish at the lease end = %v, want ErrLeaseLost", err)
	}
	// Retried, the Finish still says the same.
	if err := s.Finish(ctx, runclaim.FinishRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Status: runclaim.StatusSucceeded}); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Fatalf("a retried Finish after the lease end = %v, want ErrLeaseLost", err)
	}
	// The source is free for the next claim.
	b := memMustClaim(t, s, "src", "b", lease, 0)
	if b.ID <= a.ID {
		t.Fatalf("run IDs %d then %d", a.ID, b.ID)
	}
}

// Rule: Heartbeat and Finish give the same answer for a lapsed run whether
// or not a claim expired it in between.
func TestMemoryStoreLapsedLeaseSameWithTakeover(t *testing.T) {
	for _, takeover := range []bool{false, true} {
		clk := newManualClock()
		s := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
		ctx := t.Context()
		a := memMustClaim(t, s, "src", "a", time.Minute, 0)
		clk.Advance(2 * time.Minute)
		if takeover {
			memMustClaim(t, s, "src", "b", time.Minute, 0)
		}
		_, hbErr := s.Heartbeat(ctx, runclaim.HeartbeatRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Lease: time.Minute})
		finErr := s.Finish(ctx, runclaim.FinishRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Status: runclaim.StatusFailed, Error: "late"})
		if !errors.Is(hbErr, runclaim.ErrLeaseLost) || !errors.Is(finErr, runclaim.ErrLeaseLost) {
			t.Errorf("takeover=%v: Heartbeat %v, Finish %v; want ErrLeaseLost from both", takeover, hbErr, finErr)
		}
	}
}

// Rule: a claim skipped because the minimum interval has not passed writes
// nothing, even when the source's running run has lapsed: its holder's
// Heartbeat says the same before and after the skip.
func TestMemoryStoreTooSoonWritesNothing(t *testing.T) {
	clk := newManualClock()
	s := runclaim.NewMemoryStore(runclaim.WithClock(clk.Now))
	ctx := t.Context()
	a := memMustClaim(t, s, "src", "a", time.Minute, time.Hour)
	clk.Advance(2 * time.Minute)
	_, err := memClaim(t, s, "src", "b", time.Minute, time.Hour)
	nc := memWantSkip(t, err, runclaim.ErrTooSoon)
	if !nc.RetryAfter.Equal(a.StartedAt.Add(time.Hour)) {
		t.Errorf("RetryAfter = %v, want %v", nc.RetryAfter, a.StartedAt.Add(time.Hour))
	}
	// The lapsed run was not expired by the skip: a Finish records it as
	// expired now, which it could not do if the skip had already.
	err = s.Finish(ctx, runclaim.FinishRequest{ID: a.ID, Source: a.Source, StartedAt: a.StartedAt, Status: runclaim.StatusSucceeded})
	if !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Fatalf("Finish of the lapsed run = %v, want ErrLeaseLost", err)
	}
}

// Rule: fn leaving through runtime.Goexit (t.FailNow in a test's fn) is
// recorded as failed, and Do's heartbeat goroutine is stopped.
//
// It runs in a synctest bubble: its timers and leases pass in no real time,
// and a busy machine cannot starve its heartbeats.
func TestDoGoexit(t *testing.T) { synctest.Test(t, testDoGoexit) }

func testDoGoexit(t *testing.T) {
	mem := runclaim.NewMemoryStore()
	spy := newSpyStore(mem)
	c := doClaimer(t, spy, runclaim.WithLease(time.Minute), runclaim.WithHeartbeat(5*time.Millisecond))
	var id int64
	returned := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = c.Do(t.Context(), "src", func(ctx context.Context, run *runclaim.Run) error {
			id = run.ID
			for spy.heartbeats() == 0 {
				time.Sleep(time.Millisecond)
			}
			runtime.Goexit()
			return nil
		})
		close(returned)
	}()
	awaitRecv(t, exited, doWait, "the goroutine to exit")
	select {
	case <-returned:
		t.Fatal("Do returned after runtime.Goexit")
	default:
	}
	f := spy.wantOneFinish(t, id, runclaim.StatusFailed, "runtime.Goexit")
	wantRecorded(t, spy, f.req)
	beats := spy.heartbeats()
	time.Sleep(50 * time.Millisecond) // ten heartbeat intervals: none may come
	if n := spy.heartbeats(); n != beats {
		t.Errorf("%d heartbeats after Do's goroutine exited", n-beats)
	}
}

// envPanicChild makes the test binary a child that panics inside Do.
const envPanicChild = "RUNCLAIM_TEST_PANIC_CHILD"

// TestDoPanicChild is the child process of TestDoPanicStack.
func TestDoPanicChild(t *testing.T) {
	if os.Getenv(envPanicChild) != "1" {
		t.Skip("a helper process of TestDoPanicStack; it runs only when that test starts it")
	}
	c := doClaimer(t, runclaim.NewMemoryStore())
	_ = c.Do(context.Background(), "src", func(ctx context.Context, run *runclaim.Run) error {
		return deepInFn(run)
	})
}

//go:noinline
func deepInFn(run *runclaim.Run) error {
	var s []int
	_ = s[run.ID+41] // index out of range, in a function the trace must name
	return nil
}

// Rule: a panic in fn is re-panicked so that the crash output shows where
// fn panicked, not only where Do re-panicked.
func TestDoPanicStack(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestDoPanicChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envPanicChild+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child did not crash:\n%s", out)
	}
	text := string(out)
	if !strings.Contains(text, "index out of range [42]") {
		t.Fatalf("the crash output does not show the panic:\n%s", text)
	}
	if !strings.Contains(text, "runclaim_test.deepInFn(") || !strings.Contains(text, "lifecycle_test.go:") {
		t.Errorf("the crash output does not name the function that panicked:\n%s", text)
	}
}

// Rule: Finish gives up after FinishTimeout or at ctx's deadline, whichever
// is later, as its doc says.
func TestFinishDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // of the caller's ctx; 0 for none
		want    time.Duration // the deadline the store sees, from now
	}{
		{"no deadline", 0, runclaim.FinishTimeout},
		{"a shorter deadline", time.Second, runclaim.FinishTimeout},
		{"a later deadline", 3 * runclaim.FinishTimeout, 3 * runclaim.FinishTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := runclaim.NewMemoryStore()
			spy := newSpyStore(mem)
			var got time.Time
			spy.setFinish(func(ctx context.Context, req runclaim.FinishRequest) error {
				got, _ = ctx.Deadline()
				return mem.Finish(ctx, req)
			})
			c := doClaimer(t, spy)
			run, err := c.Claim(t.Context(), "src")
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			before := time.Now()
			if err := run.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if want := before.Add(tc.want); got.Before(want.Add(-time.Second)) || got.After(want.Add(time.Second)) {
				t.Errorf("the store's deadline is %v from the call, want about %v", got.Sub(before), tc.want)
			}
		})
	}
}

// Rule: both stores refuse, before anything is written, an error text that
// no Postgres text column can hold; Claimer's Finish makes any error
// storable first.
func TestFinishRequestText(t *testing.T) {
	for _, text := range []string{"nul\x00byte", "bad \xff utf-8"} {
		req := runclaim.FinishRequest{ID: 1, Source: "src", StartedAt: time.Now(), Status: runclaim.StatusFailed, Error: text}
		if err := req.Validate(); err == nil {
			t.Errorf("FinishRequest.Validate accepted the error text %q", text)
		}
		s := runclaim.NewMemoryStore()
		info := memMustClaim(t, s, "src", "a", time.Minute, 0)
		req.ID = info.ID
		if err := s.Finish(t.Context(), req); err == nil || errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("memory store Finish with error text %q = %v, want a validation error", text, err)
		}
		if err := s.Finish(t.Context(), runclaim.FinishRequest{ID: info.ID, Source: info.Source, StartedAt: info.StartedAt, Status: runclaim.StatusSucceeded}); err != nil {
			t.Errorf("the refused Finish changed the run: %v", err)
		}
	}
	// Through a Claimer the same errors are made storable.
	c := doClaimer(t, runclaim.NewMemoryStore())
	run, err := c.Claim(t.Context(), "src")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(t.Context(), errors.New("nul\x00byte \xff")); err != nil {
		t.Errorf("Run.Finish with an unstorable error text: %v", err)
	}
}

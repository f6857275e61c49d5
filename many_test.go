package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runclaim/runclaim"
)

// manySpy is a MemoryStore whose HeartbeatMany a test can replace, and
// which counts the heartbeat calls that reach it.
type manySpy struct {
	*runclaim.MemoryStore

	single, many atomic.Int32 // Heartbeat and HeartbeatMany calls
	mu           sync.Mutex   // protects beat
	beat         func(ctx context.Context, reqs []runclaim.HeartbeatRequest) ([]runclaim.HeartbeatResult, error)
}

func (s *manySpy) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	s.single.Add(1)
	return s.MemoryStore.Heartbeat(ctx, req)
}

func (s *manySpy) HeartbeatMany(ctx context.Context, reqs []runclaim.HeartbeatRequest) ([]runclaim.HeartbeatResult, error) {
	s.many.Add(1)
	s.mu.Lock()
	f := s.beat
	s.mu.Unlock()
	if f != nil {
		return f(ctx, reqs)
	}
	return s.MemoryStore.HeartbeatMany(ctx, reqs)
}

func (s *manySpy) setBeat(f func(ctx context.Context, reqs []runclaim.HeartbeatRequest) ([]runclaim.HeartbeatResult, error)) {
	s.mu.Lock()
	s.beat = f
	s.mu.Unlock()
}

func sourcesN(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("city-%03d", i)
	}
	return out
}

// ClaimMany refuses bad input before it reaches the store, reports each
// source to ClaimFailed, and claims nothing; an empty list is no call.
func TestClaimManyBadInput(t *testing.T) {
	ctx := t.Context()
	mem := runclaim.NewMemoryStore()
	spy := newSpyStore(mem)
	var failed []string
	var mu sync.Mutex
	c := doClaimer(t, struct{ runclaim.Store }{spy}, runclaim.WithHooks(runclaim.Hooks{ClaimFailed: func(e runclaim.Event) {
		mu.Lock()
		failed = append(failed, e.Source)
		mu.Unlock()
	}}))
	claims := 0
	spy.claim = func(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
		claims++
		return mem.Claim(ctx, req)
	}
	for _, tc := range []struct {
		name    string
		sources []string
		want    string
	}{
		{"a source twice", []string{"a", "b", "a"}, "listed twice"},
		{"an empty source", []string{"a", ""}, "source"},
		{"invalid UTF-8", []string{"a", "\xff"}, "UTF-8"},
		{"too many", sourcesN(runclaim.MaxClaimMany + 1), "MaxClaimMany"},
	} {
		failed = nil
		runs, err := c.ClaimMany(ctx, tc.sources)
		if err == nil || errors.Is(err, runclaim.ErrNotClaimed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ClaimMany with %s: %d runs, %v; want an error saying %q", tc.name, len(runs), err, tc.want)
		}
		if len(tc.sources) <= runclaim.MaxClaimMany && !slices.Equal(failed, tc.sources) {
			t.Errorf("ClaimMany with %s: ClaimFailed for %q, want each source", tc.name, failed)
		}
	}
	if _, err := c.ClaimMany(ctx, []string{"a"}, runclaim.ForTick(time.Time{})); err == nil {
		t.Error("ClaimMany with ForTick of a zero tick: nil error")
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := c.ClaimMany(nil, []string{"a"}); err == nil { //nolint:staticcheck
		t.Error("ClaimMany with a nil context: nil error")
	}
	if runs, err := c.ClaimMany(ctx, nil); err != nil || runs != nil {
		t.Errorf("ClaimMany of no source: %v, %v; want nil, nil", runs, err)
	}
	if claims != 0 {
		t.Errorf("%d claims reached the store", claims)
	}
	if err := c.DoMany(ctx, []string{"a"}, nil); err == nil {
		t.Error("DoMany with a nil function: nil error")
	}
}

// ClaimMany returns the runs won in the order asked, reports each won
// source to Claimed and each skip to Skipped, and the runs are the
// store's.
func TestClaimManyResultAndEvents(t *testing.T) {
	ctx := t.Context()
	mem := runclaim.NewMemoryStore()
	var claimed, skipped []string
	c := doClaimer(t, mem, runclaim.WithOwner("me"), runclaim.WithHooks(runclaim.Hooks{
		Claimed: func(e runclaim.Event) { claimed = append(claimed, e.Run.Source) },
		Skipped: func(e runclaim.Event) { skipped = append(skipped, e.Source) },
	}))
	other := doClaimer(t, mem)
	held, err := other.Claim(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	runs, err := c.ClaimMany(ctx, []string{"d", "b", "a", "c"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.Source)
		if r.Owner != "me" || r.ID <= held.ID {
			t.Errorf("run %d of %q by %q", r.ID, r.Source, r.Owner)
		}
		if err := r.Finish(ctx, nil); err != nil {
			t.Error(err)
		}
	}
	if want := []string{"d", "a", "c"}; !slices.Equal(got, want) || !slices.Equal(claimed, want) {
		t.Errorf("runs of %q, Claimed for %q; want %q", got, claimed, want)
	}
	if !slices.Equal(skipped, []string{"b"}) {
		t.Errorf("Skipped for %q, want [b]", skipped)
	}
	tick := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	runs, err = c.ClaimMany(ctx, []string{"a", "c"}, runclaim.ForTick(tick))
	if err != nil || len(runs) != 2 || !runs[0].Tick.Equal(tick) {
		t.Fatalf("ClaimMany with ForTick: %v, %v", runs, err)
	}
}

// A Store that is not a ManyStore is asked one source at a time; when a
// claim fails, the runs already won are finished as failed, and nothing is
// returned but the error.
func TestClaimManyFallbackFailure(t *testing.T) {
	ctx := t.Context()
	mem := runclaim.NewMemoryStore()
	spy := newSpyStore(mem)
	errDown := errors.New("database down")
	spy.claim = func(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
		if req.Source == "c" {
			return runclaim.RunInfo{}, errDown
		}
		return mem.Claim(ctx, req)
	}
	c := doClaimer(t, spy)
	runs, err := c.ClaimMany(ctx, []string{"a", "b", "c", "d"})
	if !errors.Is(err, errDown) || runs != nil {
		t.Fatalf("ClaimMany: %v, %v; want nil and the store's error", runs, err)
	}
	if len(spy.finishes) != 2 {
		t.Fatalf("%d runs finished, want the 2 won before the failure", len(spy.finishes))
	}
	for _, f := range spy.finishes {
		if f.req.Status != runclaim.StatusFailed || !strings.Contains(f.req.Error, "database down") || f.err != nil {
			t.Errorf("run %d of %q finished as %s %q: %v", f.req.ID, f.req.Source, f.req.Status, f.req.Error, f.err)
		}
	}
	if r, err := doClaimer(t, mem).Claim(ctx, "a"); err != nil {
		t.Errorf("a, finished after the failure, is not free: %v", err)
	} else {
		_ = r.Finish(ctx, nil)
	}
}

// DoMany calls fn for each run won, at once, records each outcome, and
// joins fn's errors; a skipped source is no error and gets no fn.
func TestDoMany(t *testing.T) {
	ctx := t.Context()
	mem := runclaim.NewMemoryStore()
	c := doClaimer(t, mem)
	held, err := doClaimer(t, mem).Claim(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	called := map[string]bool{}
	all := make(chan struct{})
	var waiting sync.WaitGroup
	waiting.Add(3)
	go func() { waiting.Wait(); close(all) }()
	errBoom := errors.New("boom")
	err = c.DoMany(ctx, []string{"a", "held", "b", "c"}, func(ctx context.Context, run *runclaim.Run) error {
		mu.Lock()
		called[run.Source] = true
		mu.Unlock()
		waiting.Done()
		<-all // every fn runs at once
		if run.Source == "b" {
			return errBoom
		}
		return nil
	})
	if !errors.Is(err, errBoom) || strings.Count(err.Error(), "boom") != 1 {
		t.Errorf("DoMany: %v, want b's error alone", err)
	}
	if len(called) != 3 || called["held"] {
		t.Errorf("fn called for %v, want a, b and c", called)
	}
	// Every outcome is recorded: each source is free again.
	for _, s := range []string{"a", "b", "c"} {
		r, err := doClaimer(t, mem).Claim(ctx, s)
		if err != nil {
			t.Errorf("%s after DoMany: %v", s, err)
			continue
		}
		_ = r.Finish(ctx, nil)
	}
	_ = held.Finish(ctx, nil)
}

// DoMany's runs heartbeat together: one HeartbeatMany per interval for all
// of them, no Heartbeat of one run, also for the runs of two DoMany calls
// at once; and their leases are extended.
//
// It runs in a synctest bubble: its timers and leases pass in no real
// time, and a busy machine cannot starve its heartbeats.
func TestDoManyHeartbeatsTogether(t *testing.T) { synctest.Test(t, testDoManyHeartbeatsTogether) }

func testDoManyHeartbeatsTogether(t *testing.T) {
	const lease, interval = 3 * time.Second, time.Second
	spy := &manySpy{MemoryStore: runclaim.NewMemoryStore()}
	var sizes []int
	var mu sync.Mutex
	spy.setBeat(func(ctx context.Context, reqs []runclaim.HeartbeatRequest) ([]runclaim.HeartbeatResult, error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		return spy.MemoryStore.HeartbeatMany(ctx, reqs)
	})
	c := doClaimer(t, spy, runclaim.WithLease(lease), runclaim.WithHeartbeat(interval))
	other := doClaimer(t, spy.MemoryStore)
	job := func(ctx context.Context, run *runclaim.Run) error {
		time.Sleep(4*interval + interval/2) // the job: 4.5 intervals, past the first lease
		if _, err := other.Claim(context.Background(), run.Source); !errors.Is(err, runclaim.ErrAlreadyRunning) {
			return fmt.Errorf("another claim after the first lease: %v, want ErrAlreadyRunning", err)
		}
		if !run.Deadline().After(run.LeaseUntil) {
			return fmt.Errorf("lease not extended past %v", run.LeaseUntil)
		}
		return context.Cause(ctx)
	}
	var wg sync.WaitGroup
	for half := range 2 {
		wg.Go(func() {
			if err := c.DoMany(t.Context(), sourcesN(100)[half*50:half*50+50], job); err != nil {
				t.Errorf("DoMany: %v", err)
			}
		})
	}
	wg.Wait()
	if n := spy.single.Load(); n != 0 {
		t.Errorf("%d heartbeats of one run, want none", n)
	}
	if want := []int{100, 100, 100, 100}; !slices.Equal(sizes, want) {
		t.Errorf("HeartbeatMany calls of %v runs, want %v: one call per interval for every run", sizes, want)
	}
}

// A run that a batch reports lost is lost alone: its context is cancelled
// with ErrLeaseLost and Lost closes; the other runs of the batch go on and
// succeed.
//
// It runs in a synctest bubble.
func TestDoManyLostAlone(t *testing.T) { synctest.Test(t, testDoManyLostAlone) }

func testDoManyLostAlone(t *testing.T) {
	const lease, interval = 3 * time.Second, time.Second
	spy := &manySpy{MemoryStore: runclaim.NewMemoryStore()}
	spy.setBeat(func(ctx context.Context, reqs []runclaim.HeartbeatRequest) ([]runclaim.HeartbeatResult, error) {
		res, err := spy.MemoryStore.HeartbeatMany(ctx, reqs)
		for i, r := range reqs {
			if err == nil && r.Source == "city-002" {
				res[i] = runclaim.HeartbeatResult{Err: fmt.Errorf("heartbeat run %d: %w", r.ID, runclaim.ErrLeaseLost)}
			}
		}
		return res, err
	})
	var lostEvents atomic.Int32
	c := doClaimer(t, spy, runclaim.WithLease(lease), runclaim.WithHeartbeat(interval),
		runclaim.WithHooks(runclaim.Hooks{LeaseLost: func(runclaim.Event) { lostEvents.Add(1) }}))
	err := c.DoMany(t.Context(), sourcesN(5), func(ctx context.Context, run *runclaim.Run) error {
		select {
		case <-ctx.Done():
			if run.Source != "city-002" {
				return fmt.Errorf("%s's context ended: %w", run.Source, context.Cause(ctx))
			}
			select {
			case <-run.Lost():
			default:
				return errors.New("context cancelled before Lost closed")
			}
			return context.Cause(ctx)
		case <-time.After(3 * interval):
			if run.Source == "city-002" {
				return errors.New("not told of its lost run")
			}
			return nil
		}
	})
	if !errors.Is(err, runclaim.ErrLeaseLost) || !strings.Contains(err.Error(), "city-002") || strings.Count(err.Error(), "runclaim: run ") != 1 {
		t.Errorf("DoMany: %v; want city-002's lost lease alone", err)
	}
	if n := lostEvents.Load(); n != 1 {
		t.Errorf("%d LeaseLost events, want 1", n)
	}
}

// A failed batch and a hung one lose no run: each is retried after the
// retry delay (the hung one once the attempt bound has passed), and the
// runs are kept alive through several leases.
//
// It runs in a synctest bubble.
func TestDoManyBatchFailuresKeepRuns(t *testing.T) {
	synctest.Test(t, testDoManyBatchFailuresKeepRuns)
}

func testDoManyBatchFailuresKeepRuns(t *testing.T) {
	const lease, interval = 3 * time.Second, time.Second
	spy := &manySpy{MemoryStore: runclaim.NewMemoryStore()}
	var calls atomic.Int32
	spy.setBeat(func(ctx context.Context, reqs []runclaim.HeartbeatRequest) ([]runclaim.HeartbeatResult, error) {
		switch calls.Add(1) {
		case 1:
			return nil, errors.New("connection reset")
		case 3:
			<-ctx.Done() // hangs until abandoned
			return nil, ctx.Err()
		}
		return spy.MemoryStore.HeartbeatMany(ctx, reqs)
	})
	var failedEvents atomic.Int32
	c := doClaimer(t, spy, runclaim.WithLease(lease), runclaim.WithHeartbeat(interval),
		runclaim.WithHooks(runclaim.Hooks{HeartbeatFailed: func(runclaim.Event) { failedEvents.Add(1) }}))
	err := c.DoMany(t.Context(), sourcesN(3), func(ctx context.Context, run *runclaim.Run) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(3 * lease):
			return nil
		}
	})
	if err != nil {
		t.Errorf("DoMany: %v; want every run kept alive", err)
	}
	if n := failedEvents.Load(); n != 6 {
		t.Errorf("%d HeartbeatFailed events, want 6 (two failed batches of three runs)", n)
	}
	if n := calls.Load(); n < 5 {
		t.Errorf("%d HeartbeatMany calls in three leases, want at least 5", n)
	}
}

// oneByOneStore is a Store that is not a ManyStore and has no Unclaim
// method: it forwards Claim, Heartbeat and Finish to a MemoryStore, and
// its Claim of the source fail returns errDown.
type oneByOneStore struct {
	mem  *runclaim.MemoryStore
	fail string
}

var errDown = errors.New("database down")

func (s *oneByOneStore) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	if req.Source == s.fail {
		return runclaim.RunInfo{}, errDown
	}
	return s.mem.Claim(ctx, req)
}

func (s *oneByOneStore) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	return s.mem.Heartbeat(ctx, req)
}

func (s *oneByOneStore) Finish(ctx context.Context, req runclaim.FinishRequest) error {
	return s.mem.Finish(ctx, req)
}

// unclaimer is a Store with the Unclaim method that runclaim.ManyStore's
// doc describes.
type unclaimer interface {
	Unclaim(ctx context.Context, run runclaim.RunInfo) error
}

// unclaimingStore is a oneByOneStore that also has Unclaim.
type unclaimingStore struct{ oneByOneStore }

func (s *unclaimingStore) Unclaim(ctx context.Context, run runclaim.RunInfo) error {
	return s.mem.Unclaim(ctx, run)
}

// A ClaimMany with ForTick that returns an error claims nothing and serves no tick,
// also on a Store that is not a ManyStore: afterwards the same tick can
// be claimed for every source, and the minimum interval does not count a
// run of the failed call. A Store with Unclaim takes back the runs won before the
// failure; a Store that is not one is refused before anything is claimed.
func TestClaimManyForTickErrorServesNoTick(t *testing.T) {
	for _, tc := range []struct {
		name      string
		store     func(*runclaim.MemoryStore) runclaim.Store
		storeErr  bool // the store's error is returned, not a refusal
		wantClaim int  // Claim calls that reach the store
	}{
		{"unclaimer", func(m *runclaim.MemoryStore) runclaim.Store {
			return &unclaimingStore{oneByOneStore{mem: m, fail: "c"}}
		}, true, 3},
		{"neither", func(m *runclaim.MemoryStore) runclaim.Store {
			return &oneByOneStore{mem: m, fail: "c"}
		}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			mem := runclaim.NewMemoryStore()
			var claims atomic.Int32
			inner := tc.store(mem)
			spy := newSpyStore(inner)
			spy.claim = func(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
				claims.Add(1)
				return inner.Claim(ctx, req)
			}
			var store runclaim.Store = spy
			if uc, ok := inner.(unclaimer); ok {
				store = &unclaimingSpy{spy: spy, uc: uc}
			}
			tick := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			c := doClaimer(t, store, runclaim.WithMinInterval(time.Hour))
			runs, err := c.ClaimMany(ctx, []string{"a", "b", "c"}, runclaim.ForTick(tick))
			if err == nil || runs != nil {
				t.Fatalf("ClaimMany with ForTick, c failing: %v, %v; want nil and an error", runs, err)
			}
			if errors.Is(err, errDown) != tc.storeErr {
				t.Errorf("ClaimMany with ForTick: %v; the store's error returned: %v, want %v", err, !tc.storeErr, tc.storeErr)
			}
			if !tc.storeErr && !strings.Contains(err.Error(), "not a ManyStore") {
				t.Errorf("ClaimMany with ForTick: %v; want a refusal that names what the store lacks", err)
			}
			if n := int(claims.Load()); n != tc.wantClaim {
				t.Errorf("%d claims reached the store, want %d", n, tc.wantClaim)
			}
			if f := spy.finishCalls(); len(f) != 0 {
				t.Errorf("%d runs finished, want none: %+v", len(f), f)
			}
			after := doClaimer(t, mem, runclaim.WithMinInterval(time.Hour))
			if r, err := after.Claim(ctx, "a", runclaim.ForTick(tick)); err != nil {
				t.Errorf("Claim of a for the tick after the failed call: %v, want a run: the tick is not served", err)
			} else {
				_ = r.Finish(ctx, nil)
			}
			if r, err := after.Claim(ctx, "b"); err != nil {
				t.Errorf("Claim of b after the failed call: %v, want a run: no run of the call counts for the minimum interval", err)
			} else {
				_ = r.Finish(ctx, nil)
			}
			// One source of a tick needs no taking back: it is asked.
			r, err := c.ClaimMany(ctx, []string{"d"}, runclaim.ForTick(tick))
			if err != nil || len(r) != 1 {
				t.Errorf("ClaimMany with ForTick of one source: %v, %v; want its run", r, err)
			}
		})
	}
}

// unclaimingSpy is a spyStore that forwards Unclaim to uc.
type unclaimingSpy struct {
	spy *spyStore
	uc  unclaimer
}

func (s *unclaimingSpy) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	return s.spy.Claim(ctx, req)
}

func (s *unclaimingSpy) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	return s.spy.Heartbeat(ctx, req)
}

func (s *unclaimingSpy) Finish(ctx context.Context, req runclaim.FinishRequest) error {
	return s.spy.Finish(ctx, req)
}

func (s *unclaimingSpy) Unclaim(ctx context.Context, run runclaim.RunInfo) error {
	return s.uc.Unclaim(ctx, run)
}

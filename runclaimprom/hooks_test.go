package runclaimprom_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/runclaimprom"
)

// newMetrics returns runclaimprom.New(reg), failing the test on an error.
func newMetrics(t *testing.T, reg prometheus.Registerer) *runclaimprom.Metrics {
	t.Helper()
	m, err := runclaimprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// downStore is a Store whose database is down.
type downStore struct{ runclaim.Store }

func (downStore) Claim(context.Context, runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	return runclaim.RunInfo{}, errors.New("dial tcp 10.0.0.5:5432: connection refused")
}

// counter returns the value of the runclaim_claims_total series with the
// given labels, or -1 if there is none.
func counter(t *testing.T, reg *prometheus.Registry, source, outcome string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "runclaim_claims_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == source && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// TestClaimFailuresCounted: with the database down, claims are counted as
// failed, not left out; an invalid source is counted under one label.
func TestClaimFailuresCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(t, reg)
	down, err := runclaim.New(downStore{runclaim.NewMemoryStore()}, runclaim.WithHooks(m.Hooks()))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := down.Claim(t.Context(), "slow-sweep"); err == nil {
			t.Fatal("a claim succeeded with the database down")
		}
	}
	if _, err := down.Claim(t.Context(), "bad\x00source"); !errors.Is(err, runclaim.ErrInvalidSource) {
		t.Fatalf("invalid source: %v", err)
	}
	if got := counter(t, reg, "slow-sweep", "failed"); got != 3 {
		t.Errorf(`runclaim_claims_total{source="slow-sweep",outcome="failed"} = %v, want 3`, got)
	}
	if got := counter(t, reg, "(invalid)", "failed"); got != 1 {
		t.Errorf(`runclaim_claims_total{source="(invalid)",outcome="failed"} = %v, want 1`, got)
	}

	// A working store: a claim and a skip, no failure.
	mem := runclaim.NewMemoryStore()
	a, _ := runclaim.New(mem, runclaim.WithHooks(m.Hooks()), runclaim.WithLease(time.Minute))
	b, _ := runclaim.New(mem, runclaim.WithHooks(m.Hooks()), runclaim.WithLease(time.Minute))
	if _, err := a.Claim(t.Context(), "quick-sweep"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(t.Context(), "quick-sweep"); !errors.Is(err, runclaim.ErrNotClaimed) {
		t.Fatalf("second claim: %v", err)
	}
	for outcome, want := range map[string]float64{"claimed": 1, "skipped": 1, "failed": -1} {
		if got := counter(t, reg, "quick-sweep", outcome); got != want {
			t.Errorf("quick-sweep %s: %v, want %v", outcome, got, want)
		}
	}
}

// skips returns the runclaim_skips_total series as "source reason=value"
// lines, sorted.
func skips(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	return series(t, reg, "runclaim_skips_total", "source", "reason")
}

// series returns the series of the counter name as "a b=value" lines,
// with a and b the values of the labels la and lb, sorted.
func series(t *testing.T, reg *prometheus.Registry, name, la, lb string) []string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, fmt.Sprintf("%s %s=%v", labels[la], labels[lb], m.GetCounter().GetValue()))
		}
	}
	sort.Strings(out)
	return out
}

// TestSkipReasons: each reason to skip is counted under its own label,
// paused and tick_done too, and a reason the hooks do not know under
// other, never under a known one.
func TestSkipReasons(t *testing.T) {
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	m := newMetrics(t, reg)
	store := runclaim.NewMemoryStore()
	c, err := runclaim.New(store, runclaim.WithHooks(m.Hooks()), runclaim.WithLease(time.Minute), runclaim.WithMinInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Pause(ctx, "paused", time.Time{}, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "paused"); !errors.Is(err, runclaim.ErrPaused) {
		t.Fatalf("claim of a paused source: %v, want ErrPaused", err)
	}
	tick := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	run, err := c.Claim(ctx, "ticked", runclaim.ForTick(tick))
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "ticked", runclaim.ForTick(tick)); !errors.Is(err, runclaim.ErrTickDone) {
		t.Fatalf("claim of a served tick: %v, want ErrTickDone", err)
	}
	if _, err := c.Claim(ctx, "ticked"); !errors.Is(err, runclaim.ErrTooSoon) {
		t.Fatalf("claim within the minimum interval: %v, want ErrTooSoon", err)
	}
	if _, err := c.Claim(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "held"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("claim of a held source: %v, want ErrAlreadyRunning", err)
	}
	if err := store.Cooldown(ctx, "site:a", time.Now().Add(time.Hour), "HTTP 429"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "keyed", runclaim.WithKeys("site:a")); !errors.Is(err, runclaim.ErrLimited) {
		t.Fatalf("claim of a cooling key: %v, want ErrLimited", err)
	}
	m.Hooks().Skipped(runclaim.Event{Source: "limited",
		Err: &runclaim.NotClaimedError{Source: "limited", Reason: errors.New("runclaim: rate limited")}})
	want := []string{"held already_running=1", "keyed limited=1", "limited other=1", "paused paused=1", "ticked tick_done=1", "ticked too_soon=1"}
	if got := skips(t, reg); !slices.Equal(got, want) {
		t.Errorf("runclaim_skips_total:\n got %q\nwant %q", got, want)
	}
	if got, want := series(t, reg, "runclaim_limited_total", "source", "key"), []string{"keyed site:a=1"}; !slices.Equal(got, want) {
		t.Errorf("runclaim_limited_total:\n got %q\nwant %q", got, want)
	}
	// Every reason runclaim lists, a new one too, under its own label.
	for _, r := range runclaim.SkipReasons {
		reg := prometheus.NewRegistry()
		m := newMetrics(t, reg)
		m.Hooks().Skipped(runclaim.Event{Source: "s", Err: &runclaim.NotClaimedError{Source: "s", Reason: r.Err}})
		if got, want := skips(t, reg), []string{"s " + r.Label + "=1"}; !slices.Equal(got, want) {
			t.Errorf("a skip for %v: runclaim_skips_total %q, want %q", r.Err, got, want)
		}
	}
}

// TestNewTwice: a second New on the same registry is an error and leaves
// the registry as the first New made it.
func TestNewTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(t, reg)
	if _, err := runclaimprom.New(reg); err == nil || !strings.HasPrefix(err.Error(), "runclaimprom: ") {
		t.Fatalf("second New on one registry: %v; want a runclaimprom error", err)
	}
	m.Hooks().LeaseLost(runclaim.Event{Source: "s", Run: &runclaim.Run{Source: "s"}, Err: runclaim.ErrLeaseLost})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP runclaim_leases_lost_total Runs whose holder learned that the run was no longer its own.
# TYPE runclaim_leases_lost_total counter
runclaim_leases_lost_total{source="s"} 1
`), "runclaim_leases_lost_total"); err != nil {
		t.Error(err)
	}
}

// TestNewConflict: a New that cannot register its last metric unregisters
// the others, so that a New after the conflict is gone succeeds.
func TestNewConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	// The same name and help: a registry never accepts one name with two
	// helps, even after the first is unregistered.
	taken := prometheus.NewGauge(prometheus.GaugeOpts{Name: "runclaim_lease_lost_last_timestamp_seconds",
		Help: "When a run was last lost, as a Unix time; 0 if never. Alert on changes()."})
	reg.MustRegister(taken)
	if _, err := runclaimprom.New(reg); err == nil {
		t.Fatal("New registered a metric whose name was taken")
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 1 {
		t.Fatalf("after a failed New the registry has %d series (%v); want only the one it had", n, err)
	}
	reg.Unregister(taken)
	if _, err := runclaimprom.New(reg); err != nil {
		t.Fatalf("New after the conflict is gone: %v", err)
	}
}

// TestRunEvents: a finished run, a failed heartbeat and a lost lease are
// counted under their source, next to a program's own hooks given with
// another WithHooks.
func TestRunEvents(t *testing.T) {
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	m := newMetrics(t, reg)
	store := &faultyStore{MemoryStore: runclaim.NewMemoryStore()}
	var own []string
	c, err := runclaim.New(store, runclaim.WithLease(time.Minute), runclaim.WithHooks(m.Hooks()),
		runclaim.WithHooks(runclaim.Hooks{
			Finished:  func(e runclaim.Event) { own = append(own, "finished "+e.Run.Source) },
			LeaseLost: func(e runclaim.Event) { own = append(own, "lost "+e.Run.Source) },
		}))
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Claim(ctx, "done")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	run, err = c.Claim(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	store.setHeartbeat(errors.New("dial tcp 10.0.0.5:5432: connection refused"))
	if err := run.Heartbeat(ctx); err == nil {
		t.Fatal("heartbeat succeeded with the database down")
	}
	store.setHeartbeat(fmt.Errorf("runclaim: heartbeat run %d: %w", run.ID, runclaim.ErrLeaseLost))
	if err := run.Heartbeat(ctx); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Fatalf("heartbeat of a lost run: %v; want ErrLeaseLost", err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP runclaim_heartbeat_failures_total Heartbeats that failed without losing the lease (yet), such as with the database unreachable.
# TYPE runclaim_heartbeat_failures_total counter
runclaim_heartbeat_failures_total{source="lost"} 1
# HELP runclaim_leases_lost_total Runs whose holder learned that the run was no longer its own.
# TYPE runclaim_leases_lost_total counter
runclaim_leases_lost_total{source="lost"} 1
`), "runclaim_heartbeat_failures_total", "runclaim_leases_lost_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "runclaim_run_duration_seconds"); n != 1 {
		t.Errorf("%d runclaim_run_duration_seconds series, want 1 (source done, succeeded)", n)
	}
	if lost, err := testutil.GatherAndCount(reg, "runclaim_lease_lost_last_timestamp_seconds"); err != nil || lost != 1 {
		t.Errorf("runclaim_lease_lost_last_timestamp_seconds: %d series, %v", lost, err)
	}
	if want := []string{"finished done", "lost lost"}; !slices.Equal(own, want) {
		t.Errorf("the program's own hooks saw %q, want %q", own, want)
	}
}

// TestStartLateness: a run of a tick records its start minus its tick in
// runclaim_start_lateness_seconds, without a source label unless
// LatenessBySource is given; a plain claim records nothing there.
func TestStartLateness(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 1, 30, 0, time.UTC)
	for _, bySource := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		var opts []runclaimprom.Option
		if bySource {
			opts = append(opts, runclaimprom.LatenessBySource())
		}
		m, err := runclaimprom.New(reg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		store := runclaim.NewMemoryStore(runclaim.WithClock(func() time.Time { return now }))
		c, err := runclaim.New(store, runclaim.WithHooks(m.Hooks()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Claim(t.Context(), "sweep", runclaim.ForTick(now.Add(-90*time.Second))); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Claim(t.Context(), "plain"); err != nil {
			t.Fatal(err)
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, f := range families {
			if f.GetName() != "runclaim_start_lateness_seconds" {
				continue
			}
			found = true
			ms := f.GetMetric()
			if len(ms) != 1 || ms[0].GetHistogram().GetSampleCount() != 1 || ms[0].GetHistogram().GetSampleSum() != 90 {
				t.Errorf("by source %v: %v, want one series with one sample of 90s", bySource, ms)
				continue
			}
			labels := ms[0].GetLabel()
			if bySource != (len(labels) == 1 && labels[0].GetName() == "source" && labels[0].GetValue() == "sweep") {
				t.Errorf("by source %v: labels %v", bySource, labels)
			}
		}
		if !found {
			t.Errorf("by source %v: no runclaim_start_lateness_seconds", bySource)
		}
	}
}

// faultyStore is a memory store whose heartbeats fail as told.
type faultyStore struct {
	*runclaim.MemoryStore
	mu        sync.Mutex // protects heartbeat
	heartbeat error      // returned by Heartbeat when not nil
}

func (s *faultyStore) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	s.mu.Lock()
	err := s.heartbeat
	s.mu.Unlock()
	if err != nil {
		return time.Time{}, err
	}
	return s.MemoryStore.Heartbeat(ctx, req)
}

func (s *faultyStore) setHeartbeat(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heartbeat = err
}

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/runclaim/runclaim"
)

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
	m := NewMetrics(reg)
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
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range families {
		if mf.GetName() != "runclaim_skips_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, fmt.Sprintf("%s %s=%v", labels["source"], labels["reason"], m.GetCounter().GetValue()))
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
	m := NewMetrics(reg)
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
	run, err := c.ClaimTick(ctx, "ticked", tick)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ClaimTick(ctx, "ticked", tick); !errors.Is(err, runclaim.ErrTickDone) {
		t.Fatalf("claim of a served tick: %v, want ErrTickDone", err)
	}
	if _, err := c.Claim(ctx, "ticked"); !errors.Is(err, runclaim.ErrTooSoon) {
		t.Fatalf("claim within the minimum interval: %v, want ErrTooSoon", err)
	}
	run, err = c.Claim(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "held"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("claim of a held source: %v, want ErrAlreadyRunning", err)
	}
	m.Hooks().Skipped(runclaim.SkippedEvent{Source: "limited",
		Err: &runclaim.NotClaimedError{Source: "limited", Reason: errors.New("runclaim: rate limited")}})
	want := []string{"held already_running=1", "limited other=1", "paused paused=1", "ticked tick_done=1", "ticked too_soon=1"}
	if got := skips(t, reg); !slices.Equal(got, want) {
		t.Errorf("runclaim_skips_total:\n got %q\nwant %q", got, want)
	}
}

package main

import (
	"context"
	"errors"
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

package runclaimprom_test

import (
	"context"
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/runclaimprom"
)

// Count two replicas' claims and skips: pod-b's claim finds pod-a's run in
// progress. A service serves reg with promhttp.HandlerFor.
func Example() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	metrics, err := runclaimprom.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	store := runclaim.NewMemoryStore()
	a, _ := runclaim.New(store, runclaim.WithOwner("pod-a"), runclaim.WithHooks(metrics.Hooks()))
	b, _ := runclaim.New(store, runclaim.WithOwner("pod-b"), runclaim.WithHooks(metrics.Hooks()))
	_ = a.Do(ctx, "nightly-report", func(ctx context.Context, _ *runclaim.Run) error {
		_ = b.Do(ctx, "nightly-report", func(context.Context, *runclaim.Run) error { return nil })
		return nil
	})

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetType() != dto.MetricType_COUNTER {
			continue
		}
		for _, m := range mf.GetMetric() {
			fmt.Print(mf.GetName())
			for _, l := range m.GetLabel() {
				fmt.Printf(" %s=%s", l.GetName(), l.GetValue())
			}
			fmt.Println(":", m.GetCounter().GetValue())
		}
	}
	// Output:
	// runclaim_claims_total outcome=claimed source=nightly-report: 1
	// runclaim_claims_total outcome=skipped source=nightly-report: 1
	// runclaim_skips_total reason=already_running source=nightly-report: 1
}

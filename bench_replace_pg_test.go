package runclaim_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// BenchmarkReplaceLatency: how long a claim with Replace takes to win a
// source from a run whose function returns as soon as its context ends,
// with a 1 s heartbeat (the holder learns of the request at its next
// heartbeat), on each store. Each iteration starts a holder's Do, then
// claims with Replace and times the claim until it wins. Reports the
// median and the maximum (target: 1.5 s and 2 s).
func BenchmarkReplaceLatency(b *testing.B) {
	for _, sc := range []struct {
		name string
		open func(b *testing.B) runclaim.Store
	}{
		{"memory", func(*testing.B) runclaim.Store { return runclaim.NewMemoryStore() }},
		{"postgres", func(b *testing.B) runclaim.Store { return benchStore(b, benchDB(b).Pool) }},
	} {
		b.Run(sc.name, func(b *testing.B) {
			store := sc.open(b)
			ctx := context.Background()
			holder := benchClaimer(b, store, "holder", runclaim.WithHeartbeat(time.Second), runclaim.WithLease(10*time.Second))
			replacer := benchClaimer(b, store, "replacer", runclaim.WithLease(10*time.Second))
			var took []time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				started := make(chan struct{})
				done := make(chan error, 1)
				go func() {
					done <- holder.Do(ctx, "src", func(ctx context.Context, _ *runclaim.Run) error {
						close(started)
						<-ctx.Done()
						return nil
					})
				}()
				<-started
				t0 := time.Now()
				run, err := replacer.Claim(ctx, "src", runclaim.Replace())
				if err != nil {
					b.Fatalf("claim with Replace: %v", err)
				}
				took = append(took, time.Since(t0))
				<-done
				if err := run.Finish(ctx, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(took[len(took)/2].Seconds(), "p50-s")
			b.ReportMetric(took[len(took)-1].Seconds(), "max-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

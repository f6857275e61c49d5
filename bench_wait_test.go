package runclaim_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// benchWaitHold is how long the holder of BenchmarkWaitPoll holds the
// source while the waiters poll.
const benchWaitHold = 2 * time.Second

// BenchmarkWaitPoll measures what claims with Wait cost the database,
// and how soon one wins, on the Postgres store. Each iteration: a holder
// claims the source, n waiters claim it with Wait, each through a store
// that counts the claim statements it sends; after benchWaitHold the
// holder finishes. It reports the claims per second per waiter over the
// whole hold (the first second, while the pauses grow, included) and
// over its second half (the steady rate), and the time from the return
// of the holder's Finish to a waiter's win. The waiters that lost are
// then called off.
//
// The dead-holder case claims with a lease of a second and never
// finishes: it reports the time from the end of that lease to the
// waiter's win, both by the database clock.
func BenchmarkWaitPoll(b *testing.B) {
	store := sharedtest.OpenPostgres(b)
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			var claims, steady, handoff float64
			for i := range b.N {
				source := fmt.Sprintf("wait-%d-%d", n, i)
				holder := sharedtest.NewClaimer(b, store)
				held, err := holder.Claim(b.Context(), source)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(b.Context())
				counters := make([]*countStore, n)
				won := make(chan *runclaim.Run, n)
				var wg sync.WaitGroup
				start := time.Now()
				for w := range n {
					counters[w] = newCountStore(store)
					c := sharedtest.NewClaimer(b, counters[w])
					wg.Go(func() {
						if run, err := c.Claim(ctx, source, runclaim.Wait()); err == nil {
							won <- run
						}
					})
				}
				time.Sleep(benchWaitHold / 2)
				half := sum(counters)
				time.Sleep(benchWaitHold - time.Since(start))
				whole := sum(counters)
				elapsed := time.Since(start)
				if err := held.Finish(b.Context(), nil); err != nil {
					b.Fatal(err)
				}
				finished := time.Now()
				run := <-won
				handoff += time.Since(finished).Seconds() * 1000
				cancel()
				wg.Wait()
				if err := run.Finish(b.Context(), nil); err != nil {
					b.Fatal(err)
				}
				claims += float64(whole) / elapsed.Seconds() / float64(n)
				steady += float64(whole-half) / (elapsed - benchWaitHold/2).Seconds() / float64(n)
			}
			b.ReportMetric(claims/float64(b.N), "claims/s/waiter")
			b.ReportMetric(steady/float64(b.N), "steady-claims/s/waiter")
			b.ReportMetric(handoff/float64(b.N), "ms-finish-to-win")
		})
	}
	b.Run("dead-holder", func(b *testing.B) {
		var late float64
		for i := range b.N {
			source := fmt.Sprintf("dead-%d", i)
			holder := sharedtest.NewClaimer(b, store, runclaim.WithLease(time.Second))
			held, err := holder.Claim(b.Context(), source)
			if err != nil {
				b.Fatal(err)
			}
			run, err := sharedtest.NewClaimer(b, store).Claim(b.Context(), source, runclaim.Wait())
			if err != nil {
				b.Fatal(err)
			}
			late += run.StartedAt.Sub(held.LeaseUntil).Seconds() * 1000
			if err := run.Finish(b.Context(), nil); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(late/float64(b.N), "ms-lease-end-to-win")
	})
}

// sum returns the claims sent through stores.
func sum(stores []*countStore) int64 {
	var n int64
	for _, s := range stores {
		n += s.claims.Load()
	}
	return n
}

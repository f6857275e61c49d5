//go:build linux

package failover

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// BenchmarkClaimWinSyncStandby: what WithSynchronousCommit costs a won
// claim on a primary with a synchronous standby on the same machine (the
// standby streams straight from the primary, fsync on), whose default
// synchronous_commit is local, as on a cluster that replicates
// asynchronously by default. Each iteration claims a source with a store
// without the option (the cluster's default: the claim waits for the local
// WAL flush only), with "on" (it waits until the standby has flushed the
// claim) and with "remote_apply" (until the standby has applied it), in
// turn on one pool, and finishes each run untimed. It reports each one's
// p50 and their ratios to the default's.
func BenchmarkClaimWinSyncStandby(b *testing.B) {
	c := newCluster(b, clusterOptions{sync: true, direct: true,
		settings: []string{"fsync = on", "synchronous_commit = local"}})
	pool := newPool(b, c.primary.dsn())
	variants := []struct {
		name string
		opts []runclaim.PostgresOption
	}{
		{"local", nil},
		{"on", []runclaim.PostgresOption{runclaim.WithSynchronousCommit("on")}},
		{"remote_apply", []runclaim.PostgresOption{runclaim.WithSynchronousCommit("remote_apply")}},
	}
	claimers := make([]*runclaim.Claimer, len(variants))
	for i, v := range variants {
		store, err := runclaim.NewPostgresStore(pool, v.opts...)
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			if err := store.Migrate(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
		claimers[i], err = runclaim.New(store, runclaim.WithOwner("bench"))
		if err != nil {
			b.Fatal(err)
		}
	}
	sources := make([]string, 16)
	for i := range sources {
		sources[i] = fmt.Sprintf("bench-%d", i)
	}
	lat := make([][]time.Duration, len(variants))
	claim := func(k, i int) {
		start := time.Now()
		run, err := claimers[k].Claim(b.Context(), sources[i%len(sources)])
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		lat[k] = append(lat[k], d)
		if err := run.Finish(b.Context(), nil); err != nil {
			b.Fatal(err)
		}
	}
	// Warm every store's statements on the connection.
	for k := range variants {
		claim(k, 0)
		lat[k] = lat[k][:0]
	}
	b.ResetTimer()
	for i := range b.N {
		for j := range variants {
			claim((i+j)%len(variants), i)
		}
	}
	b.StopTimer()
	p50 := func(l []time.Duration) float64 {
		s := slices.Clone(l)
		slices.Sort(s)
		return float64(s[int(math.Ceil(0.5*float64(len(s))))-1]) / float64(time.Microsecond)
	}
	base := p50(lat[0])
	for k, v := range variants {
		b.ReportMetric(p50(lat[k]), v.name+"-p50-µs")
		if k > 0 {
			b.ReportMetric(p50(lat[k])/base, v.name+"/local")
		}
	}
	b.ReportMetric(0, "ns/op")
}

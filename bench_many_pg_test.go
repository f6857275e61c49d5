package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

// Many sources per tick: one ClaimMany against single claims, one
// HeartbeatMany against single heartbeats, and a fleet of replicas firing
// every source at once. Each iteration measures both sides, in alternating
// order, on the same pool; the database CPU is the backends' (see
// backendCPU), read before and after each side.

// manyCost is what one side of a comparison took: wall time and the
// database's CPU time, summed over the iterations.
type manyCost struct {
	wall     time.Duration
	cpu      time.Duration
	cpuOK    bool
	wal, xid int64 // WAL bytes written and transaction IDs assigned, server-wide
}

// measure adds f's wall time and the backends' CPU time to c.
func (c *manyCost) measure(b *testing.B, monitor *pgxpool.Pool, f func()) {
	lsn0, xid0 := walPosition(b, monitor)
	cpu0, ok0 := backendCPU(b, monitor)
	start := time.Now()
	f()
	c.wall += time.Since(start)
	cpu1, ok1 := backendCPU(b, monitor)
	lsn1, xid1 := walPosition(b, monitor)
	c.cpu += cpu1 - cpu0
	c.wal, c.xid = c.wal+lsn1-lsn0, c.xid+xid1-xid0
	c.cpuOK = c.cpuOK && ok0 && ok1
}

// reportMany reports both sides' wall time and CPU per iteration, in
// milliseconds, and the ratios of many to single.
func reportMany(b *testing.B, n int, many, single manyCost, manyName, singleName string) {
	per := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	b.ReportMetric(per(many.wall), manyName+"-ms")
	b.ReportMetric(per(single.wall), singleName+"-ms")
	b.ReportMetric(ratio(float64(many.wall), float64(single.wall)), manyName+"/"+singleName)
	if many.cpuOK && single.cpuOK {
		b.ReportMetric(per(many.cpu), manyName+"-db-cpu-ms")
		b.ReportMetric(per(single.cpu), singleName+"-db-cpu-ms")
		b.ReportMetric(ratio(float64(many.cpu), float64(single.cpu)), manyName+"/"+singleName+"-db-cpu")
	}
}

// finishAll marks every running run of store's table succeeded, in one
// statement, untimed: it keeps the running-run index small between
// iterations.
func finishAll(b *testing.B, pool *pgxpool.Pool, store *runclaim.PostgresStore) {
	_, err := pool.Exec(context.Background(), `UPDATE `+store.Table()+` SET status = 'succeeded', finished_at = pg_catalog.clock_timestamp() WHERE status = 'running'`)
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkClaimMany500: 500 sources claimed with one ClaimMany against
// 500 single claims one after another, on one connection: first on free
// sources (each claim wins), then on the same sources held by those runs
// (each claim loses, as on every replica but one). Reported per
// iteration: wall time (win-many-ms, win-single-ms, and the same for
// lose-), the database backends' CPU (…-db-cpu-ms), the ratios of one
// ClaimMany to the singles (target: wall time ≤ 0.2×), the transaction IDs
// assigned (…-xids: each writing transaction flushes WAL at its commit),
// and the WAL that the losing ClaimMany wrote (lose-many-wal-B). The WAL
// and transaction figures are the server's, so another database's
// activity would show in them.
func BenchmarkClaimMany500(b *testing.B) {
	const n = 500
	db := benchDB(b)
	pool := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 1 })
	store := benchStore(b, pool)
	monitor := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 1 })
	winner, loser := benchClaimer(b, store, "winner"), benchClaimer(b, store, "loser")
	ctx := context.Background()
	// Warm the connection's plans, untimed: one of each.
	warm := benchSources(n)
	if _, err := winner.ClaimMany(ctx, warm[:2]); err != nil {
		b.Fatal(err)
	}
	mustLose(b, loser, warm[0])
	finishAll(b, db.Pool, store)

	winMany, winSingle, loseMany, loseSingle := manyCost{cpuOK: true}, manyCost{cpuOK: true}, manyCost{cpuOK: true}, manyCost{cpuOK: true}
	iter := 0
	for b.Loop() {
		// Fresh names each iteration: each side claims free sources.
		a, s := make([]string, n), make([]string, n)
		for i := range n {
			a[i], s[i] = fmt.Sprintf("m%d/%04d", iter, i), fmt.Sprintf("s%d/%04d", iter, i)
		}
		many := func() {
			winMany.measure(b, monitor, func() {
				runs, err := winner.ClaimMany(ctx, a)
				if err != nil || len(runs) != n {
					b.Fatalf("ClaimMany of %d free sources: %d runs, %v", n, len(runs), err)
				}
			})
			loseMany.measure(b, monitor, func() {
				runs, err := loser.ClaimMany(ctx, a)
				if err != nil || len(runs) != 0 {
					b.Fatalf("ClaimMany of %d held sources: %d runs, %v", n, len(runs), err)
				}
			})
		}
		single := func() {
			winSingle.measure(b, monitor, func() {
				for _, src := range s {
					mustWin(b, winner, src)
				}
			})
			loseSingle.measure(b, monitor, func() {
				for _, src := range s {
					mustLose(b, loser, src)
				}
			})
		}
		if iter%2 == 0 {
			many()
			single()
		} else {
			single()
			many()
		}
		b.StopTimer()
		finishAll(b, db.Pool, store)
		b.StartTimer()
		iter++
	}
	reportMany(b, iter, winMany, winSingle, "win-many", "win-single")
	reportMany(b, iter, loseMany, loseSingle, "lose-many", "lose-single")
	// Transactions that wrote (each flushes WAL once at commit), and the
	// WAL bytes of the losing side: none expected.
	for _, c := range []struct {
		name string
		cost manyCost
	}{{"win-many", winMany}, {"win-single", winSingle}, {"lose-many", loseMany}, {"lose-single", loseSingle}} {
		b.ReportMetric(float64(c.cost.xid)/float64(iter), c.name+"-xids")
	}
	b.ReportMetric(float64(loseMany.wal)/float64(iter), "lose-many-wal-B")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkHeartbeatMany1000: 1,000 held runs, their leases extended by
// one HeartbeatMany (one statement) against 1,000 single heartbeats one
// after another, on one connection. Reported per iteration, that is per
// heartbeat interval: the statements sent (beat-many-stmts,
// beat-single-stmts), wall time and the database backends' CPU, and the
// ratios.
func BenchmarkHeartbeatMany1000(b *testing.B) {
	const n = 1000
	db := benchDB(b)
	pool := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 1 })
	store := benchStore(b, pool)
	monitor := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 1 })
	c := benchClaimer(b, store, "holder")
	ctx := context.Background()
	runs, err := c.ClaimMany(ctx, benchSources(n))
	if err != nil || len(runs) != n {
		b.Fatalf("ClaimMany: %d runs, %v", len(runs), err)
	}
	reqs := make([]runclaim.HeartbeatRequest, n)
	for i, r := range runs {
		reqs[i] = runclaim.HeartbeatRequest{ID: r.ID, Source: r.Source, StartedAt: r.StartedAt, Lease: time.Hour}
	}
	many, single := manyCost{cpuOK: true}, manyCost{cpuOK: true}
	iter := 0
	for b.Loop() {
		batch := func() {
			many.measure(b, monitor, func() {
				res, err := store.HeartbeatMany(ctx, reqs)
				if err != nil || len(res) != n {
					b.Fatalf("HeartbeatMany: %d results, %v", len(res), err)
				}
				for _, r := range res {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			})
		}
		one := func() {
			single.measure(b, monitor, func() {
				for _, r := range runs {
					if err := r.Heartbeat(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		if iter%2 == 0 {
			batch()
			one()
		} else {
			one()
			batch()
		}
		iter++
	}
	b.ReportMetric(1, "beat-many-stmts")
	b.ReportMetric(n, "beat-single-stmts")
	reportMany(b, iter, many, single, "beat-many", "beat-single")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkFleet10x1000: ten replicas, each with a pool of its own (two
// connections), fire all of 1,000 sources at the same moment, as at the
// top of the minute: each with one ClaimMany, then each with 1,000 single
// claims one after another. Every source is won exactly once either way.
// Reported per tick: the time until every replica has its answer
// (many-ms, single-ms), the database backends' CPU for the whole tick,
// the p99 of a losing claim as its replica sees it (for ClaimMany, the
// call, which loses most of its sources: many-call-p99-ms; for single
// claims, one claim, single-lose-p99-ms, and a replica's 1,000 of them,
// single-replica-p99-ms), and the ratios.
func BenchmarkFleet10x1000(b *testing.B) {
	const replicas, n = 10, 1000
	db := benchDB(b)
	store := benchStore(b, db.Pool)
	monitor := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 1 })
	claimers := make([]*runclaim.Claimer, replicas)
	for i := range claimers {
		pool := db.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 2 })
		s, err := runclaim.NewPostgresStore(pool)
		if err != nil {
			b.Fatal(err)
		}
		claimers[i] = benchClaimer(b, s, fmt.Sprintf("replica-%d", i))
		if _, err := claimers[i].ClaimMany(context.Background(), []string{fmt.Sprintf("warm-%d", i)}); err != nil {
			b.Fatal(err)
		}
	}
	finishAll(b, db.Pool, store)
	ctx := context.Background()
	many, single := manyCost{cpuOK: true}, manyCost{cpuOK: true}
	var manyCalls, singleLosses, singleTicks []time.Duration
	var mu sync.Mutex // protects the three slices
	iter := 0
	fire := func(f func(c *runclaim.Claimer) int) {
		var wg sync.WaitGroup
		won := make([]int, replicas)
		gate := make(chan struct{})
		for i, c := range claimers {
			wg.Go(func() {
				<-gate
				won[i] = f(c)
			})
		}
		close(gate)
		wg.Wait()
		total := 0
		for _, w := range won {
			total += w
		}
		if total != n {
			b.Fatalf("the fleet won %d runs of %d sources", total, n)
		}
	}
	for b.Loop() {
		sources := make([]string, n)
		for i := range sources {
			sources[i] = fmt.Sprintf("t%d/%04d", iter, i)
		}
		withMany := func() {
			many.measure(b, monitor, func() {
				fire(func(c *runclaim.Claimer) int {
					start := time.Now()
					runs, err := c.ClaimMany(ctx, sources)
					d := time.Since(start)
					if err != nil {
						b.Errorf("ClaimMany: %v", err)
					}
					mu.Lock()
					manyCalls = append(manyCalls, d)
					mu.Unlock()
					return len(runs)
				})
			})
			finishAll(b, db.Pool, store)
		}
		withSingles := func() {
			sources := slices.Clone(sources)
			for i := range sources {
				sources[i] = "single/" + sources[i]
			}
			single.measure(b, monitor, func() {
				fire(func(c *runclaim.Claimer) int {
					won := 0
					var losses []time.Duration
					tick := time.Now()
					defer func() {
						d := time.Since(tick)
						mu.Lock()
						singleTicks = append(singleTicks, d)
						mu.Unlock()
					}()
					for _, src := range sources {
						start := time.Now()
						_, err := c.Claim(ctx, src)
						d := time.Since(start)
						switch {
						case err == nil:
							won++
						case errors.Is(err, runclaim.ErrNotClaimed):
							losses = append(losses, d)
						default:
							b.Errorf("Claim: %v", err)
						}
					}
					mu.Lock()
					singleLosses = append(singleLosses, losses...)
					mu.Unlock()
					return won
				})
			})
			finishAll(b, db.Pool, store)
		}
		if iter%2 == 0 {
			withMany()
			withSingles()
		} else {
			withSingles()
			withMany()
		}
		iter++
	}
	reportMany(b, iter, many, single, "many", "single")
	p99 := func(d []time.Duration) float64 {
		return float64(latencies(d).pct(99)) / float64(time.Millisecond)
	}
	b.ReportMetric(p99(manyCalls), "many-call-p99-ms")
	b.ReportMetric(p99(singleLosses), "single-lose-p99-ms")
	b.ReportMetric(p99(singleTicks), "single-replica-p99-ms")
	b.ReportMetric(0, "ns/op")
}

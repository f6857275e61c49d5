package runclaim_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// BenchmarkClaimTick: a tick claim beside a plain one, both through the
// function of schema version 4 (a plain claim passes a NULL tick), and
// the plain claim through the function of version 3 as the release before
// sends it, all interleaved on one pool:
//   - a win in each, against one autocommit INSERT of the running row
//     (insert) and of the row with a tick (insert-tick, which also updates
//     the index of ticks served);
//   - a loss: a plain claim of a held source, and a tick claim of a tick
//     already served (ErrTickDone), against SELECT 1;
//
// The table holds a history of 20,000 finished runs, analysed. Also:
//   - what a lost tick claim writes: the server's WAL bytes and
//     transaction IDs per loss, over rounds of losses minus as many
//     SELECT 1s (target: none).
func BenchmarkClaimTick(b *testing.B) {
	db := benchDB(b)
	benchStore(b, db.Pool)
	v4 := formStore(b, db.Pool, claimForms[0])
	c4 := benchClaimer(b, v4, "bench")
	floor := newInsertFloor(v4, db.Pool)
	tickFloor := newInsertFloor(v4, db.Pool)
	tickFloor.insert = `INSERT INTO ` + v4.Table() + ` (source, status, owner, started_at, lease_until, heartbeat_at, min_interval, tick)
VALUES ($1, 'running', $2, pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp() + $3::bigint * interval '1 microsecond', pg_catalog.clock_timestamp(), interval '0', pg_catalog.clock_timestamp())
RETURNING id, started_at, lease_until`
	sources := benchSources(16)
	ctx := context.Background()

	// The losses' sources: one held by a run, one whose tick t0 is done.
	const held, done = "held", "done"
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mustWin(b, benchClaimer(b, v4, "holder"), held)
	run, err := c4.Claim(ctx, done, runclaim.ForTick(t0))
	if err != nil {
		b.Fatal(err)
	}
	mustFinish(b, run)
	// A history of 20,000 finished runs, half of them of ticks, analysed,
	// as a service's table has after a while: the planner's statistics
	// then match what the claims meet.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO `+v4.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at, min_interval, tick)
SELECT 'history/' || (i % 64), 'succeeded', 'old', t, t, t, t, interval '0', CASE WHEN i % 2 = 0 THEN t END
FROM pg_catalog.generate_series(1, 20000) AS i, LATERAL (SELECT timestamptz '2020-01-01' + i * interval '1 minute' AS t) AS x`); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "VACUUM (ANALYZE) "+v4.Table()); err != nil {
		b.Fatal(err)
	}
	loseTick := func() {
		if _, err := c4.Claim(ctx, done, runclaim.ForTick(t0)); !errors.Is(err, runclaim.ErrTickDone) {
			b.Fatalf("claim of a done tick: %v, want ErrTickDone", err)
		}
	}

	tick := t0 // each tick win claims a later tick
	win := func(claim func(source string) (*runclaim.Run, error)) func(int) time.Duration {
		return func(i int) time.Duration {
			var run *runclaim.Run
			var err error
			d := timed(func() { run, err = claim(sources[i%len(sources)]) })
			if err != nil {
				b.Fatalf("claim: %v", err)
			}
			mustFinish(b, run)
			return d
		}
	}
	insert := func(f *insertFloor) func(int) time.Duration {
		return func(i int) time.Duration {
			src := sources[i%len(sources)]
			var id int64
			var started time.Time
			d := timed(func() { id, started = f.insertRow(b, "floor/"+src) })
			f.finishRow(b, id, started, "floor/"+src)
			return d
		}
	}
	ops := []timedOp{
		{"insert", insert(floor)},
		{"insert-tick", insert(tickFloor)},
		{"plain", win(func(s string) (*runclaim.Run, error) { return c4.Claim(ctx, s) })},
		{"tick", win(func(s string) (*runclaim.Run, error) {
			tick = tick.Add(time.Second)
			return c4.Claim(ctx, s, runclaim.ForTick(tick))
		})},
		{"select1", func(int) time.Duration { return timed(func() { selectOne(b, db.Pool) }) }},
		{"plain-lose", func(int) time.Duration { return timed(func() { mustLose(b, c4, held) }) }},
		{"tick-lose", func(int) time.Duration { return timed(loseTick) }},
	}
	res, n := interleave(b, ops)
	p50 := make(map[string]float64, len(ops))
	for i, op := range ops {
		p50[op.name] = micros(res[i].pct(50))
		b.ReportMetric(p50[op.name], op.name+"-p50-µs")
	}
	b.ReportMetric(ratio(p50["plain"], p50["insert"]), "plain/insert")
	b.ReportMetric(ratio(p50["tick"], p50["insert"]), "tick/insert")
	b.ReportMetric(ratio(p50["tick"], p50["insert-tick"]), "tick/insert-tick")
	b.ReportMetric(ratio(p50["tick"], p50["plain"]), "tick/plain")
	b.ReportMetric(ratio(p50["plain-lose"], p50["select1"]), "plain-lose/select1")
	b.ReportMetric(ratio(p50["tick-lose"], p50["select1"]), "tick-lose/select1")

	// What a lost tick claim writes, against as many SELECT 1s.
	monitor := db.NewPool(b, nil)
	k := min(max(n/10, 1), 100)
	var wal, xid [2]int64
	for range 10 {
		for _, i := range rand.Perm(2) {
			lsn0, xid0 := walPosition(b, monitor)
			for range k {
				if i == 0 {
					selectOne(b, db.Pool)
				} else {
					loseTick()
				}
			}
			lsn1, xid1 := walPosition(b, monitor)
			wal[i] += lsn1 - lsn0
			xid[i] += xid1 - xid0
		}
	}
	per := float64(10 * k)
	b.ReportMetric(float64(wal[1]-wal[0])/per, "tick-lose-wal-B/op")
	b.ReportMetric(float64(xid[1]-xid[0])/per, "tick-lose-xid/op")
	b.ReportMetric(0, "ns/op")
}

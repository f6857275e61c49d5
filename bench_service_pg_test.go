package runclaim_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

// BenchmarkClaimLoseAsService measures a lost claim as a service sees it,
// against what BenchmarkClaimLose's set-up leaves out. That benchmark
// vacuums the table before it starts, so that the holder's row is
// all-visible and hinted, and it times SELECT 1 on a pool of its own. A
// service loses to a row written a moment ago, on a table no VACUUM has
// reached yet, and compares with the other queries on its own pool. Each
// case runs on a fresh database: a holder's run just claimed, then lost
// claims (the store's default form, the function) and SELECT 1,
// interleaved, and reports their p50s and the ratio.
//
//	fresh/same-pool:    what a service sees (no VACUUM; SELECT 1 on the claim's pool)
//	fresh/other-pool:   no VACUUM; SELECT 1 on a pool of its own
//	vacuumed/same-pool: VACUUM first; SELECT 1 on the claim's pool
//	vacuumed/other-pool: BenchmarkClaimLose's set-up
//
// The pools have one connection each, so that every operation of a case
// runs on the same server backend (same pool) or on two (other pool).
func BenchmarkClaimLoseAsService(b *testing.B) {
	for _, tc := range []struct {
		name               string
		vacuum, ownPoolSel bool
	}{
		{"fresh/same-pool", false, false},
		{"fresh/other-pool", false, true},
		{"vacuumed/same-pool", true, false},
		{"vacuumed/other-pool", true, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			db := benchDB(b)
			one := func(c *pgxpool.Config) { c.MaxConns = 1 }
			pool := db.NewPool(b, one)
			store := benchStore(b, pool)
			holder := benchClaimer(b, store, "holder")
			loser := benchClaimer(b, store, "loser")
			const held = "held"
			mustWin(b, holder, held)
			if tc.vacuum {
				if _, err := pool.Exec(context.Background(), "VACUUM (ANALYZE) "+store.Table()); err != nil {
					b.Fatal(err)
				}
			}
			selPool := pool
			if tc.ownPoolSel {
				selPool = db.NewPool(b, one)
			}
			res, _ := interleave(b, []timedOp{
				{"select1", func(int) time.Duration { return timed(func() { selectOne(b, selPool) }) }},
				{"lose", func(int) time.Duration { return timed(func() { mustLose(b, loser, held) }) }},
			})
			sel, lose := micros(res[0].pct(50)), micros(res[1].pct(50))
			b.ReportMetric(sel, "select1-p50-µs")
			b.ReportMetric(lose, "lose-p50-µs")
			b.ReportMetric(ratio(lose, sel), "lose/select1")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkSkipInfoLogger: a lost claim on a MemoryStore (no round trip,
// so the library's own cost shows) by a Claimer whose logger drops Debug,
// as a service's Info-level logger does. Skips are logged at Debug; the
// skip's text is formatted only when the logger keeps Debug.
func BenchmarkSkipInfoLogger(b *testing.B) {
	store := runclaim.NewMemoryStore()
	holder := benchClaimer(b, store, "holder")
	mustWin(b, holder, "held")
	info := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	loser := benchClaimer(b, store, "loser", runclaim.WithLogger(info))
	b.ReportAllocs()
	for b.Loop() {
		mustLose(b, loser, "held")
	}
}

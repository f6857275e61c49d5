package runclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// BenchmarkClaimState: what states cost a claim, interleaved on one
// database, each op one call of the claim function as the store sends it
// (without the Claimer, whose work is the same for all of them): a win
// that does not ask for the state ("win-no-ask", what a claim on a table
// without states would cost), a win that asks and finds none saved
// ("win"), one that returns a state of 100 bytes ("win-state"), a loss that
// asks and one that does not ("lose", "lose-no-ask"), and a save of 100
// bytes ("save"). Reported: the p50 of each and the ratios (target: a win
// with no state saved at most 1.05x one that does not ask).
func BenchmarkClaimState(b *testing.B) {
	db := benchDB(b)
	ctx := context.Background()
	store := benchStore(b, db.Pool)
	c := benchClaimer(b, store, "bench")
	call := `SELECT won, run_id, run_state FROM ` + runclaim.ClaimBodyName(store) +
		`($1, $2, 'bench', 3600000000, 0, 1000, NULL, NULL, NULL, $3, NULL, NULL)`
	finish := `UPDATE ` + store.Table() + ` SET status = 'succeeded', finished_at = pg_catalog.clock_timestamp() WHERE id = $1`
	sources := benchSources(16)
	withState := benchSources(32)[16:]
	state := make([]byte, 100)
	for _, src := range withState {
		r := mustWin(b, c, src)
		if err := r.SaveState(ctx, state); err != nil {
			b.Fatal(err)
		}
		mustFinish(b, r)
	}
	const held = "held"
	mustWin(b, benchClaimer(b, store, "holder"), held)
	claim := func(src string, ask, wantWin, wantState bool) time.Duration {
		var (
			won  bool
			id   *int64
			st   []byte
			took time.Duration
		)
		took = timed(func() {
			if err := db.Pool.QueryRow(ctx, call, runclaim.AdvisoryKeyOf(runclaim.DefaultNamespace, src), src, ask).Scan(&won, &id, &st); err != nil {
				b.Fatalf("claim of %s: %v", src, err)
			}
		})
		if won != wantWin || (st != nil) != wantState {
			b.Fatalf("claim of %s (asking for the state %v): won %v, state %q", src, ask, won, st)
		}
		if won {
			if _, err := db.Pool.Exec(ctx, finish, *id); err != nil {
				b.Fatal(err)
			}
		}
		return took
	}
	win := func(srcs []string, ask, wantState bool) func(int) time.Duration {
		return func(i int) time.Duration { return claim(srcs[i%len(srcs)], ask, true, wantState) }
	}
	lose := func(ask bool) func(int) time.Duration {
		return func(int) time.Duration { return claim(held, ask, false, false) }
	}
	saver := mustWin(b, benchClaimer(b, store, "saver"), "saver")
	ops := []timedOp{
		{"win-no-ask", win(sources, false, false)},
		{"win", win(sources, true, false)},
		{"win-state", win(withState, true, true)},
		{"lose-no-ask", lose(false)},
		{"lose", lose(true)},
		{"save", func(int) time.Duration {
			return timed(func() {
				if err := saver.SaveState(ctx, state); err != nil {
					b.Fatal(err)
				}
			})
		}},
	}
	res, _ := interleave(b, ops)
	p50 := make(map[string]float64, len(ops))
	for i, op := range ops {
		p50[op.name] = micros(res[i].pct(50))
		b.ReportMetric(p50[op.name], op.name+"-p50-µs")
	}
	b.ReportMetric(ratio(p50["win"], p50["win-no-ask"]), "win/win-no-ask")
	b.ReportMetric(ratio(p50["win-state"], p50["win-no-ask"]), "win-state/win-no-ask")
	b.ReportMetric(ratio(p50["lose"], p50["lose-no-ask"]), "lose/lose-no-ask")
	b.ReportMetric(0, "ns/op")
}

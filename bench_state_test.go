package runclaim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// BenchmarkClaimState: what states (schema version 9) cost a claim,
// interleaved on one database: a win on a table at version 9 with no
// state saved ("v9-win") against a win on a table at version 8, which the
// store claims on as it did before states ("v8-win", today's win); a win
// that returns a state of 100 bytes ("v9-win-state"); a lost claim on
// each ("v9-lose", "v8-lose"); and a save of 100 bytes ("save").
// Reported: the p50 of each and the ratios.
func BenchmarkClaimState(b *testing.B) {
	db := benchDB(b)
	ctx := context.Background()
	store9 := benchStore(b, db.Pool)
	store8, err := runclaim.NewPostgresStore(db.Pool, runclaim.WithTable(runclaim.DefaultSchema, "runs_v8"))
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range store8.Migrations() {
		if m.Version > 8 {
			break
		}
		if _, err := db.Pool.Exec(ctx, m.Up); err != nil {
			b.Fatalf("step %d: %v", m.Version, err)
		}
	}
	if v, _, err := store8.SchemaVersion(ctx); err != nil || v != 8 {
		b.Fatalf("SchemaVersion of the version 8 table: %d, %v", v, err)
	}
	c9, c8 := benchClaimer(b, store9, "bench"), benchClaimer(b, store8, "bench")
	sources := benchSources(16)
	withState := benchSources(32)[16:]
	state := make([]byte, 100)
	for _, src := range withState {
		r := mustWin(b, c9, src)
		if err := r.SaveState(ctx, state); err != nil {
			b.Fatal(err)
		}
		mustFinish(b, r)
	}
	const held = "held"
	mustWin(b, benchClaimer(b, store9, "holder"), held)
	mustWin(b, benchClaimer(b, store8, "holder"), held)
	win := func(c *runclaim.Claimer, srcs []string, wantState bool) func(int) time.Duration {
		return func(i int) time.Duration {
			var run *runclaim.Run
			var err error
			d := timed(func() { run, err = c.Claim(ctx, srcs[i%len(srcs)]) })
			if err != nil {
				b.Fatalf("claim: %v", err)
			}
			if (run.State() != nil) != wantState {
				b.Fatalf("claim of %s: state %q", run.Source, run.State())
			}
			mustFinish(b, run)
			return d
		}
	}
	lose := func(c *runclaim.Claimer) func(int) time.Duration {
		return func(int) time.Duration {
			return timed(func() {
				if _, err := c.Claim(ctx, held); !errors.Is(err, runclaim.ErrAlreadyRunning) {
					b.Fatalf("claim of %s: %v", held, err)
				}
			})
		}
	}
	saver := mustWin(b, benchClaimer(b, store9, "saver"), "saver")
	ops := []timedOp{
		{"v8-win", win(c8, sources, false)},
		{"v9-win", win(c9, sources, false)},
		{"v9-win-state", win(c9, withState, true)},
		{"v8-lose", lose(c8)},
		{"v9-lose", lose(c9)},
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
	b.ReportMetric(ratio(p50["v9-win"], p50["v8-win"]), "v9-win/v8-win")
	b.ReportMetric(ratio(p50["v9-win-state"], p50["v8-win"]), "v9-win-state/v8-win")
	b.ReportMetric(ratio(p50["v9-lose"], p50["v8-lose"]), "v9-lose/v8-lose")
	b.ReportMetric(0, "ns/op")
}

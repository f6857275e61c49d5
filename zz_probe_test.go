package runclaim_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

func TestZZProbe(t *testing.T) {
	db := pgtest.New(t)
	store := benchStore(t, db.Pool)
	ctx := t.Context()
	const full, starts = "site:full", 20000
	store.SetLimit(ctx, full, runclaim.Limit{MaxStarts: starts, Per: time.Hour})
	db.Pool.Exec(ctx, `INSERT INTO `+runclaim.StartsTable(store)+` (key, started_at, run_id)
SELECT $1, pg_catalog.clock_timestamp() - i * interval '100 milliseconds', -i FROM pg_catalog.generate_series($2::int, 1, -1) AS i`, full, starts)
	store.Claim(ctx, runclaim.ClaimRequest{Source: "held", Owner: "o", Lease: time.Hour})
	db.Pool.Exec(ctx, "VACUUM ANALYZE "+runclaim.StartsTable(store))
	srcs := benchSources(16)
	res := map[string][]time.Duration{}
	for i := 0; i < 1000; i++ {
		if os.Getenv("ZZ_WRITES") != "" {
			t0 := time.Now()
			info, err := store.Claim(ctx, runclaim.ClaimRequest{Source: srcs[i%16], Owner: "o", Lease: time.Hour})
			res["win"] = append(res["win"], time.Since(t0))
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Finish(ctx, runclaim.FinishRequest{ID: info.ID, Source: info.Source, StartedAt: info.StartedAt, Status: runclaim.StatusSucceeded}); err != nil {
				t.Fatal(err)
			}
		}
		t0 := time.Now()
		if _, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "free", Owner: "o", Lease: time.Hour, Keys: []string{full}}); !errors.Is(err, runclaim.ErrLimited) {
			t.Fatal(err)
		}
		res["full"] = append(res["full"], time.Since(t0))
		t0 = time.Now()
		if _, err := store.Claim(ctx, runclaim.ClaimRequest{Source: "held", Owner: "o", Lease: time.Hour}); !errors.Is(err, runclaim.ErrAlreadyRunning) {
			t.Fatal(err)
		}
		res["held"] = append(res["held"], time.Since(t0))
	}
	for name, d := range res {
		slices.Sort(d)
		fmt.Printf("%s p50 %v\n", name, d[len(d)/2])
	}
}

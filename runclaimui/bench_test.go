package runclaimui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/runclaimui"
)

// The fleet the console's cost is measured on: 10,000 sources with 100
// runs each, 1,000,000 rows. $RUNCLAIMUI_BENCH_SOURCES sets another
// number of sources: CI's smoke run of the benchmarks, which only keeps
// them running, loads 1,000.
const benchRuns = 100

func benchSources(b *testing.B) int {
	if v := os.Getenv("RUNCLAIMUI_BENCH_SOURCES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("RUNCLAIMUI_BENCH_SOURCES=%q: want a positive number", v)
		}
		return n
	}
	return 10_000
}

// BenchmarkPages measures the server time of each page (the handler's
// ServeHTTP: the database's reads and the rendering) for 10,000 sources
// and 1,000,000 history rows: every 7th run failed, the newest run of
// every 50th source running. Target: the sources page in 200 ms or less.
//
//	go test -run '^$' -bench BenchmarkPages -benchtime 20x ./runclaimui
func BenchmarkPages(b *testing.B) {
	ctx := context.Background()
	db := pgtest.New(b)
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	sources := benchSources(b)
	start := time.Now()
	_, err = db.Pool.Exec(ctx, `INSERT INTO `+store.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at, finished_at, error)
SELECT 'source-' || lpad(s::text, 5, '0'),
	CASE WHEN r = $2 AND s % 50 = 0 THEN 'running' WHEN (s + r) % 7 = 0 THEN 'failed' ELSE 'succeeded' END,
	'replica-' || (s % 10),
	t, CASE WHEN r = $2 AND s % 50 = 0 THEN pg_catalog.now() + interval '1 hour' ELSE t + interval '30 seconds' END, t,
	CASE WHEN r = $2 AND s % 50 = 0 THEN NULL ELSE t + interval '2 seconds' END,
	CASE WHEN (s + r) % 7 = 0 THEN 'upstream: 503 Service Unavailable' END
FROM pg_catalog.generate_series(1, $1::int) AS s, pg_catalog.generate_series(1, $2::int) AS r,
	LATERAL (SELECT pg_catalog.now() - ($2::int - r) * interval '1 hour' - s * interval '1 millisecond' AS t) AS ts`, sources, benchRuns)
	if err != nil {
		b.Fatalf("load: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, "VACUUM ANALYZE "+store.Table()); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d rows in %v", sources*benchRuns, time.Since(start).Round(time.Millisecond))
	for i := range 20 {
		if err := store.Pause(ctx, "source-0"+string(rune('1'+i%9))+"000", time.Time{}, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	h, err := runclaimui.New(store, runclaimui.WithMaxAge(26*time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	for _, page := range []struct{ name, path string }{
		{"sources", "/"},
		{"sources-filtered", "/?show=failing&page=3"},
		{"history", "/sources/source-04200?limit=1000"},
		{"keys", "/keys"},
	} {
		b.Run(page.name, func(b *testing.B) {
			var bytes int
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, page.path, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d\n%s", page.path, rec.Code, rec.Body)
				}
				bytes = rec.Body.Len()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/page")
			b.ReportMetric(float64(bytes), "B/page")
		})
	}
}

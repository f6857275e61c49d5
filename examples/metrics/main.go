// Command metrics wires runclaim.Hooks to Prometheus metrics: claims by
// outcome (claimed, skipped or failed), skips by reason, claim latency, run
// duration by outcome, failed heartbeats and lost leases. With a Postgres
// store it also registers a SourceCollector, which reads the runs table at
// scrape time and exports each source's last success, last start and
// running state: what an alert on a run that did not happen needs.
//
// It lives in a module of its own, so that Prometheus is not in the
// dependencies of the runclaim module: an importer of runclaim downloads
// none of it.
//
// Two replicas (goroutines with a Claimer each, standing in for two
// processes) tick two sources for a few ticks; then the program prints the
// runclaim metrics in the Prometheus text format and exits. With -listen it
// keeps ticking and serves /metrics on that loopback address until
// interrupted. By default the replicas share an in-memory store; with
// DATABASE_URL set they share a Postgres table of the examples' own,
// public.runclaim_example_runs, in an advisory lock namespace of their own,
// so that they never compete with a real service's jobs:
//
//	cd examples/metrics
//	go run .
//	go run . -listen 127.0.0.1:9464   # then: curl -s 127.0.0.1:9464/metrics | grep ^runclaim_
//	DATABASE_URL=postgres://user:pass@localhost:5432/db go run .
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/runclaim/runclaim"
)

// Metrics are the Prometheus metrics of one or more Claimers. Label values
// are bounded: the sources a service claims, and fixed outcome words.
type Metrics struct {
	claims          *prometheus.CounterVec   // source, outcome: claimed | skipped | failed
	skips           *prometheus.CounterVec   // source, reason: already_running | too_soon | tick_done | paused | other
	claimLatency    *prometheus.HistogramVec // outcome
	runDuration     *prometheus.HistogramVec // source, status: succeeded | failed
	heartbeatErrors *prometheus.CounterVec   // source
	leasesLost      *prometheus.CounterVec   // source
	lastLeaseLost   prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runclaim_claims_total",
			Help: "Claims by outcome: claimed (this replica runs the tick), skipped, or failed (a database error, the caller's context ended, or invalid input).",
		}, []string{"source", "outcome"}),
		skips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runclaim_skips_total",
			Help: "Skipped claims by reason: already_running (another run holds the source), too_soon (minimum interval), tick_done (the tick was served), paused (an operator paused the source), or other (a reason this version does not know).",
		}, []string{"source", "reason"}),
		claimLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runclaim_claim_duration_seconds",
			Help:    "How long a claim took, by outcome.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 14), // 100µs .. 0.8s
		}, []string{"outcome"}),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runclaim_run_duration_seconds",
			Help:    "From claim to recorded outcome, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10), // 10ms .. 43min
		}, []string{"source", "status"}),
		heartbeatErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runclaim_heartbeat_failures_total",
			Help: "Heartbeats that failed without losing the lease (yet), such as with the database unreachable.",
		}, []string{"source"}),
		leasesLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runclaim_leases_lost_total",
			Help: "Runs whose holder learned that the run was no longer its own.",
		}, []string{"source"}),
		lastLeaseLost: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runclaim_lease_lost_last_timestamp_seconds",
			Help: "When a run was last lost, as a Unix time; 0 if never. Alert on changes().",
		}),
	}
	reg.MustRegister(m.claims, m.skips, m.claimLatency, m.runDuration, m.heartbeatErrors, m.leasesLost, m.lastLeaseLost)
	return m
}

// Hooks returns the runclaim.Hooks that update m; pass them to
// runclaim.WithHooks. Each hook is a few atomic adds: quick enough to run
// on the claiming goroutine, as runclaim requires.
func (m *Metrics) Hooks() runclaim.Hooks {
	return runclaim.Hooks{
		Claimed: func(e runclaim.ClaimedEvent) {
			m.claims.WithLabelValues(e.Run.Source, "claimed").Inc()
			m.claimLatency.WithLabelValues("claimed").Observe(e.Duration.Seconds())
		},
		Skipped: func(e runclaim.SkippedEvent) {
			reason := skipReason(e.Err)
			m.claims.WithLabelValues(e.Source, "skipped").Inc()
			m.skips.WithLabelValues(e.Source, reason).Inc()
			m.claimLatency.WithLabelValues("skipped").Observe(e.Duration.Seconds())
		},
		ClaimFailed: func(e runclaim.ClaimFailedEvent) {
			// An outage shows as failed claims, not as a quiet period
			// without claims. An invalid source is any string a bug
			// made: it is counted under one label value, to keep the
			// labels bounded.
			source := e.Source
			if errors.Is(e.Err, runclaim.ErrInvalidSource) {
				source = "(invalid)"
			}
			m.claims.WithLabelValues(source, "failed").Inc()
			m.claimLatency.WithLabelValues("failed").Observe(e.Duration.Seconds())
		},
		Finished: func(e runclaim.FinishedEvent) {
			m.runDuration.WithLabelValues(e.Run.Source, string(e.Status)).Observe(e.Duration.Seconds())
		},
		HeartbeatFailed: func(e runclaim.HeartbeatFailedEvent) {
			m.heartbeatErrors.WithLabelValues(e.Run.Source).Inc()
		},
		LeaseLost: func(e runclaim.LeaseLostEvent) {
			m.leasesLost.WithLabelValues(e.Run.Source).Inc()
			m.lastLeaseLost.SetToCurrentTime()
		},
	}
}

// skipReasons maps each reason to skip that runclaim defines to its label
// value in runclaim_skips_total.
var skipReasons = []struct {
	err   error
	label string
}{
	{runclaim.ErrAlreadyRunning, "already_running"},
	{runclaim.ErrTooSoon, "too_soon"},
	{runclaim.ErrTickDone, "tick_done"},
	{runclaim.ErrPaused, "paused"},
}

// skipReason is the reason label of a skip with err: the reason's own, or
// "other" for a reason not in skipReasons.
func skipReason(err error) string {
	for _, r := range skipReasons {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return "other"
}

const (
	period = 100 * time.Millisecond // the schedule; a minute or more in a real service
	ticks  = 6                      // without -listen
)

func main() {
	listen := flag.String("listen", "", "serve /metrics on this loopback `address` (such as 127.0.0.1:9464) until interrupted, instead of printing the metrics once")
	flag.Parse()
	if *listen != "" {
		if err := checkLoopback(*listen); err != nil {
			log.Fatal(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	store, closeStore, err := openStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeStore()

	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	if states, ok := store.(StateReader); ok {
		reg.MustRegister(NewSourceCollector(states))
	}

	n := ticks
	if *listen != "" {
		n = -1 // until interrupted
		srv := &http.Server{Addr: *listen, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				log.Print(err)
				stop()
			}
		}()
		defer srv.Close()
		fmt.Printf("serving http://%s/metrics; interrupt to stop\n", *listen)
	}

	var wg sync.WaitGroup
	for _, name := range []string{"replica-a", "replica-b"} {
		claimer, err := runclaim.New(store,
			runclaim.WithOwner(name),
			runclaim.WithMinInterval(period/2),
			runclaim.WithHooks(metrics.Hooks()),
		)
		if err != nil {
			log.Fatal(err)
		}
		wg.Go(func() { replica(ctx, claimer, n) })
	}
	wg.Wait()
	if *listen != "" {
		return
	}

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range families {
		if _, err := expfmt.MetricFamilyToText(os.Stdout, mf); err != nil {
			log.Fatal(err)
		}
	}
}

// replica ticks n times (forever if n < 0) and claims both sources on each
// tick. slow-sweep takes a while, so the other replica's claim finds it
// running; quick-sweep is instant, so the other replica's claim comes after
// it has finished and is skipped for being too soon. quick-sweep fails on
// every third tick, to show failed runs.
func replica(ctx context.Context, claimer *runclaim.Claimer, n int) {
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for tick := 1; n < 0 || tick <= n; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		_ = claimer.Do(ctx, "slow-sweep", func(ctx context.Context, _ *runclaim.Run) error {
			select {
			case <-time.After(20 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		_ = claimer.Do(ctx, "quick-sweep", func(context.Context, *runclaim.Run) error {
			if tick%3 == 0 {
				return errors.New("upstream answered 503")
			}
			return nil
		})
	}
}

// checkLoopback refuses an address that is not on the loopback interface:
// this example is not meant to expose anything to the network.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("-listen %q: give a loopback address, such as 127.0.0.1:9464", addr)
	}
	return nil
}

// openStore returns an in-memory store, or a Postgres store when
// DATABASE_URL is set.
func openStore(ctx context.Context) (runclaim.Store, func(), error) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		fmt.Println("# store: in memory (set DATABASE_URL to use Postgres)")
		return runclaim.NewMemoryStore(), func() {}, nil
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	store, err := runclaim.NewPostgresStore(pool,
		runclaim.WithTable(runclaim.DefaultSchema, "runclaim_example_runs"),
		runclaim.WithNamespace("runclaim-example"))
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	fmt.Println("# store: Postgres, table", strings.ReplaceAll(store.Table(), `"`, ""))
	return store, pool.Close, nil
}

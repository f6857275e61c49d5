// Command metrics wires runclaim.Hooks to Prometheus metrics with the
// runclaimprom package: claims by outcome (claimed, skipped or failed),
// skips by reason, claim latency, run duration by outcome, failed
// heartbeats and lost leases. With a Postgres store it also registers a
// runclaimprom.SourceCollector, which reads the runs table at scrape time
// and exports each source's last success, last start and running state:
// what an alert on a run that did not happen needs.
//
// It lives in a module of its own, as runclaimprom does, so that
// Prometheus is not in the dependencies of the runclaim module: an
// importer of runclaim downloads none of it.
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
	"github.com/runclaim/runclaim/runclaimprom"
)

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
	metrics, err := runclaimprom.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	if states, ok := store.(runclaimprom.StateReader); ok {
		reg.MustRegister(runclaimprom.NewSourceCollector(states))
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

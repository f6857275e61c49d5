// Command example wires runclaimotel to OpenTelemetry's stdout exporters:
// two replicas (goroutines with a Claimer each) tick two sources a few
// times, and the program prints every span and then the metrics, as JSON,
// on standard output. By default the replicas share an in-memory store;
// with DATABASE_URL set they share a Postgres table of the examples' own,
// public.runclaim_example_runs, and runclaim.source.time_since_last_success
// is read from it:
//
//	cd runclaimotel
//	go run ./example
//	DATABASE_URL=postgres://user:pass@localhost:5432/db go run ./example
package main

import (
	"context"
	"errors"
	"log"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/runclaimotel"
)

const (
	period = 100 * time.Millisecond // the schedule; a minute or more in a real service
	ticks  = 3
)

func main() {
	ctx := context.Background()
	spanExp, err := stdouttrace.New(stdouttrace.WithPrettyPrint())
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spanExp))
	metricExp, err := stdoutmetric.New(stdoutmetric.WithPrettyPrint())
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metricExp)))

	opts := []runclaimotel.Option{runclaimotel.WithTracerProvider(tp), runclaimotel.WithMeterProvider(mp),
		runclaimotel.WithSchedule("slow-sweep", "@every 100ms")}
	var store runclaim.Store = runclaim.NewMemoryStore()
	if url := os.Getenv("DATABASE_URL"); url != "" {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			log.Fatal(err)
		}
		defer pool.Close()
		pg, err := runclaim.NewPostgresStore(pool,
			runclaim.WithTable(runclaim.DefaultSchema, "runclaim_example_runs"),
			runclaim.WithNamespace("runclaim-example"))
		if err == nil {
			err = pg.Migrate(ctx)
		}
		if err != nil {
			log.Fatal(err)
		}
		store = pg
		opts = append(opts, runclaimotel.WithStateReader(pg))
	}
	tel, err := runclaimotel.New(opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer tel.Close()

	var wg sync.WaitGroup
	for _, name := range []string{"replica-a", "replica-b"} {
		claimer, err := runclaim.New(store, runclaim.WithOwner(name), runclaim.WithMinInterval(period/2),
			runclaim.WithHooks(tel.Hooks()))
		if err != nil {
			log.Fatal(err)
		}
		wg.Go(func() { replica(ctx, tel, claimer) })
	}
	wg.Wait()
	if err := tp.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	if err := mp.Shutdown(ctx); err != nil { // exports the metrics once
		log.Fatal(err)
	}
}

// replica ticks a few times and claims both sources on each tick;
// quick-sweep fails on its last tick, to show a failed run.
func replica(ctx context.Context, tel *runclaimotel.Telemetry, claimer *runclaim.Claimer) {
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for tick := 1; tick <= ticks; tick++ {
		<-ticker.C
		_ = claimer.Do(ctx, "slow-sweep", func(ctx context.Context, run *runclaim.Run) error {
			// Spans started from this context are children of the run's.
			ctx = tel.ContextWithRun(ctx, run)
			select {
			case <-time.After(20 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		_ = claimer.Do(ctx, "quick-sweep", func(context.Context, *runclaim.Run) error {
			if tick == ticks {
				return errors.New("upstream answered 503")
			}
			return nil
		})
	}
}

package runclaimotel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strings"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/runclaimotel"
)

// Wire a Claimer to the stdout exporters: one span per run, spans of their
// own for skips, and the runclaim metrics. (The exporters here write into
// a buffer so that the example can print what they wrote in a stable
// order; a service gives them os.Stdout, or uses an OTLP exporter.)
func Example() {
	ctx := context.Background()
	var spansOut, metricsOut bytes.Buffer
	spanExp, err := stdouttrace.New(stdouttrace.WithWriter(&spansOut), stdouttrace.WithoutTimestamps())
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spanExp))
	metricExp, err := stdoutmetric.New(stdoutmetric.WithWriter(&metricsOut), stdoutmetric.WithoutTimestamps())
	if err != nil {
		log.Fatal(err)
	}
	reader := sdkmetric.NewPeriodicReader(metricExp)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	tel, err := runclaimotel.New(runclaimotel.WithTracerProvider(tp), runclaimotel.WithMeterProvider(mp),
		runclaimotel.WithSchedule("nightly-report", "0 3 * * *"), runclaimotel.WithSkipSpans())
	if err != nil {
		log.Fatal(err)
	}
	defer tel.Close()

	store := runclaim.NewMemoryStore()
	a, _ := runclaim.New(store, runclaim.WithOwner("pod-a"), runclaim.WithHooks(tel.Hooks()))
	b, _ := runclaim.New(store, runclaim.WithOwner("pod-b"), runclaim.WithHooks(tel.Hooks()))
	_ = a.Do(ctx, "nightly-report", func(ctx context.Context, run *runclaim.Run) error {
		// pod-b's tick finds the run in progress: a skip.
		_ = b.Do(ctx, "nightly-report", func(context.Context, *runclaim.Run) error { return nil })
		return nil
	})
	_ = a.Do(ctx, "sweep", func(context.Context, *runclaim.Run) error { return errors.New("upstream answered 503") })

	_ = tp.Shutdown(ctx)
	_ = mp.Shutdown(ctx) // exports the metrics once

	dec := json.NewDecoder(&spansOut)
	for dec.More() {
		var span struct {
			Name       string
			Status     struct{ Code, Description string }
			Attributes []struct {
				Key   string
				Value struct{ Value any }
			}
		}
		if err := dec.Decode(&span); err != nil {
			log.Fatal(err)
		}
		var source, outcome any
		for _, a := range span.Attributes {
			switch a.Key {
			case "runclaim.source":
				source = a.Value.Value
			case "runclaim.claim.outcome":
				outcome = a.Value.Value
			}
		}
		line := fmt.Sprintf("span %q of %v", span.Name, source)
		if outcome != nil {
			line += fmt.Sprintf(" (%v)", outcome)
		}
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s: %s %s", line, span.Status.Code, span.Status.Description)))
	}
	var metrics struct {
		ScopeMetrics []struct{ Metrics []struct{ Name, Unit string } }
	}
	if err := json.Unmarshal(metricsOut.Bytes(), &metrics); err != nil {
		log.Fatal(err)
	}
	for _, sm := range metrics.ScopeMetrics {
		for _, m := range sm.Metrics {
			fmt.Printf("metric %s (%s)\n", m.Name, m.Unit)
		}
	}
	// Output:
	// span "runclaim.claim" of nightly-report (skipped): Unset
	// span "runclaim.run" of nightly-report: Unset
	// span "runclaim.run" of sweep: Error upstream answered 503
	// metric runclaim.claims ({claim})
	// metric runclaim.claim.duration (s)
	// metric runclaim.run.duration (s)
	// metric runclaim.active_runs ({run})
	// metric runclaim.source.time_since_last_success (s)
	// metric runclaim.run.oldest_age (s)
}

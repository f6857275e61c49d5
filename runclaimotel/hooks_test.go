package runclaimotel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/runclaimotel"
)

// faultyStore is a memory store whose heartbeats fail as told.
type faultyStore struct {
	*runclaim.MemoryStore
	mu        sync.Mutex // protects heartbeat
	heartbeat error      // returned by Heartbeat when not nil
	finish    error      // returned by Finish when not nil
}

func (s *faultyStore) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	s.mu.Lock()
	err := s.heartbeat
	s.mu.Unlock()
	if err != nil {
		return time.Time{}, err
	}
	return s.MemoryStore.Heartbeat(ctx, req)
}

func (s *faultyStore) Finish(ctx context.Context, req runclaim.FinishRequest) error {
	s.mu.Lock()
	err := s.finish
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.MemoryStore.Finish(ctx, req)
}

func (s *faultyStore) set(heartbeat, finish error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heartbeat, s.finish = heartbeat, finish
}

// downStore is a store whose database is down.
type downStore struct{ runclaim.Store }

func (downStore) Claim(context.Context, runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	return runclaim.RunInfo{}, errDown
}

var errDown = errors.New("dial tcp 10.0.0.5:5432: connection refused")

type bundle struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tel    *runclaimotel.Telemetry
}

func setup(t *testing.T, opts ...runclaimotel.Option) bundle {
	t.Helper()
	b := bundle{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tel, err := runclaimotel.New(append([]runclaimotel.Option{runclaimotel.WithTracerProvider(tp), runclaimotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tel.Close(); err != nil {
			t.Error(err)
		}
	})
	b.tel = tel
	return b
}

func (b bundle) claimer(t *testing.T, store runclaim.Store, owner string) *runclaim.Claimer {
	t.Helper()
	c, err := runclaim.New(store, runclaim.WithOwner(owner), runclaim.WithLease(time.Minute), runclaim.WithHooks(b.tel.Hooks()))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// attrs is a set of attributes as a map, for comparison.
func attrs(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func equalAttrs(t *testing.T, what string, got []attribute.KeyValue, want map[string]string) {
	t.Helper()
	g := attrs(got)
	if fmt.Sprint(g) != fmt.Sprint(want) { // fmt sorts map keys
		t.Errorf("%s: attributes\n got %v\nwant %v", what, g, want)
	}
}

// spanNamed returns the one ended span that what names: "run SOURCE" (a
// run span of SOURCE), "skip SOURCE" or "claim SOURCE" (a claim span of
// SOURCE with the outcome skipped or failed), or a span's name.
func spanNamed(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	match := func(s sdktrace.ReadOnlySpan) bool { return s.Name() == name }
	if kind, source, ok := strings.Cut(name, " "); ok {
		spanName, outcome := runclaimotel.SpanRun, ""
		switch kind {
		case "skip":
			spanName, outcome = runclaimotel.SpanClaim, runclaimotel.OutcomeSkipped
		case "claim":
			spanName, outcome = runclaimotel.SpanClaim, runclaimotel.OutcomeFailed
		}
		match = func(s sdktrace.ReadOnlySpan) bool {
			a := attrs(s.Attributes())
			return s.Name() == spanName && a["runclaim.source"] == source && a["runclaim.claim.outcome"] == outcome
		}
	}
	var found []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if match(s) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1", len(found), name)
	}
	return found[0]
}

// metrics collects the reader's metrics by name.
func (b bundle) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := b.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != runclaimotel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// points returns a metric's data points as "attrs=value" lines, sorted;
// for histograms the value is the count.
func points(t *testing.T, m metricdata.Metrics) []string {
	t.Helper()
	var out []string
	line := func(set attribute.Set, v string) {
		out = append(out, fmt.Sprint(attrs(set.ToSlice()))+"="+v)
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			line(p.Attributes, strconv.FormatInt(p.Value, 10))
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			line(p.Attributes, strconv.FormatUint(p.Count, 10))
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			line(p.Attributes, "gauge")
		}
	default:
		t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
	}
	sort.Strings(out)
	return out
}

func wantPoints(t *testing.T, ms map[string]metricdata.Metrics, name, unit string, want ...string) {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		t.Errorf("no metric %s", name)
		return
	}
	if m.Unit != unit || m.Description == "" {
		t.Errorf("%s: unit %q, want %q; description %q", name, m.Unit, unit, m.Description)
	}
	sort.Strings(want)
	if got := points(t, m); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n got %q\nwant %q", name, got, want)
	}
}

// TestSpansAndMetrics runs a succeeded run, a failed one, a panic under
// Do, a run whose heartbeat fails and then whose lease is lost, a skip and
// two failed claims, and checks every span's name, kind, times, status,
// attributes and events, and every metric's points, units and attributes.
func TestSpansAndMetrics(t *testing.T) {
	b := setup(t, runclaimotel.WithSchedule("nightly", "0 3 * * *"), runclaimotel.WithSkipSpans())
	store := &faultyStore{MemoryStore: runclaim.NewMemoryStore()}
	a := b.claimer(t, store, "pod-a")
	other := b.claimer(t, store, "pod-b")
	ctx := t.Context()

	// 1. nightly succeeds; a child span started from ContextWithRun belongs to it.
	before := time.Now()
	err := a.Do(ctx, "nightly", func(ctx context.Context, run *runclaim.Run) error {
		cctx := b.tel.ContextWithRun(ctx, run)
		_, span := trace.SpanFromContext(cctx).TracerProvider().Tracer("test").Start(cctx, "child")
		span.End()
		// 2. A skip: another replica finds nightly running.
		if _, err := other.Claim(ctx, "nightly"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
			t.Errorf("second claim: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// 3. sweep fails.
	if err := a.Do(ctx, "sweep", func(context.Context, *runclaim.Run) error { return errors.New("upstream answered 503") }); err == nil {
		t.Fatal("sweep: no error")
	}
	// 4. panicky panics under Do.
	func() {
		defer func() {
			if v := recover(); v != "index out of range" {
				t.Errorf("recovered %v", v)
			}
		}()
		_ = a.Do(ctx, "panicky", func(context.Context, *runclaim.Run) error { panic("index out of range") })
	}()
	// 5. fragile: a heartbeat fails, then the lease is lost.
	run, err := a.Claim(ctx, "fragile")
	if err != nil {
		t.Fatal(err)
	}
	store.set(errDown, nil)
	if err := run.Heartbeat(ctx); !errors.Is(err, errDown) {
		t.Fatalf("heartbeat: %v", err)
	}
	lost := fmt.Errorf("runclaim: heartbeat run %d: %w", run.ID, runclaim.ErrLeaseLost)
	store.set(lost, lost)
	if err := run.Heartbeat(ctx); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Fatalf("heartbeat: %v", err)
	}
	if err := run.Finish(ctx, nil); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Fatalf("finish: %v", err)
	}
	store.set(nil, nil)
	// 6. Failed claims: the database is down; an invalid source.
	down := b.claimer(t, downStore{store}, "pod-a")
	if _, err := down.Claim(ctx, "nightly"); !errors.Is(err, errDown) {
		t.Fatalf("claim: %v", err)
	}
	if _, err := down.Claim(ctx, "bad\x00source"); !errors.Is(err, runclaim.ErrInvalidSource) {
		t.Fatalf("claim: %v", err)
	}
	after := time.Now()

	spans := b.spans.Ended()
	if len(spans) != 8 {
		for _, s := range spans {
			t.Log(s.Name())
		}
		t.Fatalf("%d spans ended, want 8", len(spans))
	}
	if started := b.spans.Started(); len(started) != len(spans) {
		t.Errorf("%d spans started, %d ended: a span was left open", len(started), len(spans))
	}
	for _, s := range spans {
		if s.SpanKind() != trace.SpanKindInternal && s.Name() != "child" {
			t.Errorf("%s: kind %v", s.Name(), s.SpanKind())
		}
		if s.StartTime().Before(before) || s.EndTime().After(after) || s.EndTime().Before(s.StartTime()) {
			t.Errorf("%s: from %v to %v, not within the test's %v to %v", s.Name(), s.StartTime(), s.EndTime(), before, after)
		}
		if s.InstrumentationScope().Name != runclaimotel.ScopeName && s.Name() != "child" {
			t.Errorf("%s: scope %q", s.Name(), s.InstrumentationScope().Name)
		}
	}

	runAttrs := func(source string, id int64, owner, status string, extra ...string) map[string]string {
		m := map[string]string{
			"runclaim.source": source, "runclaim.run.id": strconv.FormatInt(id, 10), "runclaim.run.owner": owner,
			"runclaim.run.status": status,
		}
		for i := 0; i < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	ids := map[string]int64{}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if kv.Key == runclaimotel.RunIDKey && s.Name() == runclaimotel.SpanRun {
				ids["run "+attrs(s.Attributes())["runclaim.source"]] = kv.Value.AsInt64()
			}
		}
	}

	nightly := spanNamed(t, spans, "run nightly")
	equalAttrs(t, "run nightly", nightly.Attributes(), runAttrs("nightly", ids["run nightly"], "pod-a", "succeeded", "runclaim.schedule", "0 3 * * *"))
	if nightly.Status().Code != codes.Unset || len(nightly.Events()) != 0 || nightly.Parent().IsValid() {
		t.Errorf("run nightly: status %v, events %v, parent %v", nightly.Status(), nightly.Events(), nightly.Parent())
	}
	child := spanNamed(t, spans, "child")
	if child.Parent().SpanID() != nightly.SpanContext().SpanID() || child.SpanContext().TraceID() != nightly.SpanContext().TraceID() {
		t.Errorf("child's parent %v, want the run's span %v", child.Parent(), nightly.SpanContext())
	}

	skip := spanNamed(t, spans, "skip nightly")
	equalAttrs(t, "skip nightly", skip.Attributes(), map[string]string{
		"runclaim.source": "nightly", "runclaim.claim.outcome": "skipped", "runclaim.skip.reason": "already_running",
		"runclaim.holder.run.id": strconv.FormatInt(ids["run nightly"], 10), "runclaim.holder.run.owner": "pod-a"})
	if skip.Status().Code != codes.Unset {
		t.Errorf("skip: status %v", skip.Status())
	}

	sweep := spanNamed(t, spans, "run sweep")
	equalAttrs(t, "run sweep", sweep.Attributes(), runAttrs("sweep", ids["run sweep"], "pod-a", "failed", "error.type", "*errors.errorString"))
	if sweep.Status() != (sdktrace.Status{Code: codes.Error, Description: "upstream answered 503"}) {
		t.Errorf("run sweep: status %v", sweep.Status())
	}
	wantException(t, sweep, "upstream answered 503")

	panicky := spanNamed(t, spans, "run panicky")
	equalAttrs(t, "run panicky", panicky.Attributes(), runAttrs("panicky", ids["run panicky"], "pod-a", "failed", "error.type", "panic"))
	if panicky.Status() != (sdktrace.Status{Code: codes.Error, Description: "panic: index out of range"}) {
		t.Errorf("run panicky: status %v", panicky.Status())
	}
	wantException(t, panicky, "panic: index out of range")

	fragile := spanNamed(t, spans, "run fragile")
	equalAttrs(t, "run fragile", fragile.Attributes(), runAttrs("fragile", run.ID, "pod-a", "lost", "error.type", "runclaim.lease_lost"))
	if fragile.Status() != (sdktrace.Status{Code: codes.Error, Description: lost.Error()}) {
		t.Errorf("run fragile: status %v", fragile.Status())
	}
	if ev := fragile.Events(); len(ev) != 2 || ev[0].Name != runclaimotel.EventHeartbeatFailed || ev[1].Name != runclaimotel.EventLeaseLost {
		t.Errorf("run fragile: events %v, want a failed heartbeat and a lost lease", ev)
	} else {
		equalAttrs(t, "heartbeat event", ev[0].Attributes, map[string]string{"error.type": "*errors.errorString", "exception.message": errDown.Error()})
		equalAttrs(t, "lease event", ev[1].Attributes, map[string]string{"exception.message": lost.Error()})
	}

	claimNightly := spanNamed(t, spans, "claim nightly")
	equalAttrs(t, "claim nightly", claimNightly.Attributes(), map[string]string{
		"runclaim.source": "nightly", "runclaim.claim.outcome": "failed", "error.type": "*errors.errorString"})
	if claimNightly.Status() != (sdktrace.Status{Code: codes.Error, Description: errDown.Error()}) {
		t.Errorf("claim nightly: status %v", claimNightly.Status())
	}
	wantException(t, claimNightly, errDown.Error())
	invalid := spanNamed(t, spans, "claim (invalid)")
	equalAttrs(t, "claim (invalid)", invalid.Attributes(), map[string]string{
		"runclaim.source": "(invalid)", "runclaim.claim.outcome": "failed", "error.type": "runclaim.invalid_source"})

	ms := b.metrics(t)
	if len(ms) != 8 {
		t.Errorf("%d metrics, want 8: %v", len(ms), ms)
	}
	wantPoints(t, ms, "runclaim.claims", "{claim}",
		"map[runclaim.claim.outcome:claimed runclaim.source:fragile]=1",
		"map[runclaim.claim.outcome:claimed runclaim.source:nightly]=1",
		"map[runclaim.claim.outcome:claimed runclaim.source:panicky]=1",
		"map[runclaim.claim.outcome:claimed runclaim.source:sweep]=1",
		"map[runclaim.claim.outcome:skipped runclaim.skip.reason:already_running runclaim.source:nightly]=1",
		"map[error.type:*errors.errorString runclaim.claim.outcome:failed runclaim.source:nightly]=1",
		"map[error.type:runclaim.invalid_source runclaim.claim.outcome:failed runclaim.source:(invalid)]=1")
	wantPoints(t, ms, "runclaim.claim.duration", "s",
		"map[runclaim.claim.outcome:claimed runclaim.source:fragile]=1",
		"map[runclaim.claim.outcome:claimed runclaim.source:nightly]=1",
		"map[runclaim.claim.outcome:claimed runclaim.source:panicky]=1",
		"map[runclaim.claim.outcome:claimed runclaim.source:sweep]=1",
		"map[runclaim.claim.outcome:skipped runclaim.source:nightly]=1",
		"map[runclaim.claim.outcome:failed runclaim.source:nightly]=1",
		"map[runclaim.claim.outcome:failed runclaim.source:(invalid)]=1")
	wantPoints(t, ms, "runclaim.run.duration", "s",
		"map[runclaim.run.status:succeeded runclaim.source:nightly]=1",
		"map[runclaim.run.status:failed runclaim.source:sweep]=1",
		"map[runclaim.run.status:failed runclaim.source:panicky]=1",
		"map[runclaim.run.status:lost runclaim.source:fragile]=1")
	wantPoints(t, ms, "runclaim.active_runs", "{run}",
		"map[runclaim.source:fragile]=0", "map[runclaim.source:nightly]=0",
		"map[runclaim.source:panicky]=0", "map[runclaim.source:sweep]=0")
	wantPoints(t, ms, "runclaim.heartbeat.failures", "{heartbeat}", "map[runclaim.source:fragile]=1")
	wantPoints(t, ms, "runclaim.leases_lost", "{lease}", "map[runclaim.source:fragile]=1")
	wantPoints(t, ms, "runclaim.source.time_since_last_success", "s", "map[runclaim.source:nightly]=gauge")
	wantPoints(t, ms, "runclaim.run.oldest_age", "s", "map[]=gauge") // no run open: 0
	if o := ms["runclaim.run.oldest_age"].Data.(metricdata.Gauge[float64]); len(o.DataPoints) != 1 || o.DataPoints[0].Value != 0 {
		t.Errorf("runclaim.run.oldest_age with no run open: %v, want 0", o.DataPoints)
	}
	if g := ms["runclaim.source.time_since_last_success"].Data.(metricdata.Gauge[float64]); len(g.DataPoints) == 1 {
		if v := g.DataPoints[0].Value; v < 0 || v > after.Sub(before).Seconds()+time.Since(after).Seconds() {
			t.Errorf("time since nightly's success %v s, want between 0 and the test's duration", v)
		}
	}
	// The sums are cumulative and the histograms' values are durations.
	if sum := ms["runclaim.claims"].Data.(metricdata.Sum[int64]); !sum.IsMonotonic || sum.Temporality != metricdata.CumulativeTemporality {
		t.Errorf("runclaim.claims: monotonic %v, temporality %v", sum.IsMonotonic, sum.Temporality)
	}
	if sum := ms["runclaim.active_runs"].Data.(metricdata.Sum[int64]); sum.IsMonotonic {
		t.Error("runclaim.active_runs is monotonic, want an up-down counter")
	}
	for _, p := range ms["runclaim.run.duration"].Data.(metricdata.Histogram[float64]).DataPoints {
		if p.Sum < 0 || p.Sum > after.Sub(before).Seconds() {
			t.Errorf("run duration %v s", p.Sum)
		}
	}
}

// wantException checks that s recorded one exception event with message.
func wantException(t *testing.T, s sdktrace.ReadOnlySpan, message string) {
	t.Helper()
	ev := s.Events()
	if len(ev) != 1 || ev[0].Name != "exception" || attrs(ev[0].Attributes)["exception.message"] != message {
		t.Errorf("%s: events %v, want one exception with message %q", s.Name(), ev, message)
	}
}

// TestActiveRuns: runs in progress count up at the claim and down at the
// finish, per source.
func TestActiveRuns(t *testing.T) {
	b := setup(t)
	c := b.claimer(t, runclaim.NewMemoryStore(), "pod-a")
	r1, err := c.Claim(t.Context(), "one")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Claim(t.Context(), "two")
	if err != nil {
		t.Fatal(err)
	}
	wantPoints(t, b.metrics(t), "runclaim.active_runs", "{run}", "map[runclaim.source:one]=1", "map[runclaim.source:two]=1")
	if len(b.spans.Ended()) != 0 || len(b.spans.Started()) != 2 {
		t.Errorf("started %d, ended %d spans; want 2 open", len(b.spans.Started()), len(b.spans.Ended()))
	}
	_ = r1.Finish(t.Context(), nil)
	wantPoints(t, b.metrics(t), "runclaim.active_runs", "{run}", "map[runclaim.source:one]=0", "map[runclaim.source:two]=1")
	_ = r2.Finish(t.Context(), nil)
	_ = r2.Finish(t.Context(), nil) // a repeated Finish changes nothing
	wantPoints(t, b.metrics(t), "runclaim.active_runs", "{run}", "map[runclaim.source:one]=0", "map[runclaim.source:two]=0")
	if len(b.spans.Ended()) != 2 {
		t.Errorf("%d spans ended, want 2", len(b.spans.Ended()))
	}
}

// fakeStates is a StateReader with fixed answers.
type fakeStates struct {
	states []runclaim.SourceState
	err    error
}

func (f fakeStates) SourceStates(context.Context) ([]runclaim.SourceState, error) {
	return f.states, f.err
}

// TestTimeSinceSuccessFromTable: with a StateReader the gauge is the
// table's answer for every source that ever succeeded, and a read error
// is the collection's error.
func TestTimeSinceSuccessFromTable(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rec := func(ago time.Duration, status runclaim.Status) *runclaim.RunRecord {
		return &runclaim.RunRecord{RunInfo: runclaim.RunInfo{ID: 1, StartedAt: now.Add(-ago)}, Status: status}
	}
	states := []runclaim.SourceState{
		{Source: "fresh", CheckedAt: now, Latest: rec(time.Minute, runclaim.StatusSucceeded), LastSuccess: rec(time.Minute, runclaim.StatusSucceeded)},
		{Source: "stale", CheckedAt: now, Latest: rec(time.Second, runclaim.StatusRunning), LastSuccess: rec(3*time.Hour, runclaim.StatusSucceeded)},
		{Source: "never", CheckedAt: now, Latest: rec(time.Second, runclaim.StatusFailed)},
	}
	b := setup(t, runclaimotel.WithStateReader(fakeStates{states: states}))
	g := b.metrics(t)["runclaim.source.time_since_last_success"].Data.(metricdata.Gauge[float64])
	got := map[string]float64{}
	for _, p := range g.DataPoints {
		v, _ := p.Attributes.Value(runclaimotel.SourceKey)
		got[v.AsString()] = p.Value
	}
	if fmt.Sprint(got) != fmt.Sprint(map[string]float64{"fresh": 60, "stale": 10800}) {
		t.Errorf("time since last success %v, want fresh 60 and stale 10800, never absent", got)
	}
	// The oldest running run is stale's, started a second before the read.
	if o := b.metrics(t)["runclaim.run.oldest_age"].Data.(metricdata.Gauge[float64]); len(o.DataPoints) != 1 || o.DataPoints[0].Value != 1 {
		t.Errorf("runclaim.run.oldest_age %v, want one point of 1 s", o.DataPoints)
	}

	broken := setup(t, runclaimotel.WithStateReader(fakeStates{err: errDown}))
	var rm metricdata.ResourceMetrics
	if err := broken.reader.Collect(context.Background(), &rm); err == nil || !strings.Contains(err.Error(), errDown.Error()) {
		t.Errorf("collect with the database down: %v, want its error", err)
	}
}

// TestStartLateness: a run of a tick records its start minus its tick in
// runclaim.run.start_lateness, without the source's attribute unless
// WithLatenessBySource is given; a plain claim records nothing there.
func TestStartLateness(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 1, 30, 0, time.UTC)
	for _, bySource := range []bool{false, true} {
		var opts []runclaimotel.Option
		if bySource {
			opts = append(opts, runclaimotel.WithLatenessBySource())
		}
		b := setup(t, opts...)
		c := b.claimer(t, runclaim.NewMemoryStore(runclaim.WithClock(func() time.Time { return now })), "pod-a")
		if _, err := c.Claim(t.Context(), "sweep", runclaim.ForTick(now.Add(-90*time.Second))); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Claim(t.Context(), "plain"); err != nil {
			t.Fatal(err)
		}
		h := b.metrics(t)["runclaim.run.start_lateness"].Data.(metricdata.Histogram[float64])
		if len(h.DataPoints) != 1 || h.DataPoints[0].Count != 1 || h.DataPoints[0].Sum != 90 {
			t.Fatalf("by source %v: %v, want one point of one 90 s sample", bySource, h.DataPoints)
		}
		v, has := h.DataPoints[0].Attributes.Value(runclaimotel.SourceKey)
		if has != bySource || (bySource && v.AsString() != "sweep") {
			t.Errorf("by source %v: attributes %v", bySource, h.DataPoints[0].Attributes)
		}
	}
}

// TestConcurrentRuns: hooks called from many goroutines at once keep one
// span per run and balanced counts (run with -race).
func TestConcurrentRuns(t *testing.T) {
	b := setup(t)
	c := b.claimer(t, runclaim.NewMemoryStore(), "pod-a")
	const workers, rounds = 8, 20
	odd := errors.New("odd round")
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				err := c.Do(t.Context(), fmt.Sprintf("src-%d", w), func(context.Context, *runclaim.Run) error {
					if i%2 == 1 {
						return odd
					}
					return nil
				})
				if err != nil && !errors.Is(err, odd) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got := len(b.spans.Ended()); got != workers*rounds {
		t.Errorf("%d spans, want %d", got, workers*rounds)
	}
	var active, runs int64
	ms := b.metrics(t)
	for _, p := range ms["runclaim.active_runs"].Data.(metricdata.Sum[int64]).DataPoints {
		active += p.Value
	}
	for _, p := range ms["runclaim.run.duration"].Data.(metricdata.Histogram[float64]).DataPoints {
		runs += int64(p.Count)
	}
	if active != 0 || runs != workers*rounds {
		t.Errorf("active runs %d, run durations %d; want 0 and %d", active, runs, workers*rounds)
	}
}

// TestSkipReasonPaused: a claim of a paused source is a skip whose reason
// is paused, in its span and its metric.
func TestSkipReasonPaused(t *testing.T) {
	b := setup(t, runclaimotel.WithSkipSpans())
	store := runclaim.NewMemoryStore()
	if err := store.Pause(t.Context(), "nightly", time.Time{}, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.claimer(t, store, "pod-a").Claim(t.Context(), "nightly"); !errors.Is(err, runclaim.ErrPaused) {
		t.Fatalf("claim of a paused source: %v, want ErrPaused", err)
	}
	skip := spanNamed(t, b.spans.Ended(), "skip nightly")
	equalAttrs(t, "skip nightly", skip.Attributes(), map[string]string{
		"runclaim.source": "nightly", "runclaim.claim.outcome": "skipped", "runclaim.skip.reason": "paused"})
	wantPoints(t, b.metrics(t), "runclaim.claims", "{claim}",
		"map[runclaim.claim.outcome:skipped runclaim.skip.reason:paused runclaim.source:nightly]=1")
}

// TestSkipReasonLimited: a claim skipped for a key is a skip whose reason
// is limited, with the key, in its span and its metric.
func TestSkipReasonLimited(t *testing.T) {
	b := setup(t, runclaimotel.WithSkipSpans())
	store := runclaim.NewMemoryStore()
	if err := store.Cooldown(t.Context(), "site:avito", time.Now().Add(time.Hour), "HTTP 429"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.claimer(t, store, "pod-a").Claim(t.Context(), "nightly", runclaim.WithKeys("site:avito")); !errors.Is(err, runclaim.ErrLimited) {
		t.Fatalf("claim of a cooling key: %v, want ErrLimited", err)
	}
	skip := spanNamed(t, b.spans.Ended(), "skip nightly")
	equalAttrs(t, "skip nightly", skip.Attributes(), map[string]string{
		"runclaim.source": "nightly", "runclaim.claim.outcome": "skipped", "runclaim.skip.reason": "limited", "runclaim.key": "site:avito"})
	wantPoints(t, b.metrics(t), "runclaim.claims", "{claim}",
		"map[runclaim.claim.outcome:skipped runclaim.key:site:avito runclaim.skip.reason:limited runclaim.source:nightly]=1")
}

// TestSkipReasonTickDone: a claim of a tick already served is a skip whose
// reason is tick_done, in its span and its metric.
func TestSkipReasonTickDone(t *testing.T) {
	b := setup(t, runclaimotel.WithSkipSpans())
	c := b.claimer(t, runclaim.NewMemoryStore(), "pod-a")
	tick := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	run, err := c.Claim(t.Context(), "nightly", runclaim.ForTick(tick))
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(t.Context(), "nightly", runclaim.ForTick(tick)); !errors.Is(err, runclaim.ErrTickDone) {
		t.Fatalf("claim of a served tick: %v, want ErrTickDone", err)
	}
	skip := spanNamed(t, b.spans.Ended(), "skip nightly")
	equalAttrs(t, "skip nightly", skip.Attributes(), map[string]string{
		"runclaim.source": "nightly", "runclaim.claim.outcome": "skipped", "runclaim.skip.reason": "tick_done"})
	// The run that served the tick says which, as runclaim.run.tick.
	served := spanNamed(t, b.spans.Ended(), "run nightly")
	equalAttrs(t, "run nightly", served.Attributes(), map[string]string{
		"runclaim.source": "nightly", "runclaim.run.id": strconv.FormatInt(run.ID, 10), "runclaim.run.owner": "pod-a",
		"runclaim.run.status": "succeeded", "runclaim.run.tick": "2026-12-01T03:00:00Z"})
	wantPoints(t, b.metrics(t), "runclaim.claims", "{claim}",
		"map[runclaim.claim.outcome:claimed runclaim.source:nightly]=1",
		"map[runclaim.claim.outcome:skipped runclaim.skip.reason:tick_done runclaim.source:nightly]=1")
}

// TestSkipReasons: each reason runclaim defines has its own value of
// runclaim.skip.reason, and a reason it does not know is other, never one
// of the known ones.
func TestSkipReasons(t *testing.T) {
	for reason, want := range map[error]string{
		runclaim.ErrAlreadyRunning:           runclaimotel.ReasonAlreadyRunning,
		runclaim.ErrTooSoon:                  runclaimotel.ReasonTooSoon,
		runclaim.ErrTickDone:                 runclaimotel.ReasonTickDone,
		runclaim.ErrPaused:                   runclaimotel.ReasonPaused,
		runclaim.ErrLimited:                  runclaimotel.ReasonLimited,
		errors.New("runclaim: rate limited"): runclaimotel.ReasonOther,
	} {
		b := setup(t, runclaimotel.WithSkipSpans())
		b.tel.Hooks().Skipped(runclaim.Event{Source: "nightly", Err: &runclaim.NotClaimedError{Source: "nightly", Reason: reason}})
		skip := spanNamed(t, b.spans.Ended(), "skip nightly")
		equalAttrs(t, reason.Error(), skip.Attributes(), map[string]string{
			"runclaim.source": "nightly", "runclaim.claim.outcome": "skipped", "runclaim.skip.reason": want})
		wantPoints(t, b.metrics(t), "runclaim.claims", "{claim}",
			"map[runclaim.claim.outcome:skipped runclaim.skip.reason:"+want+" runclaim.source:nightly]=1")
	}
	// Every reason runclaim lists, a new one too, under its own label.
	for _, r := range runclaim.SkipReasons {
		b := setup(t)
		b.tel.Hooks().Skipped(runclaim.Event{Source: "nightly", Err: &runclaim.NotClaimedError{Source: "nightly", Reason: r.Err}})
		wantPoints(t, b.metrics(t), "runclaim.claims", "{claim}",
			"map[runclaim.claim.outcome:skipped runclaim.skip.reason:"+r.Label+" runclaim.source:nightly]=1")
	}
}

// TestSkipSpansOff: without WithSkipSpans a skip makes no span, and is
// counted all the same.
func TestSkipSpansOff(t *testing.T) {
	b := setup(t)
	store := runclaim.NewMemoryStore()
	if err := store.Pause(t.Context(), "nightly", time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.claimer(t, store, "pod-a").Claim(t.Context(), "nightly"); !errors.Is(err, runclaim.ErrPaused) {
		t.Fatalf("claim of a paused source: %v, want ErrPaused", err)
	}
	if spans := b.spans.Ended(); len(spans) != 0 {
		t.Errorf("%d spans, want none: %v", len(spans), spans[0].Name())
	}
	wantPoints(t, b.metrics(t), "runclaim.claims", "{claim}",
		"map[runclaim.claim.outcome:skipped runclaim.skip.reason:paused runclaim.source:nightly]=1")
}

// TestSpansJoinTheCallersTrace: the span of a run, of a skip and of a
// failed claim is a child of the span in the claim's context, whatever
// the claim's form (Claim, Do, ClaimMany, a waiting claim).
func TestSpansJoinTheCallersTrace(t *testing.T) {
	b := setup(t, runclaimotel.WithSkipSpans())
	store := runclaim.NewMemoryStore()
	c := b.claimer(t, store, "pod-a")
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans)).Tracer("caller")
	ctx, caller := tracer.Start(t.Context(), "scheduler tick")
	run, err := c.Claim(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "a"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("second claim: %v", err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "b", func(context.Context, *runclaim.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.DoMany(ctx, []string{"c"}, func(context.Context, *runclaim.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "bad\x00source"); !errors.Is(err, runclaim.ErrInvalidSource) {
		t.Fatalf("claim of an invalid source: %v", err)
	}
	waited, err := c.Claim(ctx, "a", runclaim.Wait())
	if err != nil {
		t.Fatal(err)
	}
	if err := waited.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	caller.End()
	ours := 0
	for _, s := range b.spans.Ended() {
		if s.Name() == "scheduler tick" {
			continue
		}
		ours++
		if s.Parent().SpanID() != caller.SpanContext().SpanID() || s.SpanContext().TraceID() != caller.SpanContext().TraceID() {
			t.Errorf("span %s of %v: parent %v, want the caller's span %v", s.Name(), attrs(s.Attributes()), s.Parent().SpanID(), caller.SpanContext().SpanID())
		}
	}
	if ours != 6 { // runs a, b, c and a again; the skip; the failed claim
		t.Errorf("%d spans of runclaimotel, want 6", ours)
	}
}

// TestReplacedRun: a run that a claim with Replace asked to stop ends its
// span with runclaim.run.status replaced and no error status, whatever its
// function returned on the cancellation.
func TestReplacedRun(t *testing.T) {
	b := setup(t)
	store := runclaim.NewMemoryStore()
	holder := b.claimer(t, store, "holder")
	replacer := b.claimer(t, store, "replacer")
	ctx := t.Context()
	run, err := holder.Claim(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan error, 1)
	go func() {
		r, err := replacer.Claim(ctx, "job", runclaim.Replace())
		if err == nil {
			err = r.Finish(ctx, nil)
		}
		won <- err
	}()
	for run.Heartbeat(ctx) == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if err := run.Finish(ctx, context.Canceled); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	for _, s := range b.spans.Ended() {
		if attrs(s.Attributes())["runclaim.run.owner"] != "holder" {
			continue
		}
		if got := attrs(s.Attributes())["runclaim.run.status"]; got != runclaimotel.StatusReplaced || s.Status().Code == codes.Error {
			t.Errorf("the replaced run's span: status %q, span status %v; want %q and no error", got, s.Status().Code, runclaimotel.StatusReplaced)
		}
		return
	}
	t.Error("no span of the replaced run")
}

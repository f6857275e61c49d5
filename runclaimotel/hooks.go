package runclaimotel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/runclaim/runclaim"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/runclaim/runclaim/runclaimotel"

// Attribute keys of runclaim's own (see the package doc for why).
const (
	SourceKey       = attribute.Key("runclaim.source")
	RunIDKey        = attribute.Key("runclaim.run.id")
	RunOwnerKey     = attribute.Key("runclaim.run.owner")
	RunStatusKey    = attribute.Key("runclaim.run.status")
	ClaimOutcomeKey = attribute.Key("runclaim.claim.outcome")
	SkipReasonKey   = attribute.Key("runclaim.skip.reason")
	KeyKey          = attribute.Key("runclaim.key")              // the key of a limited skip
	RunTickKey      = attribute.Key("runclaim.run.tick")         // the tick a run serves (ForTick), RFC 3339 in UTC
	ScheduleKey     = attribute.Key("runclaim.schedule")         // a source's schedule (WithSchedule)
	HolderRunIDKey  = attribute.Key("runclaim.holder.run.id")    // on a skip: the run that holds the source
	HolderOwnerKey  = attribute.Key("runclaim.holder.run.owner") // on a skip: that run's owner
)

// Span names: low-cardinality, as the conventions ask (the source is an
// attribute, never part of the name).
const (
	SpanRun   = "runclaim.run"   // a run, from its claim to its outcome or its lost lease
	SpanClaim = "runclaim.claim" // a claim that did not start a run: a skip (WithSkipSpans) or a failure
)

// Values of RunStatusKey, ClaimOutcomeKey and SkipReasonKey, and of
// error.type for the errors runclaim itself defines.
const (
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusLost      = "lost"     // the holder learned that its lease was lost
	StatusReplaced  = "replaced" // a claim with Replace asked the run to stop, and it did

	OutcomeClaimed = "claimed"
	OutcomeSkipped = "skipped"
	OutcomeFailed  = "failed"

	ReasonAlreadyRunning = "already_running"
	ReasonTooSoon        = "too_soon"
	ReasonTickDone       = "tick_done"
	ReasonPaused         = "paused"
	ReasonLimited        = "limited" // a key the claim named had no room; KeyKey names it
	ReasonOther          = "other"   // a reason this package does not know

	ErrorTypePanic         = "panic"
	ErrorTypeLeaseLost     = "runclaim.lease_lost"
	ErrorTypeInvalidSource = "runclaim.invalid_source"
)

// Span event names.
const (
	EventHeartbeatFailed = "runclaim.heartbeat.failed"
	EventLeaseLost       = "runclaim.lease.lost"
)

// invalidSource stands for a source that ValidateSource refused, in
// attributes and span names: it may be any string a bug made.
const invalidSource = "(invalid)"

// StateReader reads the state of every source from the runs table.
// *runclaim.PostgresStore implements it.
type StateReader interface {
	SourceStates(ctx context.Context) ([]runclaim.SourceState, error)
}

var _ StateReader = (*runclaim.PostgresStore)(nil)

// StateReadTimeout bounds a StateReader's read at collection time.
const StateReadTimeout = 5 * time.Second

// An Option configures New.
type Option func(*config)

type config struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	states    StateReader
	schedules map[string]string
	skipSpans bool
	bySource  bool
	now       func() time.Time
}

// WithTracerProvider sets the tracer provider (default: otel's global one).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets the meter provider (default: otel's global one).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithStateReader makes runclaim.source.time_since_last_success come from
// the runs table, read with r at each collection (at most StateReadTimeout),
// instead of from this process's own runs.
func WithStateReader(r StateReader) Option {
	return func(c *config) { c.states = r }
}

// WithSchedule records source's schedule, a cron expression, as
// runclaim.schedule on its run spans.
func WithSchedule(source, cron string) Option {
	return func(c *config) {
		if c.schedules == nil {
			c.schedules = map[string]string{}
		}
		c.schedules[source] = cron
	}
}

// WithLatenessBySource gives runclaim.run.start_lateness the source's
// attribute. Off by default: a histogram keeps a series per bucket, so an
// attribute per source multiplies them by the sources; turn it on for a
// few scheduled sources whose lateness you alert on one by one.
func WithLatenessBySource() Option {
	return func(c *config) { c.bySource = true }
}

// WithSkipSpans makes a span of every skipped claim (SpanClaim, with
// runclaim.claim.outcome skipped, the reason and the holder). Without it a
// skip is counted in runclaim.claims and makes no span: every replica but
// one skips every tick, and a span each would flood the traces with what
// the metric already says.
func WithSkipSpans() Option {
	return func(c *config) { c.skipSpans = true }
}

// parent is the context a span of event e starts from: the caller's, so
// that a run's span joins the trace of the code that claimed it.
func parent(e runclaim.Event) context.Context {
	if e.Context != nil {
		return e.Context
	}
	return context.Background()
}

// Telemetry turns a Claimer's hooks into spans and metrics. It is safe for
// concurrent use; one Telemetry may serve several Claimers.
type Telemetry struct {
	cfg    config
	tracer trace.Tracer

	claims, heartbeatFailures, leasesLost metric.Int64Counter
	claimDuration, runDuration, lateness  metric.Float64Histogram
	activeRuns                            metric.Int64UpDownCounter
	registration                          metric.Registration

	mu          sync.Mutex                // protects the fields below
	spans       map[*runclaim.Run]runSpan // the open span of each run
	lastSuccess map[string]time.Time      // when this process last saw each source's succeeded run start, local clock
}

// runSpan is an open run span and what ending it needs.
type runSpan struct {
	span    trace.Span
	source  attribute.KeyValue
	started time.Time // when the claim was sent, local clock
}

// New returns a Telemetry whose instruments are registered with the meter
// provider. Call Close to unregister its gauge's callback.
func New(opts ...Option) (*Telemetry, error) {
	cfg := config{now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	t := &Telemetry{
		cfg:         cfg,
		tracer:      cfg.tp.Tracer(ScopeName),
		spans:       map[*runclaim.Run]runSpan{},
		lastSuccess: map[string]time.Time{},
	}
	meter := cfg.mp.Meter(ScopeName)
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	t.claims, err = meter.Int64Counter("runclaim.claims", metric.WithUnit("{claim}"),
		metric.WithDescription(claimsDescription))
	add(err)
	t.claimDuration, err = meter.Float64Histogram("runclaim.claim.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a claim took, by outcome."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	add(err)
	t.runDuration, err = meter.Float64Histogram("runclaim.run.duration", metric.WithUnit("s"),
		metric.WithDescription("From the claim to the recorded outcome, or to the lost lease, by status."),
		metric.WithExplicitBucketBoundaries(0.01, 0.1, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600))
	add(err)
	t.activeRuns, err = meter.Int64UpDownCounter("runclaim.active_runs", metric.WithUnit("{run}"),
		metric.WithDescription("Runs this process holds: claimed, and neither finished nor lost."))
	add(err)
	t.heartbeatFailures, err = meter.Int64Counter("runclaim.heartbeat.failures", metric.WithUnit("{heartbeat}"),
		metric.WithDescription("Heartbeats that failed without losing the lease (yet), such as with the database unreachable."))
	add(err)
	t.leasesLost, err = meter.Int64Counter("runclaim.leases_lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Runs whose holder learned that the run was no longer its own."))
	add(err)
	t.lateness, err = meter.Float64Histogram("runclaim.run.start_lateness", metric.WithUnit("s"),
		metric.WithDescription("How late a run of a scheduled tick (ForTick) started: its start minus its tick, by the database's clock; by source only with WithLatenessBySource."),
		metric.WithExplicitBucketBoundaries(0.01, 0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600))
	add(err)
	since, err := meter.Float64ObservableGauge("runclaim.source.time_since_last_success", metric.WithUnit("s"),
		metric.WithDescription("Time since the start of the source's newest succeeded run; absent if it never succeeded."))
	add(err)
	oldest, err := meter.Float64ObservableGauge("runclaim.run.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest running run has been running: of any source in the runs table with WithStateReader, else of this process's runs; 0 while none runs."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("runclaimotel: %w", err)
	}
	t.registration, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		return t.observeSince(ctx, o, since, oldest)
	}, since, oldest)
	if err != nil {
		return nil, fmt.Errorf("runclaimotel: %w", err)
	}
	return t, nil
}

// Close unregisters the gauge's callback. Spans of runs still open are
// left as they are. It is safe to call twice.
func (t *Telemetry) Close() error {
	t.mu.Lock()
	reg := t.registration
	t.registration = nil
	t.mu.Unlock()
	if reg == nil {
		return nil
	}
	return reg.Unregister()
}

// Hooks returns the runclaim.Hooks that record t's spans and metrics; pass
// them to runclaim.WithHooks. Each hook does a few map and atomic
// operations, quick enough for the claiming goroutine, as runclaim requires.
func (t *Telemetry) Hooks() runclaim.Hooks {
	return runclaim.Hooks{
		Claimed:         t.claimed,
		Skipped:         t.skipped,
		ClaimFailed:     t.claimFailed,
		Finished:        t.finished,
		HeartbeatFailed: t.heartbeatFailed,
		LeaseLost:       t.leaseLost,
	}
}

// ContextWithRun returns ctx carrying run's span, so that spans started
// from it are the run's children; ctx as it is if run has no open span.
func (t *Telemetry) ContextWithRun(ctx context.Context, run *runclaim.Run) context.Context {
	t.mu.Lock()
	rs, ok := t.spans[run]
	t.mu.Unlock()
	if !ok {
		return ctx
	}
	return trace.ContextWithSpan(ctx, rs.span)
}

func (t *Telemetry) claimed(e runclaim.Event) {
	now := t.cfg.now()
	run := e.Run
	source := SourceKey.String(run.Source)
	attrs := []attribute.KeyValue{
		source,
		RunIDKey.Int64(run.ID),
		RunOwnerKey.String(run.Owner),
	}
	if !run.Tick.IsZero() {
		attrs = append(attrs, RunTickKey.String(run.Tick.UTC().Format(time.RFC3339Nano)))
	}
	if cron, ok := t.cfg.schedules[run.Source]; ok {
		attrs = append(attrs, ScheduleKey.String(cron))
	}
	started := now.Add(-e.Duration)
	_, span := t.tracer.Start(parent(e), SpanRun,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(started),
		trace.WithAttributes(attrs...))
	t.mu.Lock()
	t.spans[run] = runSpan{span: span, source: source, started: started}
	t.mu.Unlock()

	ctx := context.Background()
	outcome := ClaimOutcomeKey.String(OutcomeClaimed)
	t.claims.Add(ctx, 1, metric.WithAttributes(source, outcome))
	t.claimDuration.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(source, outcome))
	t.activeRuns.Add(ctx, 1, metric.WithAttributes(source))
	if !run.Tick.IsZero() {
		var la []attribute.KeyValue
		if t.cfg.bySource {
			la = append(la, source)
		}
		t.lateness.Record(ctx, run.StartedAt.Sub(run.Tick).Seconds(), metric.WithAttributes(la...))
	}
}

func (t *Telemetry) skipped(e runclaim.Event) {
	now := t.cfg.now()
	source := SourceKey.String(e.Source)
	outcome := ClaimOutcomeKey.String(OutcomeSkipped)
	reason := SkipReasonKey.String(skipReason(e.Err))
	attrs := []attribute.KeyValue{source, outcome, reason}
	metricAttrs := attrs
	if nc := (*runclaim.NotClaimedError)(nil); errors.As(e.Err, &nc) {
		if nc.Holder != nil {
			attrs = append(attrs, HolderRunIDKey.Int64(nc.Holder.ID), HolderOwnerKey.String(nc.Holder.Owner))
		}
		if errors.Is(e.Err, runclaim.ErrLimited) && nc.Key != "" {
			key := KeyKey.String(nc.Key)
			attrs = append(attrs, key)
			metricAttrs = []attribute.KeyValue{source, outcome, reason, key}
		}
	}
	if t.cfg.skipSpans {
		_, span := t.tracer.Start(parent(e), SpanClaim,
			trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(now.Add(-e.Duration)),
			trace.WithAttributes(attrs...))
		span.End(trace.WithTimestamp(now))
	}

	ctx := context.Background()
	t.claims.Add(ctx, 1, metric.WithAttributes(metricAttrs...))
	t.claimDuration.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(source, outcome))
}

func (t *Telemetry) claimFailed(e runclaim.Event) {
	now := t.cfg.now()
	name := e.Source
	errType := errorType(e.Err)
	if errors.Is(e.Err, runclaim.ErrInvalidSource) || runclaim.ValidateSource(e.Source) != nil {
		name, errType = invalidSource, ErrorTypeInvalidSource
	}
	source := SourceKey.String(name)
	outcome := ClaimOutcomeKey.String(OutcomeFailed)
	et := semconv.ErrorTypeKey.String(errType)
	_, span := t.tracer.Start(parent(e), SpanClaim,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(now.Add(-e.Duration)),
		trace.WithAttributes(source, outcome, et))
	span.RecordError(e.Err, trace.WithTimestamp(now))
	span.SetStatus(codes.Error, e.Err.Error())
	span.End(trace.WithTimestamp(now))

	ctx := context.Background()
	t.claims.Add(ctx, 1, metric.WithAttributes(source, outcome, et))
	t.claimDuration.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(source, outcome))
}

func (t *Telemetry) finished(e runclaim.Event) {
	now := t.cfg.now()
	rs, ok := t.take(e.Run)
	if !ok {
		return // claimed before these hooks were in place
	}
	status := StatusSucceeded
	switch e.Status {
	case runclaim.StatusSucceeded:
	case runclaim.StatusReplaced:
		status = StatusReplaced // asked to stop: not an error, whatever fn returned
	default:
		status = StatusFailed
	}
	span := rs.span
	span.SetAttributes(RunStatusKey.String(status))
	if e.Err != nil && status != StatusReplaced {
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(e.Err)))
		span.RecordError(e.Err, trace.WithTimestamp(now))
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End(trace.WithTimestamp(now))
	if status == StatusSucceeded {
		t.mu.Lock()
		if rs.started.After(t.lastSuccess[e.Run.Source]) {
			t.lastSuccess[e.Run.Source] = rs.started
		}
		t.mu.Unlock()
	}
	t.ended(rs, status, now)
}

func (t *Telemetry) heartbeatFailed(e runclaim.Event) {
	t.mu.Lock()
	rs, ok := t.spans[e.Run]
	t.mu.Unlock()
	source := SourceKey.String(e.Run.Source)
	if ok {
		rs.span.AddEvent(EventHeartbeatFailed, trace.WithAttributes(
			semconv.ErrorTypeKey.String(errorType(e.Err)),
			semconv.ExceptionMessageKey.String(e.Err.Error())))
	}
	t.heartbeatFailures.Add(context.Background(), 1, metric.WithAttributes(source))
}

func (t *Telemetry) leaseLost(e runclaim.Event) {
	now := t.cfg.now()
	source := SourceKey.String(e.Run.Source)
	t.leasesLost.Add(context.Background(), 1, metric.WithAttributes(source))
	rs, ok := t.take(e.Run)
	if !ok {
		return
	}
	span := rs.span
	span.AddEvent(EventLeaseLost, trace.WithTimestamp(now), trace.WithAttributes(
		semconv.ExceptionMessageKey.String(e.Err.Error())))
	span.SetAttributes(RunStatusKey.String(StatusLost), semconv.ErrorTypeKey.String(ErrorTypeLeaseLost))
	span.SetStatus(codes.Error, e.Err.Error())
	span.End(trace.WithTimestamp(now))
	t.ended(rs, StatusLost, now)
}

// take removes run's open span and returns it.
func (t *Telemetry) take(run *runclaim.Run) (runSpan, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rs, ok := t.spans[run]
	delete(t.spans, run)
	return rs, ok
}

// ended records the metrics of a run that ended with status at now.
func (t *Telemetry) ended(rs runSpan, status string, now time.Time) {
	ctx := context.Background()
	t.runDuration.Record(ctx, now.Sub(rs.started).Seconds(), metric.WithAttributes(rs.source, RunStatusKey.String(status)))
	t.activeRuns.Add(ctx, -1, metric.WithAttributes(rs.source))
}

// observeSince observes the time since each source's last success.
func (t *Telemetry) observeSince(ctx context.Context, o metric.Observer, g, oldest metric.Float64ObservableGauge) error {
	var age time.Duration // of the oldest running run
	if t.cfg.states != nil {
		ctx, cancel := context.WithTimeout(ctx, StateReadTimeout)
		defer cancel()
		states, err := t.cfg.states.SourceStates(ctx)
		if err != nil {
			return fmt.Errorf("runclaimotel: read source states: %w", err)
		}
		for _, st := range states {
			if a, ok := st.SuccessAge(); ok {
				o.ObserveFloat64(g, a.Seconds(), metric.WithAttributes(SourceKey.String(st.Source)))
			}
			if r := st.Running(); r != nil {
				age = max(age, st.CheckedAt.Sub(r.StartedAt))
			}
		}
		o.ObserveFloat64(oldest, age.Seconds())
		return nil
	}
	now := t.cfg.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for source, at := range t.lastSuccess {
		o.ObserveFloat64(g, now.Sub(at).Seconds(), metric.WithAttributes(SourceKey.String(source)))
	}
	for _, rs := range t.spans {
		age = max(age, now.Sub(rs.started))
	}
	o.ObserveFloat64(oldest, age.Seconds())
	return nil
}

// claimsDescription describes runclaim.claims, with every skip reason
// runclaim.SkipReasons lists.
var claimsDescription = func() string {
	labels := make([]string, 0, len(runclaim.SkipReasons)+1)
	for _, r := range runclaim.SkipReasons {
		labels = append(labels, r.Label)
	}
	labels = append(labels, ReasonOther)
	return "Claims, by outcome: claimed (this process runs the source), skipped (runclaim.skip.reason: " +
		strings.Join(labels, ", ") + "), or failed (a database error, an ended context, invalid input)."
}()

// skipReason is the label of a skip with err: its reason's, from
// runclaim.SkipReasons (one table for every consumer; a reason it does
// not list is "other", ReasonOther), or ReasonOther for an error that is
// not a skip.
func skipReason(err error) string {
	if nc := (*runclaim.NotClaimedError)(nil); errors.As(err, &nc) {
		return nc.Label()
	}
	return ReasonOther
}

// errorType is the error.type of err: "panic" for a panic under Do (which
// records it as "panic: ..."), runclaim's own names for its sentinels, and
// the Go type of the outermost error otherwise, as the conventions suggest.
func errorType(err error) string {
	switch {
	case errors.Is(err, runclaim.ErrLeaseLost):
		return ErrorTypeLeaseLost
	case errors.Is(err, runclaim.ErrInvalidSource):
		return ErrorTypeInvalidSource
	case strings.HasPrefix(err.Error(), "panic: "):
		return ErrorTypePanic
	case errors.Is(err, context.Canceled):
		return "context.Canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "context.DeadlineExceeded"
	}
	return fmt.Sprintf("%T", err)
}

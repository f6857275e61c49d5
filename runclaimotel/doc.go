// Package runclaimotel reports what a runclaim.Claimer does as OpenTelemetry
// traces and metrics. It is a module of its own, so that the runclaim module
// never requires the OpenTelemetry SDK: only a service that imports this
// package downloads it.
//
//	tel, err := runclaimotel.New() // the global tracer and meter providers
//	if err != nil { ... }
//	defer tel.Close()
//	claimer, err := runclaim.New(store, runclaim.WithHooks(tel.Hooks()))
//
// # Traces
//
// Each run is one span, named "runclaim.run" (SpanRun), from the start of
// the claim that won it to its recorded outcome; the source is its
// runclaim.source attribute, never part of the name, which the conventions
// keep low-cardinality (a DoMany of a thousand sources makes a thousand
// spans of one name). It is a span of kind Internal: no remote caller
// invoked the run. It is a child of the span in the context the claim was
// made with (runclaim.Event.Context), so that a run joins the trace of the
// scheduler tick or request that claimed it, and a root span where that
// context has none; inside Do, ContextWithRun gives fn a context whose
// children belong to the run's span. A failed run sets the span's
// status to Error with the job's error (a panic under Do is a failed run
// whose error.type is "panic") and records it as an exception event. A
// failed heartbeat is an event on the run's span. A lost lease is an event
// too, and ends the span with status Error: from that moment the run is no
// longer this holder's, and no outcome will be recorded for it. A run that
// is never finished (a caller that forgets Finish) keeps its span open, and
// counted in runclaim.active_runs, for the life of the process.
//
// A failed claim starts no run, so it is a span of its own,
// "runclaim.claim" (SpanClaim) with runclaim.claim.outcome failed, as long
// as the claim took. A skip is one too, with the outcome skipped, the
// reason and the holder (runclaim.holder.run.id, runclaim.holder.run.owner:
// the run that holds the source, not this claim's), but only with
// WithSkipSpans: every replica but one skips every tick, and
// runclaim.claims counts the skips without a span each.
//
// # Metrics
//
// All durations are in seconds, as OpenTelemetry's conventions ask.
//
//	runclaim.claims                          Counter    {claim}  runclaim.source, runclaim.claim.outcome, runclaim.skip.reason (skips), runclaim.key (limited skips), error.type (failures)
//	runclaim.claim.duration                  Histogram  s        runclaim.source, runclaim.claim.outcome
//	runclaim.run.duration                    Histogram  s        runclaim.source, runclaim.run.status
//	runclaim.active_runs                     UpDownCounter {run} runclaim.source
//	runclaim.heartbeat.failures              Counter    {heartbeat} runclaim.source
//	runclaim.leases_lost                     Counter    {lease}  runclaim.source
//	runclaim.source.time_since_last_success  Gauge      s        runclaim.source
//
// runclaim.source.time_since_last_success is observed at collection time.
// By default it is the time since this process last saw the source succeed,
// by its own clock: a replica that never wins a source does not report it,
// so take the minimum over replicas. With WithStateReader (a
// *runclaim.PostgresStore) it is read from the runs table instead, by the
// database's clock, for every source in the table, whichever replica ran
// it; this is the same answer as 'runclaim check'. A source that never
// succeeded has no value: alert on its absence as well as on its size.
//
// # Semantic conventions
//
// Where OpenTelemetry's semantic conventions (v1.43.0, the version of
// go.opentelemetry.io/otel/semconv this module imports) define an attribute
// for a fact, it is used: error.type is the Go type of a run's or a
// claim's error ("panic" for a panic, "runclaim.lease_lost" for a lost
// lease), and exception events come from span.RecordError. Span names
// follow the conventions' rule for names ("the most general string that
// identifies a (statistically) interesting class of spans").
//
// The faas.* attributes are not used: the conventions define them for the
// span of a function-as-a-service invocation, a SERVER span that a FaaS
// platform's trigger starts (faas.trigger, faas.invocation_id) or a
// CLIENT span that invokes one; a run here is an Internal span in a
// process of its own, and a plain Claim or a Wait() claim has no timer
// behind it at all. The tick a run serves (ForTick) is runclaim.run.tick,
// and the schedule given with WithSchedule runclaim.schedule.
//
// None fits the rest, so they are in a runclaim namespace of their own,
// named by the conventions' rules (lower case, dot-separated namespaces,
// snake_case words, units in UCUM with annotations in braces):
// runclaim.source (a source is not a FaaS function name: many sources run
// in one process), runclaim.run.id (the fencing token, as an int, for
// filtering), runclaim.run.owner (the holder's name; the conventions'
// service.instance.id describes a resource, not a run), runclaim.run.status
// (succeeded, failed or lost), runclaim.claim.outcome (claimed, skipped or
// failed) and runclaim.skip.reason (already_running, too_soon, tick_done,
// paused, limited, with runclaim.key the key that had no room, or other for a reason this version does not know). The FaaS
// metrics (faas.invocations, faas.invoke_duration) describe a platform's
// invocations and have no place for a skip, a lost lease or a claim that
// found the source taken, so the metrics are runclaim's own too:
// runclaim.active_runs mirrors http.server.active_requests,
// runclaim.claims mirrors faas.invocations (a plural name for a count of
// {claim}), and the durations follow the *.duration histograms.
package runclaimotel

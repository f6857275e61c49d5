// Package runclaimprom reports what a runclaim.Claimer does, and what the
// runs table says, as Prometheus metrics. It is a module of its own, so
// that the runclaim module never requires the Prometheus client: only a
// service that imports this package downloads it.
//
//	metrics, err := runclaimprom.New(reg) // reg: a prometheus.Registerer
//	if err != nil { ... }
//	claimer, err := runclaim.New(store, runclaim.WithHooks(metrics.Hooks()))
//
// # Hooks
//
// Metrics' hooks count what a Claimer does:
//
//	runclaim_claims_total{source,outcome}              claimed, skipped or failed
//	runclaim_skips_total{source,reason}                already_running, too_soon, tick_done, paused, limited or other
//	runclaim_limited_total{source,key}                 the limited skips, by the key that had no room
//	runclaim_claim_duration_seconds{outcome}           how long a claim took
//	runclaim_run_duration_seconds{source,status}       from the claim to the recorded outcome
//	runclaim_heartbeat_failures_total{source}          heartbeats that failed without losing the lease
//	runclaim_leases_lost_total{source}                 runs whose holder learned they were lost
//	runclaim_lease_lost_last_timestamp_seconds         when a run was last lost
//
// A failed claim (a database error, an ended context, invalid input) is
// counted, so that an outage shows as failed claims and not as a quiet
// period. A failed claim of an invalid source is counted under the source
// InvalidSource. A skip's reason is matched with errors.Is; a reason that
// a later runclaim adds and this package does not know is counted as
// other, never as one of the known reasons. The hooks add to the others a
// Claimer has: runclaim.WithHooks given more than once calls every set.
//
// # The runs table
//
// Hooks report what happened. A SourceCollector reads the runs table at
// each scrape and exports each source's last success, last start, running
// and failing state, whichever replica ran it: what an alert on a run that
// did not happen needs (see docs/observability.md in the runclaim
// repository).
//
//	reg.MustRegister(runclaimprom.NewSourceCollector(store)) // store: a *runclaim.PostgresStore
package runclaimprom

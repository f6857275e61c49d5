package runclaimprom

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runclaim/runclaim"
)

// Values of the outcome label of runclaim_claims_total and
// runclaim_claim_duration_seconds.
const (
	OutcomeClaimed = "claimed"
	OutcomeSkipped = "skipped"
	OutcomeFailed  = "failed"
)

// Values of the reason label of runclaim_skips_total.
const (
	ReasonAlreadyRunning = "already_running"
	ReasonTooSoon        = "too_soon"
	ReasonTickDone       = "tick_done"
	ReasonPaused         = "paused"
	ReasonLimited        = "limited" // a key the claim named had no room; runclaim_limited_total names it
	ReasonOther          = "other"   // a reason this package does not know
)

// InvalidSource is the source label of a failed claim of a source that
// runclaim refused as invalid: such a source may be any string a bug made,
// so all of them share one label value, to keep the labels bounded.
const InvalidSource = "(invalid)"

// Metrics are the Prometheus metrics of one or more Claimers. Label values
// are bounded: the sources a service claims, and fixed words. It is safe
// for concurrent use; one Metrics may serve several Claimers.
type Metrics struct {
	claims          *prometheus.CounterVec   // source, outcome: claimed | skipped | failed
	skips           *prometheus.CounterVec   // source, reason: already_running | too_soon | tick_done | paused | limited | other
	limited         *prometheus.CounterVec   // source, key
	claimLatency    *prometheus.HistogramVec // outcome
	runDuration     *prometheus.HistogramVec // source, status: succeeded | failed
	heartbeatErrors *prometheus.CounterVec   // source
	leasesLost      *prometheus.CounterVec   // source
	lastLeaseLost   prometheus.Gauge
	lateness        *prometheus.HistogramVec // none, or source with LatenessBySource
	bySource        bool
}

// An Option configures New.
type Option func(*Metrics)

// LatenessBySource labels runclaim_start_lateness_seconds by source. Off
// by default: a histogram has a series per bucket, so a label per source
// multiplies them by the sources; turn it on for a service with a few
// scheduled sources whose lateness you alert on one by one.
func LatenessBySource() Option { return func(m *Metrics) { m.bySource = true } }

// New creates the metrics and registers them with reg
// (prometheus.DefaultRegisterer if reg is nil). If one cannot be
// registered, such as when reg holds runclaim's metrics already, New
// unregisters the ones it registered and returns the error.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	var o Metrics
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	var latenessLabels []string
	if o.bySource {
		latenessLabels = []string{"source"}
	}
	m := &Metrics{
		bySource: o.bySource,
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runclaim_start_lateness_seconds",
			Help:    "How late a run of a scheduled tick (ForTick) started: its start minus its tick, by the database's clock. By source only with LatenessBySource.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10), // 10ms .. 43min
		}, latenessLabels),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runclaim_claims_total",
			Help: "Claims by outcome: claimed (this replica runs the tick), skipped, or failed (a database error, the caller's context ended, or invalid input).",
		}, []string{"source", "outcome"}),
		skips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runclaim_skips_total",
			Help: "Skipped claims by reason: already_running (another run holds the source), too_soon (minimum interval), tick_done (the tick was served), paused (an operator paused the source), limited (a key the claim named had no room: see runclaim_limited_total), or other (a reason this version does not know).",
		}, []string{"source", "reason"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runclaim_limited_total",
			Help: "Claims skipped because a key they named had no room (a cooldown, MaxRunning or MaxStarts), by source and key.",
		}, []string{"source", "key"}),
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
	cs := []prometheus.Collector{m.claims, m.skips, m.limited, m.claimLatency, m.runDuration, m.heartbeatErrors, m.leasesLost, m.lastLeaseLost, m.lateness}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("runclaimprom: %w", err)
		}
	}
	return m, nil
}

// Hooks returns the runclaim.Hooks that update m; pass them to
// runclaim.WithHooks. Each hook is a few atomic adds: quick enough to run
// on the claiming goroutine, as runclaim requires.
func (m *Metrics) Hooks() runclaim.Hooks {
	return runclaim.Hooks{
		Claimed: func(e runclaim.Event) {
			m.claims.WithLabelValues(e.Run.Source, OutcomeClaimed).Inc()
			m.claimLatency.WithLabelValues(OutcomeClaimed).Observe(e.Duration.Seconds())
			if !e.Run.Tick.IsZero() {
				var labels []string
				if m.bySource {
					labels = []string{e.Run.Source}
				}
				m.lateness.WithLabelValues(labels...).Observe(e.Run.StartedAt.Sub(e.Run.Tick).Seconds())
			}
		},
		Skipped: func(e runclaim.Event) {
			m.claims.WithLabelValues(e.Source, OutcomeSkipped).Inc()
			m.skips.WithLabelValues(e.Source, skipReason(e.Err)).Inc()
			if nc := (*runclaim.NotClaimedError)(nil); errors.As(e.Err, &nc) && errors.Is(e.Err, runclaim.ErrLimited) {
				m.limited.WithLabelValues(e.Source, nc.Key).Inc()
			}
			m.claimLatency.WithLabelValues(OutcomeSkipped).Observe(e.Duration.Seconds())
		},
		ClaimFailed: func(e runclaim.Event) {
			// An outage shows as failed claims, not as a quiet period
			// without claims.
			source := e.Source
			if errors.Is(e.Err, runclaim.ErrInvalidSource) {
				source = InvalidSource
			}
			m.claims.WithLabelValues(source, OutcomeFailed).Inc()
			m.claimLatency.WithLabelValues(OutcomeFailed).Observe(e.Duration.Seconds())
		},
		Finished: func(e runclaim.Event) {
			m.runDuration.WithLabelValues(e.Run.Source, string(e.Status)).Observe(e.Duration.Seconds())
		},
		HeartbeatFailed: func(e runclaim.Event) {
			m.heartbeatErrors.WithLabelValues(e.Run.Source).Inc()
		},
		LeaseLost: func(e runclaim.Event) {
			m.leasesLost.WithLabelValues(e.Run.Source).Inc()
			m.lastLeaseLost.SetToCurrentTime()
		},
	}
}

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

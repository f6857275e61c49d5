package runclaimprom

import (
	"context"
	"log"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/runclaim/runclaim"
)

// StateReader reads the state of every source from the runs table.
// *runclaim.PostgresStore implements it.
type StateReader interface {
	SourceStates(ctx context.Context) ([]runclaim.SourceState, error)
}

var _ StateReader = (*runclaim.PostgresStore)(nil)

// StateReadTimeout bounds a SourceCollector's read of the runs table at
// each scrape.
const StateReadTimeout = 5 * time.Second

// SourceCollector is a prometheus.Collector that reads the runs table at
// each scrape, with one bounded query (runclaim's SourceStates: one probe
// of the history index per source, and at most runclaim.CheckScanLimit
// runs of a source read to find its last success), and exports what the
// table says, whichever replica ran each source:
//
//	runclaim_source_last_success_timestamp_seconds{source}  start of the newest succeeded run (absent if none)
//	runclaim_source_last_start_timestamp_seconds{source}    start of the newest run
//	runclaim_source_running{source}                         1 while a run is running, else 0
//	runclaim_source_running_age_seconds{source}             how long the running run has run (absent if none)
//	runclaim_running_oldest_age_seconds                     the age of the oldest running run of any source (0 if none)
//	runclaim_source_failing{source}                         1 if the newest finished run did not succeed
//	runclaim_source_states_up                               1 if the table was read, 0 if not
//
// Hooks report what happened; these let an alert rule see what did not
// happen (see docs/observability.md). Times are the database's.
// Register one collector per table, in one service (or a sidecar), not in
// every replica: each scrape is a query.
type SourceCollector struct {
	states                                       StateReader
	lastSuccess, lastStart, running, failing, up *prometheus.Desc
	runningAge, oldest                           *prometheus.Desc
}

// NewSourceCollector returns a collector that reads states at each scrape.
func NewSourceCollector(states StateReader) *SourceCollector {
	src := []string{"source"}
	return &SourceCollector{
		states:      states,
		lastSuccess: prometheus.NewDesc("runclaim_source_last_success_timestamp_seconds", "When the source's newest succeeded run started, as a Unix time, by the database's clock; absent if it never succeeded.", src, nil),
		lastStart:   prometheus.NewDesc("runclaim_source_last_start_timestamp_seconds", "When the source's newest run started, as a Unix time, by the database's clock.", src, nil),
		running:     prometheus.NewDesc("runclaim_source_running", "1 while a run of the source is running, else 0.", src, nil),
		failing:     prometheus.NewDesc("runclaim_source_failing", "1 if the source's newest finished run failed, expired or was released, else 0.", src, nil),
		runningAge:  prometheus.NewDesc("runclaim_source_running_age_seconds", "How long the source's running run has been running, by the database's clock; absent while none runs. Alert on it for an overrun (runclaim check --max-run does the same).", src, nil),
		oldest:      prometheus.NewDesc("runclaim_running_oldest_age_seconds", "The age of the oldest running run of any source, by the database's clock; 0 while none runs.", nil, nil),
		up:          prometheus.NewDesc("runclaim_source_states_up", "1 if the last scrape read the runs table, 0 if it could not (the per-source series are then absent).", nil, nil),
	}
}

// Describe sends the descriptors of every metric the collector exports.
func (c *SourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lastSuccess, c.lastStart, c.running, c.failing, c.runningAge, c.oldest, c.up} {
		ch <- d
	}
}

// Collect reads the runs table and sends one sample of each metric per
// source. A failed read is logged with the log package and reported as
// runclaim_source_states_up 0.
func (c *SourceCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), StateReadTimeout)
	defer cancel()
	states, err := c.states.SourceStates(ctx)
	if err != nil {
		log.Printf("runclaimprom: read source states: %v", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	var oldest time.Duration
	for _, st := range states {
		if r := st.Running(); r != nil {
			age := st.CheckedAt.Sub(r.StartedAt)
			oldest = max(oldest, age)
			ch <- prometheus.MustNewConstMetric(c.runningAge, prometheus.GaugeValue, age.Seconds(), st.Source)
		}
		if st.LastSuccess != nil {
			ch <- prometheus.MustNewConstMetric(c.lastSuccess, prometheus.GaugeValue, unix(st.LastSuccess.StartedAt), st.Source)
		}
		if st.Latest != nil {
			ch <- prometheus.MustNewConstMetric(c.lastStart, prometheus.GaugeValue, unix(st.Latest.StartedAt), st.Source)
		}
		ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, boolValue(st.Running() != nil), st.Source)
		ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, boolValue(st.Failing()), st.Source)
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, oldest.Seconds())
}

func unix(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

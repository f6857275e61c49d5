package runclaimprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/runclaimprom"
)

// fakeStates is a StateReader with fixed answers, counting its reads.
type fakeStates struct {
	states []runclaim.SourceState
	err    error
	reads  *int
}

func (f fakeStates) SourceStates(context.Context) ([]runclaim.SourceState, error) {
	*f.reads++
	return f.states, f.err
}

// TestSourceCollector: each scrape reads the table once and exports each
// source's last success (absent when it never succeeded), last start,
// running and failing state, the age of its running run, and the age of
// the oldest running run; a failed read is up 0 and nothing else.
func TestSourceCollector(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	rec := func(started string, status runclaim.Status) *runclaim.RunRecord {
		return &runclaim.RunRecord{RunInfo: runclaim.RunInfo{ID: 1, StartedAt: at(started)}, Status: status}
	}
	states := []runclaim.SourceState{
		{Source: "nightly", CheckedAt: at("2026-12-01T03:10:00.5Z"), Latest: rec("2026-12-01T03:00:00.5Z", runclaim.StatusRunning),
			LastFinished: rec("2026-11-30T03:00:00Z", runclaim.StatusFailed), LastSuccess: rec("2026-11-29T03:00:00Z", runclaim.StatusSucceeded)},
		{Source: "never", Latest: rec("2026-12-01T00:00:00Z", runclaim.StatusFailed), LastFinished: rec("2026-12-01T00:00:00Z", runclaim.StatusFailed)},
	}
	reads := 0
	reg := prometheus.NewRegistry()
	reg.MustRegister(runclaimprom.NewSourceCollector(fakeStates{states: states, reads: &reads}))
	want := `
# HELP runclaim_source_failing 1 if the source's newest finished run failed, expired or was released, else 0.
# TYPE runclaim_source_failing gauge
runclaim_source_failing{source="never"} 1
runclaim_source_failing{source="nightly"} 1
# HELP runclaim_source_last_start_timestamp_seconds When the source's newest run started, as a Unix time, by the database's clock.
# TYPE runclaim_source_last_start_timestamp_seconds gauge
runclaim_source_last_start_timestamp_seconds{source="never"} 1.7960832e+09
runclaim_source_last_start_timestamp_seconds{source="nightly"} 1.7960940005e+09
# HELP runclaim_source_last_success_timestamp_seconds When the source's newest succeeded run started, as a Unix time, by the database's clock; absent if it never succeeded.
# TYPE runclaim_source_last_success_timestamp_seconds gauge
runclaim_source_last_success_timestamp_seconds{source="nightly"} 1.7959212e+09
# HELP runclaim_running_oldest_age_seconds The age of the oldest running run of any source, by the database's clock; 0 while none runs.
# TYPE runclaim_running_oldest_age_seconds gauge
runclaim_running_oldest_age_seconds 600
# HELP runclaim_source_running 1 while a run of the source is running, else 0.
# TYPE runclaim_source_running gauge
runclaim_source_running{source="never"} 0
runclaim_source_running{source="nightly"} 1
# HELP runclaim_source_running_age_seconds How long the source's running run has been running, by the database's clock; absent while none runs. Alert on it for an overrun (runclaim check --max-run does the same).
# TYPE runclaim_source_running_age_seconds gauge
runclaim_source_running_age_seconds{source="nightly"} 600
# HELP runclaim_source_states_up 1 if the last scrape read the runs table, 0 if it could not (the per-source series are then absent).
# TYPE runclaim_source_states_up gauge
runclaim_source_states_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if reads != 1 {
		t.Errorf("%d reads for one scrape, want 1", reads)
	}

	down := prometheus.NewRegistry()
	down.MustRegister(runclaimprom.NewSourceCollector(fakeStates{err: errors.New("connection refused"), reads: &reads}))
	if err := testutil.GatherAndCompare(down, strings.NewReader(`
# HELP runclaim_source_states_up 1 if the last scrape read the runs table, 0 if it could not (the per-source series are then absent).
# TYPE runclaim_source_states_up gauge
runclaim_source_states_up 0
`)); err != nil {
		t.Error(err)
	}
}

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestMain runs the replica processes that the fleet starts from this
// test binary, or the tests.
func TestMain(m *testing.M) {
	if os.Getenv(envReplica) != "" {
		os.Exit(replicaMain())
	}
	os.Exit(pgtest.Main(m))
}

// TestFleetSmoke: three replica processes claim 1,000 sources on each of
// three ticks (after one of warm-up): each source runs exactly once per
// tick, none is missed, each run succeeds, and every replica reports every
// tick.
func TestFleetSmoke(t *testing.T) {
	db := pgtest.New(t)
	cfg := Config{DSN: db.DSN, Replicas: 3, Sources: 1000, Tick: 2 * time.Second, Ticks: 3, Warmup: 1,
		Cgroup: containerCgroup(t)}
	rep, err := Run(t.Context(), cfg, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("the fleet did not run each source exactly once per tick: %d runs, %d pairs run more than once, %d missing, %d not succeeded; errors %q",
			rep.Runs, rep.BadPairs, rep.Missing, rep.NotSuccess, rep.Errors)
	}
	if want := int64(cfg.Sources * cfg.Ticks); rep.Runs != want {
		t.Errorf("%d runs in the measured ticks, want %d", rep.Runs, want)
	}
	for _, tk := range rep.Ticks {
		if tk.Won != cfg.Sources || tk.Won+tk.Skipped != cfg.Sources*cfg.Replicas {
			t.Errorf("tick %d: %d won and %d skipped; want %d won of %d attempts", tk.Tick, tk.Won, tk.Skipped, cfg.Sources, cfg.Sources*cfg.Replicas)
		}
	}
	var b testBuffer
	rep.Print(&b)
	t.Log("\n" + string(b))
}

// BenchmarkFleet runs the fleet once per benchmark run, with the scene the
// environment gives (defaults: the CI-sized scene, 3 replicas and 1,000
// sources on a 2 s tick for 5 ticks), and reports the means and ratios.
// The default scene of BENCHMARKS.md:
//
//	FLEET_REPLICAS=10 FLEET_SOURCES=10000 FLEET_TICK=10s FLEET_TICKS=10 \
//	  go test -run '^$' -bench BenchmarkFleet -benchtime 1x ./bench/fleet
//
// FLEET_KEYS spreads the sources over that many keys (MaxRunning 5).
func BenchmarkFleet(b *testing.B) {
	env := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	tick := 2 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FLEET_TICK")); err == nil && d > 0 {
		tick = d
	}
	cfg := Config{Replicas: env("FLEET_REPLICAS", 3), Sources: env("FLEET_SOURCES", 1000), Tick: tick,
		Ticks: env("FLEET_TICKS", 5), Warmup: 1, Keys: env("FLEET_KEYS", 0), MaxRunning: 5}
	for b.Loop() {
		db := pgtest.New(b)
		cfg.DSN, cfg.Cgroup = db.DSN, containerCgroup(b)
		rep, err := Run(context.Background(), cfg, testWriter{b})
		if err != nil {
			b.Fatal(err)
		}
		var out testBuffer
		rep.Print(&out)
		b.Log("\n" + string(out))
		if !rep.OK() {
			b.Fatal("the fleet did not run each source exactly once per tick")
		}
		m := rep.Mean()
		b.ReportMetric(float64(m.DBCPU.Microseconds())/1000, "db-cpu-ms/tick")
		b.ReportMetric(float64(m.WALBytes), "wal-B/tick")
		b.ReportMetric(float64(rep.Floor.DBCPU.Microseconds())/1000, "floor-db-cpu-ms/tick")
		b.ReportMetric(float64(m.DBCPU)/float64(rep.Floor.DBCPU), "db-cpu/floor")
		b.ReportMetric(float64(m.WALBytes)/float64(rep.Floor.WALBytes), "wal/floor")
		b.ReportMetric(float64(m.ClaimP99.Microseconds())/1000, "claim-p99-ms")
		b.ReportMetric(float64(m.LastStarted.Milliseconds()), "last-start-ms")
	}
	b.ReportMetric(0, "ns/op")
}

// containerCgroup is the cgroup directory of pgtest's container, whose
// cpu.stat counts every server process, those that ended too; empty when
// the server is not a local container (the schedstat reading is used).
func containerCgroup(t testing.TB) string {
	srv := pgtest.SharedServer(t)
	if srv.Container == nil {
		return ""
	}
	id := srv.Container.GetContainerID()
	for _, pattern := range []string{
		"/sys/fs/cgroup/system.slice/docker-" + id + ".scope",
		"/sys/fs/cgroup/docker/" + id,
		"/sys/fs/cgroup/unified/docker/" + id,
		"/sys/fs/cgroup/*/docker/" + id,
	} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			if _, err := os.Stat(filepath.Join(m, "cpu.stat")); err == nil {
				return m
			}
		}
	}
	return ""
}

// testWriter sends the fleet's progress to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

type testBuffer []byte

func (b *testBuffer) Write(p []byte) (int, error) {
	*b = append(*b, p...)
	return len(p), nil
}

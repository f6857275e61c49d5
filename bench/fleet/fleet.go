// Command fleet measures what a fleet of replicas costs one PostgreSQL
// per tick: N replica processes, each with a pool of its own, claim all S
// sources on every tick with DoMany and ForTick, in S/MaxClaimMany calls at
// once; each won source's job takes a set time and heartbeats as
// configured. It reports, per tick, the database's CPU time and WAL bytes
// (full-page images apart), each replica's writes to the server (round
// trips), the p50 and p99 of a claim call, and the time from the tick to
// the last source started; it checks that each source ran exactly once per
// tick and that no tick was missed; and it measures the floor, what any
// correct design must do per tick, in the same run on the same server,
// and reports the ratios.
//
//	fleet -dsn postgres://... -replicas 10 -sources 10000 -tick 10s -ticks 10
//
// The DSN must be a superuser's (or a member of pg_read_server_files) for
// the database CPU, read from /proc/<pid>/schedstat of every server
// process through pg_read_file; -cgroup reads a container's cpu.stat
// instead, which counts the processes that ended too. -db-cpus and
// -replica-cpus pin the server's container (docker update --cpuset-cpus)
// and the replica processes (taskset) to different cores.
//
// go test -bench BenchmarkFleet ./bench/fleet runs it against a container
// of its own (see BENCHMARKS.md, "The fleet").
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	if os.Getenv(envReplica) != "" {
		os.Exit(replicaMain())
	}
	var cfg Config
	flag.StringVar(&cfg.DSN, "dsn", os.Getenv("DATABASE_URL"), "the database (default $DATABASE_URL)")
	flag.IntVar(&cfg.Replicas, "replicas", 10, "replica processes")
	flag.IntVar(&cfg.Sources, "sources", 10000, "sources every replica claims on each tick")
	flag.DurationVar(&cfg.Tick, "tick", 10*time.Second, "the tick (a minute, scaled down)")
	flag.IntVar(&cfg.Ticks, "ticks", 10, "ticks measured, after the warm-up")
	flag.IntVar(&cfg.Warmup, "warmup", 1, "ticks run before the measured ones")
	flag.DurationVar(&cfg.Lease, "lease", 0, "the lease (default: 30 s scaled to the tick, tick/2)")
	flag.DurationVar(&cfg.Heartbeat, "heartbeat", 0, "the heartbeat interval (default: 10 s scaled, tick/6)")
	flag.DurationVar(&cfg.Job, "job", 0, "how long each job takes (default: tick/4)")
	flag.IntVar(&cfg.Keys, "keys", 0, "spread the sources over this many keys (0: no keys)")
	flag.IntVar(&cfg.MaxRunning, "max-running", 5, "each key's MaxRunning, with -keys")
	flag.StringVar(&cfg.Cgroup, "cgroup", "", "the server container's cgroup directory, for its cpu.stat")
	flag.StringVar(&cfg.DBCPUs, "db-cpus", "", "pin the server's container to these cores (with -container)")
	flag.StringVar(&cfg.Container, "container", "", "the server's container, for -db-cpus")
	flag.StringVar(&cfg.ReplicaCPUs, "replica-cpus", "", "pin the replica processes to these cores (taskset)")
	jsonOut := flag.Bool("json", false, "print the report as JSON")
	flag.Parse()
	ctx := context.Background()
	rep, err := Run(ctx, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
	if *jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			os.Exit(1)
		}
		return
	}
	rep.Print(os.Stdout)
	if !rep.OK() {
		os.Exit(1)
	}
}

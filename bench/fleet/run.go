package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

// envReplica marks a replica process; envConfig carries its Config.
const (
	envReplica = "RUNCLAIM_FLEET_REPLICA"
	envConfig  = "RUNCLAIM_FLEET_CONFIG"
)

// Config is one fleet run.
type Config struct {
	DSN         string
	Replicas    int
	Sources     int
	Tick        time.Duration
	Ticks       int // measured
	Warmup      int
	Lease       time.Duration
	Heartbeat   time.Duration
	Job         time.Duration
	Keys        int
	MaxRunning  int
	Cgroup      string
	Container   string
	DBCPUs      string
	ReplicaCPUs string

	// Set by Run for the replicas.
	Table string
	Start time.Time // the first tick
	Index int       // the replica's
}

func (c *Config) defaults() error {
	if c.DSN == "" {
		return errors.New("no database: -dsn or DATABASE_URL")
	}
	if c.Replicas < 1 || c.Sources < 1 || c.Tick <= 0 || c.Ticks < 1 || c.Warmup < 0 {
		return fmt.Errorf("want replicas, sources, tick and ticks positive: %+v", *c)
	}
	if c.Lease == 0 {
		c.Lease = c.Tick / 2
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = c.Tick / 6
	}
	if c.Job == 0 {
		c.Job = c.Tick / 4
	}
	if c.Job >= c.Tick {
		return fmt.Errorf("the job (%v) must be shorter than the tick (%v)", c.Job, c.Tick)
	}
	return nil
}

// TickReport is what one tick cost.
type TickReport struct {
	Tick         int           `json:"tick"`
	DBCPU        time.Duration `json:"db_cpu_ns"`
	WALBytes     int64         `json:"wal_bytes"`
	WALFPIs      int64         `json:"wal_fpi"` // full-page images (PostgreSQL 14+), in the WAL above
	Won          int           `json:"won"`
	Skipped      int           `json:"skipped"`
	Failed       int           `json:"failed"`
	Writes       []int64       `json:"writes"` // per replica: writes to the server, about its round trips
	ClaimP50     time.Duration `json:"claim_p50_ns"`
	ClaimP99     time.Duration `json:"claim_p99_ns"`
	LastStarted  time.Duration `json:"last_started_ns"` // from the tick to the last source started
	ReplicaTicks int           `json:"replica_ticks"`   // replicas that reported the tick
}

// FloorReport is what the floor cost per tick, averaged.
type FloorReport struct {
	DBCPU    time.Duration `json:"db_cpu_ns"`
	WALBytes int64         `json:"wal_bytes"`
	WALFPIs  int64         `json:"wal_fpi"`
}

// Report is a fleet run's result.
type Report struct {
	Config     Config       `json:"config"`
	Server     string       `json:"server"`
	CPUSource  string       `json:"cpu_source"`
	Ticks      []TickReport `json:"ticks"`
	Floor      FloorReport  `json:"floor"`
	Runs       int64        `json:"runs"`        // in the measured ticks
	BadPairs   int64        `json:"bad_pairs"`   // (source, tick) pairs not run exactly once
	Missing    int64        `json:"missing"`     // (source, tick) pairs with no run
	NotSuccess int64        `json:"not_success"` // runs that did not succeed
	Errors     []string     `json:"errors"`
}

// OK reports whether every source ran exactly once per tick, and nothing
// failed. With keys, whose MaxRunning lets only some sources run each
// tick (the others are limited, and run at a later tick), a source may
// miss a tick; it must still never run twice in one.
func (r *Report) OK() bool {
	return r.BadPairs == 0 && (r.Missing == 0 || r.Config.Keys > 0) && r.NotSuccess == 0 && len(r.Errors) == 0 && len(r.Ticks) > 0
}

// Mean is the mean of the measured ticks.
func (r *Report) Mean() TickReport {
	var m TickReport
	if len(r.Ticks) == 0 {
		return m
	}
	for _, t := range r.Ticks {
		m.DBCPU += t.DBCPU
		m.WALBytes += t.WALBytes
		m.WALFPIs += t.WALFPIs
		m.Won += t.Won
		m.Skipped += t.Skipped
		m.ClaimP50 += t.ClaimP50
		m.ClaimP99 += t.ClaimP99
		m.LastStarted += t.LastStarted
	}
	n := len(r.Ticks)
	m.DBCPU /= time.Duration(n)
	m.WALBytes /= int64(n)
	m.WALFPIs /= int64(n)
	m.Won /= n
	m.Skipped /= n
	m.ClaimP50 /= time.Duration(n)
	m.ClaimP99 /= time.Duration(n)
	m.LastStarted /= time.Duration(n)
	return m
}

// Print writes the report for a reader.
func (r *Report) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "fleet: %d replicas, %d sources, tick %v, lease %v, heartbeat %v, job %v, keys %d; %s; database CPU from %s\n",
		c.Replicas, c.Sources, c.Tick, c.Lease, c.Heartbeat, c.Job, c.Keys, r.Server, r.CPUSource)
	fmt.Fprintf(w, "%5s %10s %12s %8s %7s %8s %10s %10s %12s %s\n", "tick", "db-cpu", "wal", "fpi", "won", "skipped", "claim-p50", "claim-p99", "last-start", "writes/replica")
	for _, t := range r.Ticks {
		fmt.Fprintf(w, "%5d %10v %12d %8d %7d %8d %10v %10v %12v %v\n", t.Tick, t.DBCPU.Round(time.Millisecond), t.WALBytes, t.WALFPIs,
			t.Won, t.Skipped, t.ClaimP50.Round(time.Microsecond), t.ClaimP99.Round(time.Microsecond), t.LastStarted.Round(time.Millisecond), t.Writes)
	}
	m := r.Mean()
	fmt.Fprintf(w, "mean: db-cpu %v, wal %d B (%d full-page images), claim p50 %v p99 %v, last start %v after the tick\n",
		m.DBCPU.Round(time.Millisecond), m.WALBytes, m.WALFPIs, m.ClaimP50.Round(time.Microsecond), m.ClaimP99.Round(time.Microsecond), m.LastStarted.Round(time.Millisecond))
	fmt.Fprintf(w, "floor: db-cpu %v, wal %d B (%d full-page images) per tick\n", r.Floor.DBCPU.Round(time.Millisecond), r.Floor.WALBytes, r.Floor.WALFPIs)
	if r.Floor.DBCPU > 0 && r.Floor.WALBytes > 0 && m.Won > 0 {
		fmt.Fprintf(w, "fleet/floor: db-cpu %.2fx, wal %.2fx; per won claim %.1f µs db-cpu, %d B wal; per attempt %.1f µs db-cpu\n",
			float64(m.DBCPU)/float64(r.Floor.DBCPU), float64(m.WALBytes)/float64(r.Floor.WALBytes),
			float64(m.DBCPU.Microseconds())/float64(m.Won), m.WALBytes/int64(m.Won),
			float64(m.DBCPU.Microseconds())/float64(m.Won+m.Skipped))
	}
	fmt.Fprintf(w, "check: %d runs; %d (source, tick) pairs not run exactly once, %d missing, %d not succeeded; %d errors\n",
		r.Runs, r.BadPairs, r.Missing, r.NotSuccess, len(r.Errors))
	for _, e := range r.Errors {
		fmt.Fprintln(w, "  error:", e)
	}
}

// replicaLine is what a replica reports per tick, one JSON line.
type replicaLine struct {
	Replica     int             `json:"replica"`
	Tick        int             `json:"tick"`
	Won         int             `json:"won"`
	Skipped     int             `json:"skipped"`
	Failed      int             `json:"failed"`
	Writes      int64           `json:"writes"`
	Claims      []time.Duration `json:"claims"`       // each claim call's duration
	LastStarted time.Duration   `json:"last_started"` // from the tick
	Err         string          `json:"err,omitempty"`
}

// sourceNames are the sources, and their keys.
func sourceNames(cfg Config) (sources []string, keysOf func(string) []string) {
	sources = make([]string, cfg.Sources)
	keyOf := make(map[string]string, cfg.Sources)
	for i := range sources {
		sources[i] = fmt.Sprintf("fleet/%06d", i)
		if cfg.Keys > 0 {
			keyOf[sources[i]] = fmt.Sprintf("key-%03d", i%cfg.Keys)
		}
	}
	if cfg.Keys == 0 {
		return sources, nil
	}
	return sources, func(s string) []string {
		if k, ok := keyOf[s]; ok {
			return []string{k}
		}
		return nil // the replica's warm-up source names no key
	}
}

// Run runs the fleet as cfg says, and reports. Progress goes to log.
func Run(ctx context.Context, cfg Config, log io.Writer) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rep := &Report{Config: cfg}
	admin, err := pgxpool.New(ctx, cfg.DSN)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if err := admin.QueryRow(ctx, "SELECT pg_catalog.version()").Scan(&rep.Server); err != nil {
		return nil, err
	}
	cfg.Table = fmt.Sprintf("fleet_%d_%d_%d", cfg.Replicas, cfg.Sources, time.Now().UnixNano()%1e9)
	store, err := runclaim.NewPostgresStore(admin, runclaim.WithTable(runclaim.DefaultSchema, cfg.Table))
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		return nil, err
	}
	for k := range cfg.Keys {
		if err := store.SetLimit(ctx, fmt.Sprintf("key-%03d", k), runclaim.Limit{MaxRunning: cfg.MaxRunning}); err != nil {
			return nil, err
		}
	}
	if cfg.DBCPUs != "" && cfg.Container != "" {
		if out, err := exec.CommandContext(ctx, "docker", "update", "--cpuset-cpus", cfg.DBCPUs, cfg.Container).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("pin the server to cores %s: %v: %s", cfg.DBCPUs, err, out)
		}
	}
	cpu := newCPUMeter(admin, cfg.Cgroup)
	rep.CPUSource = cpu.source()
	if _, err := cpu.read(ctx); err != nil {
		return nil, fmt.Errorf("database CPU: %w", err)
	}

	// The replicas start together, on a tick boundary a few seconds ahead,
	// so that each has connected and warmed up.
	total := cfg.Warmup + cfg.Ticks
	cfg.Start = time.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	lines := make(chan replicaLine, cfg.Replicas*total*2)
	var procs []*exec.Cmd
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range cfg.Replicas {
		rc := cfg
		rc.Index = i
		b, _ := json.Marshal(rc)
		name, args := self, []string(nil)
		if cfg.ReplicaCPUs != "" {
			name, args = "taskset", append([]string{"-c", cfg.ReplicaCPUs, self}, args...)
		}
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), envReplica+"=1", envConfig+"="+string(b))
		cmd.Stderr = log
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start replica %d: %w", i, err)
		}
		procs = append(procs, cmd)
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 1<<20), 1<<24)
			for sc.Scan() {
				var l replicaLine
				if json.Unmarshal(sc.Bytes(), &l) == nil && l.Tick > 0 {
					lines <- l
				}
			}
		})
	}

	// Each tick's window: the database's CPU and WAL between two tick
	// boundaries.
	type mark struct {
		cpu      time.Duration
		lsn, fpi int64
	}
	read := func() (mark, error) {
		var m mark
		var err error
		if m.cpu, err = cpu.read(ctx); err != nil {
			return m, err
		}
		m.lsn, m.fpi, err = walPosition(ctx, admin)
		return m, err
	}
	marks := make([]mark, total+1)
	for k := 0; k <= total; k++ {
		time.Sleep(time.Until(cfg.Start.Add(time.Duration(k) * cfg.Tick)))
		if marks[k], err = read(); err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "fleet: tick %d of %d\n", k, total)
	}
	for i, p := range procs {
		if err := p.Wait(); err != nil {
			mu.Lock()
			rep.Errors = append(rep.Errors, fmt.Sprintf("replica %d: %v", i, err))
			mu.Unlock()
		}
	}
	wg.Wait()
	close(lines)
	byTick := map[int][]replicaLine{}
	for l := range lines {
		byTick[l.Tick] = append(byTick[l.Tick], l)
		if l.Err != "" {
			rep.Errors = append(rep.Errors, fmt.Sprintf("replica %d, tick %d: %s", l.Replica, l.Tick, l.Err))
		}
	}
	for k := cfg.Warmup + 1; k <= total; k++ {
		t := TickReport{Tick: k - cfg.Warmup, DBCPU: marks[k].cpu - marks[k-1].cpu, WALBytes: marks[k].lsn - marks[k-1].lsn, WALFPIs: marks[k].fpi - marks[k-1].fpi}
		var claims []time.Duration
		t.Writes = make([]int64, cfg.Replicas)
		for _, l := range byTick[k] {
			t.ReplicaTicks++
			t.Won += l.Won
			t.Skipped += l.Skipped
			t.Failed += l.Failed
			t.Writes[l.Replica] = l.Writes
			claims = append(claims, l.Claims...)
			t.LastStarted = max(t.LastStarted, l.LastStarted)
		}
		slices.Sort(claims)
		if len(claims) > 0 {
			t.ClaimP50 = claims[len(claims)/2]
			t.ClaimP99 = claims[min(len(claims)-1, len(claims)*99/100)]
		}
		if t.ReplicaTicks != cfg.Replicas {
			rep.Errors = append(rep.Errors, fmt.Sprintf("tick %d: %d of %d replicas reported", k, t.ReplicaTicks, cfg.Replicas))
		}
		rep.Ticks = append(rep.Ticks, t)
	}

	// Each source exactly once per tick, every tick, each succeeded.
	first := cfg.Start.Add(time.Duration(cfg.Warmup) * cfg.Tick)
	last := cfg.Start.Add(time.Duration(total-1) * cfg.Tick)
	err = admin.QueryRow(ctx, `WITH pairs AS (
	SELECT s.source, t.tick, count(r.id) AS n, count(r.id) FILTER (WHERE r.status <> 'succeeded') AS bad
	FROM pg_catalog.unnest($1::text[]) AS s(source)
	CROSS JOIN pg_catalog.generate_series($2::timestamptz, $3::timestamptz, $4::interval) AS t(tick)
	LEFT JOIN `+store.Table()+` AS r ON r.source = s.source AND r.tick = t.tick
	GROUP BY s.source, t.tick)
SELECT coalesce(sum(n), 0), count(*) FILTER (WHERE n > 1), count(*) FILTER (WHERE n = 0), coalesce(sum(bad), 0) FROM pairs`,
		mustSources(cfg), first, last, cfg.Tick).Scan(&rep.Runs, &rep.BadPairs, &rep.Missing, &rep.NotSuccess)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	if rep.Floor, err = measureFloor(ctx, admin, cpu, store.Table(), cfg); err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	return rep, nil
}

func mustSources(cfg Config) []string {
	s, _ := sourceNames(cfg)
	return s
}

// walPosition is the server's WAL insert position in bytes, and its
// full-page images so far (0 before PostgreSQL 14, which has no pg_stat_wal).
func walPosition(ctx context.Context, pool *pgxpool.Pool) (lsn, fpi int64, err error) {
	err = pool.QueryRow(ctx, `SELECT pg_catalog.pg_current_wal_insert_lsn() - '0/0'::pg_lsn,
	CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 140000
	THEN (pg_catalog.xpath('//n/text()', pg_catalog.query_to_xml('SELECT wal_fpi AS n FROM pg_catalog.pg_stat_wal', false, false, '')))[1]::text::bigint ELSE 0 END`).Scan(&lsn, &fpi)
	return lsn, fpi, err
}

// measureFloor runs, per tick, what any correct design must do on a table
// of the same shape: one INSERT ... SELECT of S rows; one UPDATE of the S
// leases per heartbeat the job spans; one UPDATE of the S outcomes; and
// N-1 reads of the S rows, for the losing replicas. It returns the mean
// of three ticks.
func measureFloor(ctx context.Context, pool *pgxpool.Pool, cpu *cpuMeter, runs string, cfg Config) (FloorReport, error) {
	floor := pgx.Identifier{"public", cfg.Table + "_floor"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+floor+" (LIKE "+runs+" INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES INCLUDING CONSTRAINTS)"); err != nil {
		return FloorReport{}, err
	}
	sources := mustSources(cfg)
	beats := int(cfg.Job / cfg.Heartbeat)
	const ticks = 3
	var sum FloorReport
	for k := range ticks {
		tick := time.Now().Add(time.Duration(k) * time.Hour).Truncate(time.Second)
		c0, err := cpu.read(ctx)
		if err != nil {
			return sum, err
		}
		l0, f0, err := walPosition(ctx, pool)
		if err != nil {
			return sum, err
		}
		type step struct {
			sql  string
			args []any
		}
		steps := []step{{`INSERT INTO ` + floor + ` (source, status, owner, started_at, lease_until, heartbeat_at, tick)
SELECT s, 'running', 'floor', pg_catalog.now(), pg_catalog.now() + $2::interval, pg_catalog.now(), $3 FROM pg_catalog.unnest($1::text[]) AS s`, []any{sources, cfg.Lease, tick}}}
		for range beats {
			steps = append(steps, step{`UPDATE ` + floor + ` SET lease_until = pg_catalog.now() + $2::interval, heartbeat_at = pg_catalog.now() WHERE source = ANY($1) AND tick = $3`, []any{sources, cfg.Lease, tick}})
		}
		steps = append(steps, step{`UPDATE ` + floor + ` SET status = 'succeeded', finished_at = pg_catalog.now() WHERE source = ANY($1) AND tick = $2`, []any{sources, tick}})
		for _, st := range steps {
			if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
				return sum, err
			}
		}
		for range cfg.Replicas - 1 {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+floor+` WHERE source = ANY($1) AND tick = $2`, sources, tick).Scan(&n); err != nil {
				return sum, err
			}
		}
		c1, err := cpu.read(ctx)
		if err != nil {
			return sum, err
		}
		l1, f1, err := walPosition(ctx, pool)
		if err != nil {
			return sum, err
		}
		sum.DBCPU += c1 - c0
		sum.WALBytes += l1 - l0
		sum.WALFPIs += f1 - f0
	}
	sum.DBCPU /= ticks
	sum.WALBytes /= ticks
	sum.WALFPIs /= ticks
	return sum, nil
}

// cpuMeter reads the server's CPU time so far.
type cpuMeter struct {
	pool   *pgxpool.Pool
	cgroup string
}

func newCPUMeter(pool *pgxpool.Pool, cgroup string) *cpuMeter { return &cpuMeter{pool, cgroup} }

func (m *cpuMeter) source() string {
	if m.cgroup != "" {
		return "the container's cgroup (" + m.cgroup + "/cpu.stat)"
	}
	return "/proc/<pid>/schedstat of every server process alive at each reading"
}

func (m *cpuMeter) read(ctx context.Context) (time.Duration, error) {
	if m.cgroup != "" {
		b, err := os.ReadFile(m.cgroup + "/cpu.stat")
		if err != nil {
			return 0, err
		}
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				var us int64
				if _, err := fmt.Sscan(v, &us); err != nil {
					return 0, err
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
		return 0, errors.New("no usage_usec in " + m.cgroup + "/cpu.stat")
	}
	var ns int64
	err := m.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_catalog.split_part(
	pg_catalog.pg_read_file('/proc/' || pid || '/schedstat', 0, 200, true), ' ', 1)::bigint), 0)
FROM pg_catalog.pg_stat_activity WHERE pid <> pg_catalog.pg_backend_pid()`).Scan(&ns)
	return time.Duration(ns), err
}

//go:build linux

package failover

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

// The replicas' lease and heartbeat interval. The lease is long enough for
// the failover (an immediate shutdown, a promotion, the replicas' pools
// finding the new primary) and, in the synchronous test, a standby cut for
// one claim's bound (its context plus the 5 s the store gives a claim on
// the wire) to fit well inside the outage Do lets a run survive,
// (3*lease - 2*interval)/4 = 10.75 s, on a loaded machine. A healthy run
// that is lost all the same fails the test.
const (
	lease     = 15 * time.Second
	heartbeat = time.Second
	tick      = 100 * time.Millisecond // how often a replica tries to claim a source it does not run
)

// span is one run as its job saw it, by this process's monotonic clock.
type span struct {
	source, owner string
	run           *runclaim.Run
	start, stop   time.Time // stop is zero while the job runs
	cause         error     // why the job's context ended, if it did before the test let it go
}

// recorder collects the jobs' spans.
type recorder struct {
	mu    sync.Mutex // protects spans
	spans []*span
	ch    chan struct{} // signalled on every change
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 1)} }

func (r *recorder) changed() {
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

// snapshot returns copies of the spans.
func (r *recorder) snapshot() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]span, len(r.spans))
	for i, s := range r.spans {
		out[i] = *s
	}
	return out
}

// waitUntil waits until cond holds for the spans.
func (r *recorder) waitUntil(t *testing.T, what string, cond func([]span) bool) []span {
	t.Helper()
	deadline := time.After(wait)
	for {
		s := r.snapshot()
		if cond(s) {
			return s
		}
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("%s: not within %v; spans: %v", what, wait, s)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// replicas are claimers, each with its own pool on the multi-host DSN,
// each running a scheduler loop per source: claim through Do every tick
// while it does not run the source itself; a job runs until the test ends
// or its run is lost.
type replicas struct {
	t       *testing.T
	rec     *recorder
	release chan struct{} // closed: jobs return nil
	quit    chan struct{} // closed: loops stop
	wg      sync.WaitGroup
	mu      sync.Mutex // protects claimErrs and quitAt
	// claimErrs are the claim errors the loops saw, not counting skips.
	claimErrs []error
	// quitAt is when stop closed quit. A loop that had already passed its
	// check of quit may still claim a source that another replica's job
	// released on the way out, so a span that starts after quitAt is part
	// of the teardown, not of the scenario under test.
	quitAt   time.Time
	claimers []*runclaim.Claimer
}

// newPool returns a pool on dsn that finds a new primary quickly: a dead
// connection is dropped by the health check, and no connection lives long
// enough to stay on a server that has become a standby.
func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.HealthCheckPeriod = 500 * time.Millisecond
	cfg.MaxConnLifetime = time.Minute
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func startReplicas(t *testing.T, c *cluster, n int, storeOpts ...runclaim.PostgresOption) *replicas {
	t.Helper()
	rs := &replicas{t: t, rec: newRecorder(), release: make(chan struct{}), quit: make(chan struct{})}
	for i := range n {
		store, err := runclaim.NewPostgresStore(newPool(t, c.multiDSN()), storeOpts...)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := runclaim.New(store, runclaim.WithLease(lease), runclaim.WithHeartbeat(heartbeat),
			runclaim.WithOwner("replica-"+string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		rs.claimers = append(rs.claimers, cl)
	}
	t.Cleanup(rs.stop)
	return rs
}

// schedule starts every replica's loop for source.
func (rs *replicas) schedule(source string) {
	for _, cl := range rs.claimers {
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
			for {
				select {
				case <-rs.quit:
					return
				default:
				}
				err := cl.Do(context.Background(), source, rs.job(cl.Settings().Owner, source))
				if err != nil && !errors.Is(err, runclaim.ErrNotClaimed) && !errors.Is(err, runclaim.ErrLeaseLost) {
					rs.mu.Lock()
					rs.claimErrs = append(rs.claimErrs, err)
					rs.mu.Unlock()
				}
				select {
				case <-rs.quit:
					return
				case <-time.After(tick):
				}
			}
		}()
	}
}

// job records its run's span; it runs until the test releases it or its
// context ends.
func (rs *replicas) job(owner, source string) func(context.Context, *runclaim.Run) error {
	return func(ctx context.Context, run *runclaim.Run) error {
		s := &span{source: source, owner: owner, run: run, start: time.Now()}
		rs.rec.mu.Lock()
		rs.rec.spans = append(rs.rec.spans, s)
		rs.rec.mu.Unlock()
		rs.rec.changed()
		var err error
		select {
		case <-rs.release:
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
		rs.rec.mu.Lock()
		s.stop, s.cause = time.Now(), err
		rs.rec.mu.Unlock()
		rs.rec.changed()
		return err
	}
}

// stop releases the jobs and waits for the loops; safe to call twice.
func (rs *replicas) stop() {
	select {
	case <-rs.quit:
	default:
		rs.mu.Lock()
		rs.quitAt = time.Now()
		rs.mu.Unlock()
		close(rs.quit)
		close(rs.release)
	}
	rs.wg.Wait()
}

// held reports whether every source has a running span.
func held(spans []span, sources ...string) bool {
	for _, src := range sources {
		if running(spans, src) == nil {
			return false
		}
	}
	return true
}

// running returns the source's running span, or nil.
func running(spans []span, source string) *span {
	for i := range spans {
		if spans[i].source == source && spans[i].stop.IsZero() {
			return &spans[i]
		}
	}
	return nil
}

// overlap is one pair of runs of a source that ran at once.
type overlap struct {
	source      string
	first, then span
	d           time.Duration
}

// overlaps returns every pair of spans of one source that overlapped, by
// the jobs' own start and stop times (a span still running counts as
// running until now).
func overlaps(spans []span) []overlap {
	var out []overlap
	now := time.Now()
	for i := range spans {
		for j := i + 1; j < len(spans); j++ {
			a, b := spans[i], spans[j]
			if a.source != b.source {
				continue
			}
			if b.start.Before(a.start) {
				a, b = b, a
			}
			aStop, bStop := a.stop, b.stop
			if aStop.IsZero() {
				aStop = now
			}
			if bStop.IsZero() {
				bStop = now
			}
			end := aStop
			if bStop.Before(end) {
				end = bStop
			}
			if d := end.Sub(b.start); d > 0 {
				out = append(out, overlap{source: a.source, first: a, then: b, d: d})
			}
		}
	}
	return out
}

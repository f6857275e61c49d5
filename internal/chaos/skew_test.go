package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// The skew test runs three replicas as OS processes whose clocks disagree
// by 400 ms either way, each ticking on its own clock every 500 ms with a
// job of 100 ms, shorter than the skew: the replica ahead runs a tick and
// finishes it before the one behind claims it, and the one ahead names the
// next tick before the one behind has claimed the last. Each tick must run
// exactly once.
const (
	envSkewChild = "CHAOS_SKEW_CHILD" // the child's clock skew, e.g. "-400ms"

	skewPeriod = 500 * time.Millisecond
	skewBy     = 400 * time.Millisecond
	skewJob    = 100 * time.Millisecond
	skewTicks  = 30
)

// TestSkewChild is one replica of TestSkewedClocks: it claims every tick
// of its Ticker with DoTick until SIGTERM.
func TestSkewChild(t *testing.T) {
	env := os.Getenv(envSkewChild)
	if env == "" {
		t.Skip("a helper process of TestSkewedClocks; it runs only when TestSkewedClocks starts it")
	}
	skew, err := time.ParseDuration(env)
	if err != nil {
		t.Fatalf("%s: %v", envSkewChild, err)
	}
	term, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(context.Background(), os.Getenv(envDSN))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	claimer, err := runclaim.New(store, runclaim.WithOwner(os.Getenv(envOwner)), runclaim.WithLease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The replica's clock: its ticks, and so the ticks it names, are
	// skew ahead of the database's.
	clock := func() time.Time { return time.Now().Add(skew) }
	// A deadline of two periods: a tick is missed only if all three
	// replicas are held up that long, which a loaded machine does not do.
	ticker, err := runclaim.NewTicker(runclaim.Every(skewPeriod), 2*skewPeriod, runclaim.WithTickerClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer ticker.Stop()
	fmt.Println(childReady)
	for {
		var tick time.Time
		select {
		case <-term.Done():
			return
		case tick = <-ticker.C:
		}
		err := claimer.DoTick(term, "skewed", tick, func(ctx context.Context, run *runclaim.Run) error {
			select {
			case <-time.After(skewJob):
			case <-ctx.Done():
			}
			return nil
		})
		if err != nil && !errors.Is(err, runclaim.ErrNotClaimed) && term.Err() == nil {
			fmt.Fprintf(os.Stderr, "skew child %s: tick %v: %v\n", env, tick, err)
		}
	}
}

// TestSkewedClocks: three processes on clocks 400 ms apart either way, a
// tick every 500 ms, jobs of 100 ms. Over at least 30 ticks, every tick
// between the first and the last is served by exactly one run, in SQL.
// (Plain claims with Do run most ticks two or three times on such clocks,
// and a claim that skipped only the tick served, not older ones, runs a
// late replica's tick after a newer one.)
func TestSkewedClocks(t *testing.T) {
	db := pgtest.New(t)
	store := migrated(t, db.Pool)
	dir := t.TempDir()
	var children []*child
	for i, skew := range []time.Duration{skewBy, 0, -skewBy} {
		owner := fmt.Sprintf("skew-%d", i)
		children = append(children, startChild(t, owner, filepath.Join(dir, owner+".log"), "TestSkewChild", "3m", time.Minute,
			envSkewChild+"="+skew.String(), envDSN+"="+db.DSN))
	}
	t.Cleanup(func() {
		for _, c := range children {
			if !c.exited {
				_ = c.cmd.Process.Kill()
				<-c.done
			}
		}
	})
	// The ticks checked start once all three replicas run, by the
	// database's clock plus the lead of the one ahead.
	first := dbNow(t, db.Pool).Add(skewBy + skewPeriod)
	eventually(t, 3*time.Minute, skewPeriod, "30 ticks served", func() (bool, error) {
		var n int
		err := db.Pool.QueryRow(t.Context(), `SELECT count(DISTINCT tick) FROM `+store.Table()+` WHERE tick >= $1`, first).Scan(&n)
		return n >= skewTicks+1, err
	})
	for _, c := range children {
		if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("signal %s: %v", c.owner, err)
		}
		if ok, err := c.reap(time.Minute); !ok || err != nil {
			t.Errorf("replica %s: exited %v, %v:\n%s", c.owner, ok, err, c.output)
		}
		// A claim that failed (not a skip): the unique index of ticks
		// served refusing a second run of a tick, say.
		if out := c.output.String(); strings.Contains(out, "skew child ") {
			t.Errorf("replica %s: claims failed:\n%s", c.owner, out)
		}
	}
	// The last tick served may have been cut short by the stop; every tick
	// from first to the one before it must have exactly one run that
	// served it.
	rows, err := db.Pool.Query(t.Context(), `WITH span AS (SELECT min(tick) AS lo, max(tick) AS hi FROM `+store.Table()+` WHERE tick >= $2),
ticks AS (SELECT pg_catalog.generate_series(lo, hi - $1 * interval '1 microsecond', $1 * interval '1 microsecond') AS tick FROM span)
SELECT ticks.tick, count(r.id), coalesce(string_agg(r.owner || ' ' || r.status, ', '), '')
FROM ticks LEFT JOIN `+store.Table()+` AS r ON r.tick = ticks.tick AND r.status IN ('running', 'succeeded', 'failed')
GROUP BY ticks.tick ORDER BY ticks.tick`, skewPeriod.Microseconds(), first)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	checked, byOwner := 0, map[string]int{}
	for rows.Next() {
		var tick time.Time
		var n int
		var who string
		if err := rows.Scan(&tick, &n, &who); err != nil {
			t.Fatal(err)
		}
		checked++
		if n != 1 {
			t.Errorf("tick %s was served by %d runs (%s), want exactly one", tick.UTC().Format("15:04:05.000"), n, who)
		} else {
			byOwner[who]++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d ticks checked from %s; runs by replica: %v", checked, first.UTC().Format(time.TimeOnly), byOwner)
	if checked < skewTicks {
		t.Errorf("%d ticks checked, want at least %d", checked, skewTicks)
	}
	var plain int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM `+store.Table()+` WHERE tick IS NULL`).Scan(&plain); err != nil || plain != 0 {
		t.Errorf("%d runs named no tick (%v)", plain, err)
	}
}

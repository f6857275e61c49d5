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
	"github.com/runclaim/runclaim/internal/sharedtest"
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

	// skewLinePrefix starts a child's line on what became of a tick:
	// "skew-tick T won", "skew-tick T done D" (skipped: D, T or a later
	// tick, was served) or "skew-tick T busy H" (skipped: the run of tick
	// H held the source), T, D and H in Unix microseconds.
	skewLinePrefix = "skew-tick"
)

// TestSkewChild is one replica of TestSkewedClocks: it claims every tick
// of its Ticker with Do and ForTick until SIGTERM.
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
	ticker, err := runclaim.NewTicker(runclaim.Every(skewPeriod), 2*skewPeriod, runclaim.WithClock(clock))
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
		err := claimer.Do(term, "skewed", func(ctx context.Context, run *runclaim.Run) error {
			select {
			case <-time.After(skewJob):
			case <-ctx.Done():
			}
			return nil
		}, runclaim.ForTick(tick))
		// What became of the tick, for the test's account of a tick
		// that no run served.
		var nc *runclaim.NotClaimedError
		switch {
		case err == nil:
			fmt.Printf("%s %d won\n", skewLinePrefix, tick.UnixMicro())
		case errors.As(err, &nc) && errors.Is(err, runclaim.ErrTickDone):
			fmt.Printf("%s %d done %d\n", skewLinePrefix, tick.UnixMicro(), nc.DoneTick.UnixMicro())
		case errors.As(err, &nc) && errors.Is(err, runclaim.ErrAlreadyRunning):
			holder := int64(0)
			if nc.Holder != nil && !nc.Holder.Tick.IsZero() {
				holder = nc.Holder.Tick.UnixMicro()
			}
			fmt.Printf("%s %d busy %d\n", skewLinePrefix, tick.UnixMicro(), holder)
		case term.Err() == nil:
			fmt.Fprintf(os.Stderr, "skew child %s: tick %v: %v\n", env, tick, err)
		}
	}
}

// TestSkewedClocks: three processes on clocks 400 ms apart either way, a
// tick every 500 ms, jobs of 100 ms. Over at least 30 ticks served, no
// tick between the first and the last is served by more than one run, in
// SQL, and a tick served by none is accounted for by what each replica
// was told when it claimed it (see below): on a quiet machine every tick
// is served once.
// (Plain claims with Do run most ticks two or three times on such clocks,
// and a claim that skipped only the tick served, not older ones, runs a
// late replica's tick after a newer one.)
func TestSkewedClocks(t *testing.T) {
	db := sharedtest.MigratedDB(t)
	store := newStore(t, db.Pool)
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
	outcomes := skewOutcomes(t, children)
	checked, missed, byOwner := 0, 0, map[string]int{}
	for rows.Next() {
		var tick time.Time
		var n int
		var who string
		if err := rows.Scan(&tick, &n, &who); err != nil {
			t.Fatal(err)
		}
		checked++
		at := tick.UTC().Format("15:04:05.000")
		switch {
		case n > 1:
			t.Errorf("tick %s was served by %d runs (%s), want exactly one", at, n, who)
		case n == 1:
			byOwner[who]++
		default:
			// No run served the tick. The rules allow that only when
			// every replica that claimed it was refused for another
			// tick's sake: a later tick served first (its claim came
			// after the replica ahead had moved on, which takes a
			// replica held up for most of a period on a loaded
			// machine), or another tick's run holding the source; or
			// when no replica's Ticker delivered it, all of them busy
			// past the next tick. A claim that won it, or a skip that
			// says it was served, is a fault.
			missed++
			why := outcomes[tick.UnixMicro()]
			for _, o := range why {
				switch {
				case o.kind == "won", o.kind == "done" && o.other == tick.UnixMicro(), o.kind == "busy" && o.other == tick.UnixMicro():
					t.Errorf("tick %s was served by no run, yet %s", at, o)
				}
			}
			t.Logf("tick %s was served by no run: %v", at, why)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Every skip for a served tick names the tick served or a later one.
	for tick, list := range outcomes {
		for _, o := range list {
			if o.kind == "done" && o.other < tick {
				t.Errorf("tick %s: %s, an earlier tick", time.UnixMicro(tick).UTC().Format("15:04:05.000"), o)
			}
		}
	}
	t.Logf("%d ticks checked from %s (%d served by no run); runs by replica: %v", checked, first.UTC().Format(time.TimeOnly), missed, byOwner)
	if checked < skewTicks {
		t.Errorf("%d ticks checked, want at least %d", checked, skewTicks)
	}
	var plain int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM `+store.Table()+` WHERE tick IS NULL`).Scan(&plain); err != nil || plain != 0 {
		t.Errorf("%d runs named no tick (%v)", plain, err)
	}
}

// skewOutcome is what became of one tick on one replica (see
// skewLinePrefix).
type skewOutcome struct {
	owner string
	kind  string // won, done or busy
	other int64  // the tick done, or the holder's tick, in Unix microseconds
}

func (o skewOutcome) String() string {
	switch o.kind {
	case "done":
		return fmt.Sprintf("%s was told tick %s was served", o.owner, time.UnixMicro(o.other).UTC().Format("15:04:05.000"))
	case "busy":
		if o.other == 0 { // the skip did not say which tick the holder serves
			return fmt.Sprintf("%s found a run holding the source", o.owner)
		}
		return fmt.Sprintf("%s found the run of tick %s running", o.owner, time.UnixMicro(o.other).UTC().Format("15:04:05.000"))
	}
	return fmt.Sprintf("%s %s it", o.owner, o.kind)
}

// skewOutcomes reads what became of each tick on each replica from their
// output, by tick in Unix microseconds.
func skewOutcomes(t *testing.T, children []*child) map[int64][]skewOutcome {
	t.Helper()
	out := map[int64][]skewOutcome{}
	for _, c := range children {
		for _, line := range strings.Split(c.output.String(), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != skewLinePrefix {
				continue
			}
			var tick, other int64
			if _, err := fmt.Sscan(f[1], &tick); err != nil {
				t.Fatalf("%s: %q: %v", c.owner, line, err)
			}
			if len(f) > 3 {
				if _, err := fmt.Sscan(f[3], &other); err != nil {
					t.Fatalf("%s: %q: %v", c.owner, line, err)
				}
			}
			out[tick] = append(out[tick], skewOutcome{owner: c.owner, kind: f[2], other: other})
		}
	}
	return out
}

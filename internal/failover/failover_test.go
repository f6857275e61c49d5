//go:build linux

package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

// held sources: runs claimed, and replicated, before anything goes wrong.
var steady = []string{"a", "b", "c"}

// migrate creates the runs table on the primary.
func migrate(t *testing.T, c *cluster) {
	t.Helper()
	pool := newPool(t, c.primary.dsn())
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// countRuns counts the runs of source on the server at dsn.
func countRuns(t *testing.T, dsn, source string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM runclaim_runs WHERE source = $1`, source).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkSteady checks that the steady sources' first runs were never lost
// and never overlapped: the failover completed within the lease budget.
//
// A span that started after quit (see replicas.quitAt) is part of the
// teardown: a loop that had passed its check of quit claimed a source
// another replica's job released on the way out. It is left out.
func checkSteady(t *testing.T, spans []span, quit time.Time) {
	t.Helper()
	for _, src := range steady {
		var runs []span
		for _, s := range spans {
			if s.source == src && !s.start.After(quit) {
				runs = append(runs, s)
			}
		}
		if len(runs) != 1 {
			t.Errorf("source %s: %d runs, want the one held through the failover: %v", src, len(runs), runs)
			continue
		}
		if runs[0].cause != nil {
			t.Errorf("source %s: run %d, healthy, was lost in the failover: %v", src, runs[0].run.ID, runs[0].cause)
		}
	}
}

// TestAsyncFailover: with asynchronous replication, a claim that the old
// primary acknowledged while its standby was cut off is lost in the
// failover. The test shows the loss and measures it:
//
//   - the run of source x, acknowledged and running, is not on the
//     promoted standby, so another replica claims x there while the first
//     holder's job still runs: a double run, from the second claim until
//     the first holder's next heartbeat finds its run gone (ErrLeaseLost),
//     not until its lease runs out (none at all when that heartbeat comes
//     before the second claim wins, which a loaded machine makes likelier);
//   - run IDs repeat: the promoted standby hands out again IDs that the old
//     primary had handed out after the cut (40 claims of a busy source
//     consume more than the 32 values Postgres logs a sequence ahead);
//   - Fence refuses the lost run on the new primary, although its ID may
//     now be another run's (Fence matches the source, owner and start too);
//   - runs claimed before the cut survive: the failover takes less than
//     the lease budget, and their heartbeats retry through it.
func TestAsyncFailover(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	migrate(t, c)
	rs := startReplicas(t, c, 3)
	for _, src := range steady {
		rs.schedule(src)
	}
	rs.rec.waitUntil(t, "the steady sources held", func(s []span) bool { return held(s, steady...) })
	c.waitCaughtUp()

	// The standby's WAL receiver is cut off: what the primary
	// acknowledges from now on stays on the primary.
	c.proxy.Cut()
	primary := newPool(t, c.primary.dsn())
	busy := newClaimer(t, primary, "busy")
	var lostIDs []int64
	for range 40 {
		run, err := busy.Claim(t.Context(), "busy")
		if err != nil {
			t.Fatal(err)
		}
		lostIDs = append(lostIDs, run.ID)
		if err := run.Finish(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
	}
	rs.schedule("x")
	first := *running(rs.rec.waitUntil(t, "x held", func(s []span) bool { return held(s, "x") }), "x")
	lostIDs = append(lostIDs, first.run.ID)
	if n := countRuns(t, c.standby.dsn(), "x"); n != 0 {
		t.Fatalf("the standby has %d runs of x while cut off", n)
	}

	c.stop(c.primary, syscall.SIGQUIT) // an immediate shutdown
	stopped := time.Now()
	c.promote()
	promoted := time.Now()

	rs.rec.waitUntil(t, "x claimed again on the new primary, and its first holder gone",
		func(s []span) bool {
			n, firstDone := 0, false
			for _, sp := range s {
				if sp.source == "x" {
					n++
					if sp.run.ID == first.run.ID && sp.owner == first.owner && !sp.stop.IsZero() {
						firstDone = true
					}
				}
			}
			return n >= 2 && firstDone
		})

	// Fence on the new primary refuses the lost run.
	newPrimary := newPool(t, c.standby.dsn())
	store, err := runclaim.NewPostgresStore(newPrimary)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := newPrimary.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Fence(t.Context(), tx, first.run); err == nil || !strings.Contains(err.Error(), "failed over") {
		t.Errorf("Fence of the lost run %d on the new primary: %v, want an error that names a failover", first.run.ID, err)
	} else {
		t.Logf("Fence of the lost run %d on the new primary: %v", first.run.ID, err)
	}
	tx.Rollback(t.Context())

	rs.stop()
	spans := rs.rec.snapshot()
	checkSteady(t, spans, rs.quitAt)

	// The lost run's holder learns it at its first heartbeat on the new
	// primary, which finds the run gone (or, when its ID was handed out
	// again, another run: G14). If that heartbeat came before the new
	// claim of x won, the two jobs never overlapped; else they overlapped
	// once, for at most about a heartbeat interval.
	var lostSpan *span
	for i := range spans {
		if spans[i].source == "x" && spans[i].run.ID == first.run.ID && spans[i].owner == first.owner {
			lostSpan = &spans[i]
		}
	}
	if lostSpan == nil {
		t.Fatalf("no span of the lost run %d of x", first.run.ID)
	}
	ov := overlaps(spans)
	switch {
	case len(ov) == 0:
		t.Logf("no double run of x: run %d (%s) stopped %v after the promotion, before the next run of x started",
			first.run.ID, first.owner, lostSpan.stop.Sub(promoted).Round(time.Millisecond))
	case len(ov) == 1 && ov[0].source == "x" && ov[0].first.run.ID == first.run.ID:
		lost := ov[0]
		t.Logf("double run of x: run %d (%s) and run %d (%s) both ran for %v; the second started %v after the promotion, the first stopped %v after it (the old primary stopped %v before the promotion ended)",
			lost.first.run.ID, lost.first.owner, lost.then.run.ID, lost.then.owner, lost.d.Round(time.Millisecond),
			lost.then.start.Sub(promoted).Round(time.Millisecond), lost.first.stop.Sub(promoted).Round(time.Millisecond),
			promoted.Sub(stopped).Round(time.Millisecond))
	default:
		t.Fatalf("overlaps %v, want at most one: the lost run %d of x and the run claimed after the failover", ov, first.run.ID)
	}
	// Its holder learned it from a heartbeat on the new primary, which
	// found the run gone, not from its lease running out by its own clock
	// (which takes most of a lease): that is what bounds the double run.
	if !errors.Is(lostSpan.cause, runclaim.ErrLeaseLost) || strings.Contains(lostSpan.cause.Error(), "local clock") {
		t.Errorf("the lost run's job ended with %v, want ErrLeaseLost from a heartbeat", lostSpan.cause)
	}

	// Every ID the new primary handed out, against those lost with the old
	// one.
	var after []int64
	for _, s := range spans {
		if s.start.After(stopped) {
			after = append(after, s.run.ID)
		}
	}
	if len(after) == 0 {
		t.Fatal("no run claimed on the new primary")
	}
	var repeated []int64
	for _, id := range after {
		if slices.Contains(lostIDs, id) {
			repeated = append(repeated, id)
		}
	}
	t.Logf("run IDs: lost with the old primary %d..%d; handed out by the new one %v; repeated %v",
		slices.Min(lostIDs), slices.Max(lostIDs), after, repeated)
	if len(repeated) == 0 {
		t.Errorf("no run ID repeated: the new primary handed out %v, above every lost ID (%d..%d)", after, slices.Min(lostIDs), slices.Max(lostIDs))
	}
	if t.Failed() {
		t.Logf("spans: %v", fmtSpans(spans))
	}
}

// newClaimer returns a claimer on a store over pool.
func newClaimer(t *testing.T, pool *pgxpool.Pool, owner string, storeOpts ...runclaim.PostgresOption) *runclaim.Claimer {
	t.Helper()
	store, err := runclaim.NewPostgresStore(pool, storeOpts...)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := runclaim.New(store, runclaim.WithLease(lease), runclaim.WithHeartbeat(heartbeat), runclaim.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func fmtSpans(spans []span) string {
	out := ""
	for _, s := range spans {
		out += fmt.Sprintf("\n  %s run %d by %s, %v, cause %v", s.source, s.run.ID, s.owner, s.stop.Sub(s.start).Round(time.Millisecond), s.cause)
	}
	return out
}

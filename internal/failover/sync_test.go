//go:build linux

package failover

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

// waitSyncRep waits until a claim of source has committed on the primary
// and waits for the synchronous standby: a session that holds the
// source's advisory lock waits on SyncRep. It fails the test if a replica
// wins the source meanwhile: the claim was acknowledged without the
// standby.
func waitSyncRep(t *testing.T, c *cluster, primary *pgxpool.Pool, rs *replicas, source string) {
	t.Helper()
	key := sourceLockKey(t, source)
	deadline := time.After(wait)
	for {
		if s := running(rs.rec.snapshot(), source); s != nil {
			t.Fatalf("run %d of %s acknowledged with the synchronous standby cut off", s.run.ID, source)
		}
		var n int
		err := primary.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid)
WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = ($1::bigint >> 32) & 4294967295
  AND l.objid::bigint = $1::bigint & 4294967295 AND a.wait_event = 'SyncRep'`, key).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("no claim of %s waits for the synchronous standby within %v", source, wait)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// claimBound is the bound the test gives the claim that blocks while the
// synchronous standby is cut off.
const claimBound = time.Second

// TestSyncFailover: with a synchronous standby, and WithSynchronousCommit
// on a cluster whose default is asynchronous (synchronous_commit = local),
// no acknowledged claim is lost in a failover and no source runs twice:
//
//   - with the standby cut off, a claim blocks, and its own bounds (its
//     context, then the store's grace for a claim on the wire) turn that
//     into an error matching its context's, not ErrNotClaimed; a store
//     without the option claims at once meanwhile (so the block is the
//     option's doing); the failed claim's run appears on the primary
//     while the standby is still cut off: it had committed locally, and
//     the cancel request pgx sends when a context ends mid-query ended
//     its wait for the standby, with the server's warning;
//   - a claim acknowledged just before the standby is cut off is on the
//     promoted standby with its ID, and its holder keeps it;
//   - a claim made while the standby is cut off commits on the primary
//     and waits there, unacknowledged: after the primary's immediate
//     shutdown and the promotion, the source is claimed on the new
//     primary, and ran only there;
//   - runs claimed earlier keep heartbeating through the failover, and no
//     two runs of a source overlap;
//   - no run ID is handed out twice.
func TestSyncFailover(t *testing.T) {
	c := newCluster(t, clusterOptions{sync: true, settings: []string{"synchronous_commit = local"}})
	migrate(t, c)
	rs := startReplicas(t, c, 3, runclaim.WithSynchronousCommit("on"))
	for _, src := range steady {
		rs.schedule(src)
	}
	rs.rec.waitUntil(t, "the steady sources held", func(s []span) bool { return held(s, steady...) })

	// The standby cut off: a claim's commit waits for it.
	c.proxy.Cut()
	primary := newPool(t, c.primary.dsn())
	plain := newClaimer(t, primary, "plain")
	run, err := plain.Claim(t.Context(), "unprotected")
	if err != nil {
		t.Fatalf("a claim without WithSynchronousCommit, standby cut off: %v", err)
	}
	if err := run.Finish(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	protected := newClaimer(t, primary, "protected", runclaim.WithSynchronousCommit("on"))
	ctx, cancel := context.WithTimeout(t.Context(), claimBound)
	sent := time.Now()
	run, err = protected.Claim(ctx, "blocked")
	took := time.Since(sent)
	cancel()
	switch {
	case err == nil:
		t.Errorf("a claim with the standby cut off won run %d", run.ID)
	case errors.Is(err, runclaim.ErrNotClaimed):
		t.Errorf("a claim with the standby cut off was skipped: %v", err)
	case !errors.Is(err, context.DeadlineExceeded):
		t.Errorf("a claim with the standby cut off failed with %v, want its context's deadline", err)
	}
	// It blocked (it did not fail at once), and ended within its bounds:
	// its context, and the 5 s the store gives a claim already on the
	// wire. The slack above them is for a loaded machine; a hang is what
	// it catches.
	if took < claimBound || took > claimBound+5*time.Second+10*time.Second {
		t.Errorf("the blocked claim returned after %v, want between %v and its bounds", took, claimBound)
	}
	t.Logf("claim with the synchronous standby cut off: %v after %v", err, took.Round(time.Millisecond))
	// The claim that failed had committed on the primary before it waited
	// for the standby. Other sessions see a transaction waiting there only
	// once its wait ends; the standby is still cut off, so what ends it is
	// the cancel request pgx sent when the claim's context ended. Its run
	// appears, held by nobody, until its lease ends. A missed run, not a
	// double one (see docs/failover.md).
	c.waitFor("the failed claim's run to appear with the standby cut off", func(ctx context.Context, p *pgx.Conn) (bool, error) {
		var n int
		err := p.QueryRow(ctx, `SELECT count(*) FROM runclaim_runs WHERE source = 'blocked' AND owner = 'protected' AND status = 'running'`).Scan(&n)
		return n == 1, err
	})
	if b, err := os.ReadFile(c.primary.log); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(string(b), "canceling wait for synchronous replication due to user request") {
		t.Error("the primary did not log the cancelled wait for the synchronous standby")
	}
	c.proxy.Pass()
	c.waitStreaming()

	// y claimed and acknowledged, then at once the standby cut off again;
	// x claimed while it is: the claim commits on the primary and waits
	// there for the standby, unacknowledged, when the primary stops.
	rs.schedule("y")
	y := *running(rs.rec.waitUntil(t, "y held", func(s []span) bool { return held(s, "y") }), "y")
	c.proxy.Cut()
	rs.schedule("x")
	waitSyncRep(t, c, primary, rs, "x")
	c.stop(c.primary, syscall.SIGQUIT) // an immediate shutdown
	stopped := time.Now()
	c.promote()

	if n := countRuns(t, c.standby.dsn(), "y"); n != 1 {
		t.Errorf("the promoted standby has %d runs of y, want the acknowledged one", n)
	}
	xs := rs.rec.waitUntil(t, "x claimed on the new primary", func(s []span) bool { return held(s, "x") })
	x := *running(xs, "x")
	if !x.start.After(stopped) {
		t.Errorf("x was claimed as run %d before the old primary stopped", x.run.ID)
	}
	// Every held run heartbeats on the new primary: each has a heartbeat
	// later than the promotion (an outcome, not a rate: on a busy machine
	// the heartbeats of all of them need not fall within any one short
	// window).
	newPrimary := newPool(t, c.standby.dsn())
	var promoted time.Time
	if err := newPrimary.QueryRow(t.Context(), `SELECT pg_catalog.clock_timestamp()`).Scan(&promoted); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(wait)
	for {
		var n int
		err := newPrimary.QueryRow(t.Context(), `SELECT count(*) FROM runclaim_runs
WHERE status = 'running' AND owner LIKE 'replica-%' AND heartbeat_at > $1`, promoted).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n == len(steady)+2 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("%d held runs heartbeat on the new primary, want %d", n, len(steady)+2)
		case <-time.After(heartbeat / 4):
		}
	}
	var id int64
	if err := newPrimary.QueryRow(t.Context(), `SELECT id FROM runclaim_runs WHERE source = 'y' AND status = 'running'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if id != y.run.ID {
		t.Errorf("y runs as run %d on the new primary, want the acknowledged run %d", id, y.run.ID)
	}

	rs.stop()
	spans := rs.rec.snapshot()
	checkSteady(t, spans, rs.quitAt)
	if ov := overlaps(spans); len(ov) != 0 {
		t.Errorf("double runs: %v", ov)
	}
	seen := map[int64]bool{}
	for _, s := range spans {
		if seen[s.run.ID] {
			t.Errorf("run ID %d handed out twice", s.run.ID)
		}
		seen[s.run.ID] = true
		if s.start.After(rs.quitAt) {
			continue // claimed during the teardown (see replicas.quitAt); its overlaps and ID were checked
		}
		if s.source == "y" && s.run.ID != y.run.ID {
			t.Errorf("y claimed again as run %d after the failover", s.run.ID)
		}
		if s.source == "x" && s.run.ID != x.run.ID {
			t.Errorf("x claimed as run %d, and again as run %d after the failover", s.run.ID, x.run.ID)
		}
	}
	t.Logf("no acknowledged claim lost, %d runs, none overlapping; x claimed on the new primary %v after the old one stopped",
		len(spans), x.start.Sub(stopped).Round(time.Millisecond))
	if t.Failed() {
		t.Logf("spans: %v", fmtSpans(spans))
	}
}

// sourceLockKey returns the advisory lock key of source in the default
// namespace, as a store computes it (no database needed).
func sourceLockKey(t *testing.T, source string) int64 {
	t.Helper()
	s, err := runclaim.NewPostgresStore(struct{ runclaim.Querier }{})
	if err != nil {
		t.Fatal(err)
	}
	return s.AdvisoryKey(source)
}

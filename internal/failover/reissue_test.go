//go:build linux

package failover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/tcpproxy"
)

// seqState reads the runs table's ID sequence on the server at dsn: the
// last value it has handed out (on a standby: the last value the primary
// logged, which its replay applied) and how many values the primary may
// still hand out before it writes the next WAL record for it.
func seqState(t *testing.T, dsn string) (last, logCnt int64) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var seq string
	if err := conn.QueryRow(t.Context(), `SELECT pg_catalog.pg_get_serial_sequence('runclaim_runs', 'id')`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(t.Context(), `SELECT last_value, log_cnt FROM `+seq).Scan(&last, &logCnt); err != nil {
		t.Fatal(err)
	}
	return last, logCnt
}

// runRow reads run id's source, owner, status and lease end on the server
// at dsn.
func runRow(t *testing.T, dsn string, id int64) (source, owner, status string, leaseUntil time.Time) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	err = conn.QueryRow(t.Context(), `SELECT source, owner, status, lease_until FROM runclaim_runs WHERE id = $1`, id).
		Scan(&source, &owner, &status, &leaseUntil)
	if err != nil {
		t.Fatalf("run %d: %v", id, err)
	}
	return source, owner, status, leaseUntil
}

// oldJob is what the old holder's job saw.
type oldJob struct {
	stopped   time.Time // when its context ended, or the test let it go
	cause     error     // its context's cause; nil if the test let it go
	finishErr error     // what its own run.Finish returned
}

// TestAsyncFailoverReissuedID (G14): an asynchronous failover hands a
// lost run's ID to the next claim of the same source, and the old holder
// never reaches the new run. Its next heartbeat on the new primary finds
// its run gone and cancels its job with ErrLeaseLost; its Finish returns
// ErrLeaseLost; the new run keeps its owner, its status and its lease.
//
// How the ID comes to be handed out again: Postgres writes a sequence's
// state to WAL 32 values ahead (SEQ_LOG_VALS), and a standby resumes from
// the last such record it replayed. The test claims and finishes runs of a
// filler source on the primary until the sequence has handed out every
// value its last WAL record covered (log_cnt 0), and waits until the
// standby has replayed that record. It then cuts the standby's WAL
// receiver off, as TestAsyncFailover does, and the holder claims source x
// through Do: the claim's ID, N, is the first value past the record, so
// the nextval that makes it writes the sequence's next record, and that
// record stays on the primary with the run's row. After an immediate
// shutdown and the promotion, the new primary's sequence stands at N-1,
// and another replica's claim of x gets N, a new start and a running row.
//
// The old holder reaches the servers through a multi-host DSN whose second
// host, the standby, is behind a proxy held cut until the new run is
// claimed: its heartbeats fail through the failover, as any holder's do,
// and reach the new primary only after the new run exists, as when the
// next claim comes before the old holder's next heartbeat. Without G14
// that heartbeat named a running run (ID N, source x) and extended the new
// run's lease, and the old job ran on beside the new one until it ended on
// its own. The test waits a lease for the old job to end, and logs how
// long the two ran at once.
func TestAsyncFailoverReissuedID(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	migrate(t, c)
	ctx := t.Context()

	gate, err := tcpproxy.Start("127.0.0.1:" + strconv.Itoa(c.standby.port))
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	gate.Cut()

	// Use up the values the sequence's last WAL record covers, with runs
	// that reach the standby.
	filler := newClaimer(t, newPool(t, c.primary.dsn()), "filler")
	// At least one claim: a new sequence's first value is not logged ahead
	// yet, and its log_cnt is 0.
	var last, logCnt int64
	for i := 0; i == 0 || logCnt != 0; i++ {
		if i == 100 {
			t.Fatalf("the sequence's log_cnt is still %d after %d claims", logCnt, i)
		}
		run, err := filler.Claim(ctx, "filler")
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		last, logCnt = seqState(t, c.primary.dsn())
	}
	c.waitCaughtUp()
	if got, _ := seqState(t, c.standby.dsn()); got != last {
		t.Fatalf("the standby's sequence stands at %d, the primary's at %d with nothing logged ahead", got, last)
	}
	c.proxy.Cut()

	holderDSN := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2&target_session_attrs=read-write",
		c.primary.port, gate.Addr().Port)
	holder := newClaimer(t, newPool(t, holderDSN), "old")
	runCh := make(chan *runclaim.Run, 1)
	release := make(chan struct{})
	jobCh := make(chan oldJob, 1)
	doErr := make(chan error, 1)
	go func() {
		doErr <- holder.Do(context.Background(), "x", func(ctx context.Context, run *runclaim.Run) error {
			runCh <- run
			var j oldJob
			select {
			case <-ctx.Done():
				j.cause = context.Cause(ctx)
			case <-release:
			}
			j.stopped = time.Now()
			j.finishErr = run.Finish(context.Background(), errors.New("the old holder's outcome"))
			jobCh <- j
			return j.cause
		})
	}()
	released, returned := false, false
	letGo := func() {
		if !released {
			released = true
			close(release)
		}
	}
	defer func() {
		letGo()
		if !returned {
			<-doErr
		}
	}()
	var old *runclaim.Run
	select {
	case old = <-runCh:
	case err := <-doErr:
		t.Fatalf("Do: %v", err)
	case <-time.After(wait):
		t.Fatal("no run of x within the wait")
	}
	if old.ID != last+1 {
		t.Fatalf("the old holder's run got ID %d; want %d, the first past the sequence's replicated record", old.ID, last+1)
	}
	if n := countRuns(t, c.standby.dsn(), "x"); n != 0 {
		t.Fatalf("the standby has %d runs of x while cut off", n)
	}
	if got, _ := seqState(t, c.standby.dsn()); got != last {
		t.Fatalf("the standby's sequence moved to %d while cut off; want %d", got, last)
	}

	c.stop(c.primary, syscall.SIGQUIT) // an immediate shutdown
	c.promote()
	promoted := time.Now()

	// Another replica claims x on the new primary and gets the lost run's
	// ID again.
	newHolder := newClaimer(t, newPool(t, c.standby.dsn()), "new")
	cur, err := newHolder.Claim(ctx, "x")
	if err != nil {
		t.Fatalf("the claim of x on the new primary: %v", err)
	}
	claimed := time.Now()
	if cur.ID != old.ID {
		t.Fatalf("the run of x on the new primary got ID %d, not the lost run's %d", cur.ID, old.ID)
	}
	if !cur.StartedAt.After(old.StartedAt) {
		t.Fatalf("the new run of ID %d starts at %v, not after the lost one's %v", cur.ID, cur.StartedAt, old.StartedAt)
	}
	_, _, _, leaseBefore := runRow(t, c.standby.dsn(), cur.ID)

	// The old holder reaches the new primary from now on.
	gate.Pass()
	passed := time.Now()
	var job oldJob
	select {
	case job = <-jobCh:
	case <-time.After(lease):
		t.Errorf("the old holder's job still runs %v after run %d of x was claimed again on the new primary: its heartbeats found a running run",
			time.Since(claimed).Round(time.Millisecond), cur.ID)
		letGo()
		job = <-jobCh
	}
	doE := <-doErr
	returned = true

	switch {
	case job.cause == nil:
		// The test let the job go: reported above.
	case !errors.Is(job.cause, runclaim.ErrLeaseLost) || strings.Contains(job.cause.Error(), "local clock"):
		t.Errorf("the old holder's job ended with %v; want ErrLeaseLost from a heartbeat on the new primary", job.cause)
	default:
		t.Logf("overlap: the old job ran %v beside the new one: it stopped %v after the old holder could reach the new primary; the new run was claimed %v after the promotion; %v",
			job.stopped.Sub(claimed).Round(time.Millisecond), job.stopped.Sub(passed).Round(time.Millisecond),
			claimed.Sub(promoted).Round(time.Millisecond), job.cause)
	}
	select {
	case <-old.Lost():
	default:
		t.Error("the old run's Lost is not closed")
	}
	if !errors.Is(job.finishErr, runclaim.ErrLeaseLost) {
		t.Errorf("the old holder's Finish: %v; want ErrLeaseLost", job.finishErr)
	}
	if !errors.Is(doE, runclaim.ErrLeaseLost) {
		t.Errorf("the old holder's Do: %v; want ErrLeaseLost", doE)
	}
	if source, owner, status, leaseAfter := runRow(t, c.standby.dsn(), cur.ID); source != "x" || owner != "new" ||
		status != string(runclaim.StatusRunning) || !leaseAfter.Equal(leaseBefore) {
		t.Errorf("run %d is now of %s, %s's, %s, lease until %v; want of x, new's, running, lease until %v",
			cur.ID, source, owner, status, leaseAfter, leaseBefore)
	}
	if err := cur.Finish(ctx, nil); err != nil {
		t.Errorf("the new holder's Finish: %v", err)
	}
}

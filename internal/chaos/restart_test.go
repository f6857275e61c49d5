package chaos

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// holder is one run held through Do while the server restarts.
type holder struct {
	source   string
	claimer  *runclaim.Claimer
	started  chan *runclaim.Run
	release  chan struct{}
	ended    chan struct{} // closed when fn returns
	done     chan error    // Do's result
	run      *runclaim.Run
	cause    error // fn's context's cause when fn returned, nil if not cancelled
	released bool  // fn returned because the test released it
	result   error // Do's result
}

func (h *holder) start() {
	go func() {
		h.done <- h.claimer.Do(context.Background(), h.source, func(ctx context.Context, run *runclaim.Run) error {
			defer close(h.ended)
			h.started <- run
			select {
			case <-h.release:
				h.released = true
				return nil
			case <-ctx.Done():
				h.cause = context.Cause(ctx)
				return h.cause
			}
		})
	}()
}

// TestRestart stops the Postgres container while four runs are held through
// Do, two with a 3 s lease and two with a 60 s lease (heartbeats every
// 500 ms), keeps it down until the short-lease holders have given up, then
// starts it again. It checks that:
//
//   - during the outage every claim fails with a wrapped connection error,
//     never ErrNotClaimed;
//   - the running rows survive the restart;
//   - after it, claims succeed: the short-lease sources are taken over once
//     their leases have ended, the long-lease ones are still refused;
//   - every holder either lost its run (fn's context cancelled with
//     ErrLeaseLost, Do returns ErrLeaseLost) or kept it (fn ran to its end
//     uncancelled, Do returns nil, and no other run of its source started
//     meanwhile), never both; here the short-lease holders lose and the
//     long-lease ones keep their runs, heartbeats having failed during the
//     outage and resumed after it.
//
// It restarts the server every test of this binary shares, so it never runs
// in parallel with them; with PGTEST_DSN there is no container and it is
// skipped.
func TestRestart(t *testing.T) {
	srv := pgtest.SharedServer(t)
	if srv.Container == nil {
		t.Skip("the server comes from PGTEST_DSN: there is no container to restart")
	}
	db := sharedtest.MigratedDB(t)
	withTimeout := func(cfg *pgxpool.Config) { cfg.ConnConfig.ConnectTimeout = 2 * time.Second }
	holdersPool := db.NewPool(t, withTimeout)
	claimerPool := db.NewPool(t, withTimeout)

	const (
		shortLease = 3 * time.Second
		longLease  = time.Minute
		heartbeat  = 500 * time.Millisecond
		claimEvery = 200 * time.Millisecond
	)
	var shortFailedBeats, longFailedBeats atomic.Int32
	longBeats := &beatStore{Store: newStore(t, holdersPool), beats: make(chan beat, 256)}
	short := newClaimer(t, newStore(t, holdersPool), runclaim.WithLease(shortLease), runclaim.WithHeartbeat(heartbeat),
		runclaim.WithOwner("holder-short"), runclaim.WithHooks(runclaim.Hooks{
			HeartbeatFailed: func(runclaim.Event) { shortFailedBeats.Add(1) },
		}))
	long := newClaimer(t, longBeats, runclaim.WithLease(longLease), runclaim.WithHeartbeat(heartbeat),
		runclaim.WithOwner("holder-long"), runclaim.WithHooks(runclaim.Hooks{
			HeartbeatFailed: func(runclaim.Event) { longFailedBeats.Add(1) },
		}))
	other := newClaimer(t, newStore(t, claimerPool), runclaim.WithLease(shortLease), runclaim.WithOwner("claimer-c"))

	var holders []*holder
	for _, h := range []struct {
		source  string
		claimer *runclaim.Claimer
	}{{"short-0", short}, {"short-1", short}, {"long-0", long}, {"long-1", long}} {
		hd := &holder{source: h.source, claimer: h.claimer, started: make(chan *runclaim.Run, 1),
			release: make(chan struct{}), ended: make(chan struct{}), done: make(chan error, 1)}
		hd.start()
		holders = append(holders, hd)
	}
	for _, h := range holders {
		select {
		case h.run = <-h.started:
		case err := <-h.done:
			t.Fatalf("Do of %s: %v", h.source, err)
		case <-time.After(wait):
			t.Fatalf("the run of %s did not start", h.source)
		}
	}
	isShort := func(h *holder) bool { return h.claimer == short }
	before := map[int64]row{}
	for _, h := range holders {
		before[h.run.ID] = rowByID(t, db.Pool, h.run.ID)
	}

	// Stop the server. Should the test fail while it is down, start it
	// again for the tests that follow (cleanups run last-in first-out, so
	// this one runs before the test's database is dropped).
	ctx := context.Background()
	stopTimeout := 10 * time.Second
	stopped := time.Now()
	up := false
	t.Cleanup(func() {
		if !up {
			startServer(t, srv, db.DSN)
		}
	})
	if err := srv.Container.Stop(ctx, &stopTimeout); err != nil {
		t.Fatalf("stop the container: %v", err)
	}
	// Every claim fails with a connection error while it is down; stay down
	// until the short-lease holders' Do have given up and returned.
	var outageClaims int
	tick := time.NewTicker(claimEvery)
	defer tick.Stop()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for returned := 0; returned < 2; {
		select {
		case <-deadline.C:
			t.Fatalf("the short-lease holders did not give up within %v of the stop", wait)
		case <-tick.C:
			for _, source := range []string{"fresh", "short-0", "long-0"} {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := other.Claim(cctx, source)
				cancel()
				outageClaims++
				switch {
				case err == nil:
					t.Fatalf("claim of %s succeeded while the server was down", source)
				case errors.Is(err, runclaim.ErrNotClaimed):
					t.Fatalf("claim of %s during the outage reported a skip: %v", source, err)
				case !isConnectionError(err) || !strings.HasPrefix(err.Error(), "runclaim: claim "):
					t.Fatalf("claim of %s during the outage: %v, want a wrapped connection error", source, err)
				}
			}
		}
		for _, h := range holders {
			if h.result != nil || !isShort(h) {
				continue
			}
			select {
			case h.result = <-h.done:
				returned++
			default:
			}
		}
	}
	for _, h := range holders {
		if !isShort(h) {
			select {
			case <-h.ended:
				t.Fatalf("the long-lease holder of %s stopped during the outage: %v", h.source, h.cause)
			default:
			}
		}
	}

	// Start it again.
	up = true
	startServer(t, srv, db.DSN)
	ready := time.Now()
	t.Logf("the server was down for %v; %d claims failed meanwhile", ready.Sub(stopped), outageClaims)
	check := db.NewPool(t, nil)

	// The running rows survived.
	for _, h := range holders {
		r, b := rowByID(t, check, h.run.ID), before[h.run.ID]
		if r.Status != string(runclaim.StatusRunning) || !r.StartedAt.Equal(b.StartedAt) || r.Owner != b.Owner || r.Source != b.Source {
			t.Errorf("after the restart: %v; before: %v", r, b)
		}
	}

	// Claims succeed again (a connection the pool kept from before the
	// restart may fail once).
	var fresh *runclaim.Run
	eventually(t, wait, claimEvery, "a claim after the restart", func() (bool, error) {
		r, err := other.Claim(ctx, "fresh")
		if err != nil && !isConnectionError(err) {
			t.Fatalf("claim after the restart: %v", err)
		}
		fresh = r
		return err == nil, err
	})
	if err := fresh.Finish(ctx, nil); err != nil {
		t.Error(err)
	}
	// The short-lease sources are taken over once their leases have ended;
	// the long-lease ones are still held.
	for _, h := range holders {
		if isShort(h) {
			var took *runclaim.Run
			eventually(t, wait, claimEvery, "take over "+h.source, func() (bool, error) {
				r, err := other.Claim(ctx, h.source)
				if err != nil && !errors.Is(err, runclaim.ErrAlreadyRunning) {
					t.Fatalf("claim of %s after the restart: %v", h.source, err)
				}
				took = r
				return err == nil, err
			})
			old := rowByID(t, check, h.run.ID)
			if old.Status != string(runclaim.StatusExpired) || took.StartedAt.Before(old.LeaseUntil) || took.ID <= h.run.ID {
				t.Errorf("%s taken over as run %d at %s; the old run is now %v", h.source, took.ID, took.StartedAt, old)
			}
			if err := took.Finish(ctx, nil); err != nil {
				t.Error(err)
			}
			continue
		}
		_, err := other.Claim(ctx, h.source)
		var nc *runclaim.NotClaimedError
		if !errors.As(err, &nc) || nc.Holder == nil || nc.Holder.ID != h.run.ID {
			t.Errorf("claim of %s after the restart: %v, want refused by run %d", h.source, err, h.run.ID)
		}
	}

	// The long-lease holders' heartbeats resume; then they finish.
	beaten := map[int64]bool{}
	for len(beaten) < 2 {
		select {
		case b := <-longBeats.beats:
			if b.err == nil && b.at.After(ready) {
				beaten[b.id] = true
			}
		case <-time.After(wait):
			t.Fatalf("successful heartbeats after the restart for %d of the 2 long-lease runs", len(beaten))
		}
	}
	for _, h := range holders {
		if isShort(h) {
			continue
		}
		close(h.release)
		select {
		case h.result = <-h.done:
		case <-time.After(wait):
			t.Fatalf("Do of %s did not return", h.source)
		}
	}

	// Each holder lost its run or kept it, never both.
	all := rows(t, check, "")
	for _, h := range holders {
		lost := errors.Is(h.cause, runclaim.ErrLeaseLost) && errors.Is(h.result, runclaim.ErrLeaseLost)
		kept := h.released && h.cause == nil && h.result == nil
		final := rowByID(t, check, h.run.ID)
		t.Logf("%s: run %d: lost %v, kept %v; Do returned %v; row %v", h.source, h.run.ID, lost, kept, h.result, final)
		if lost == kept {
			t.Errorf("%s: the holder lost its run: %v, kept it: %v (cause %v, Do returned %v)", h.source, lost, kept, h.cause, h.result)
		}
		if kept {
			if final.Status != string(runclaim.StatusSucceeded) {
				t.Errorf("%s: the holder kept its run, but it ended %v", h.source, final)
			}
			for _, r := range all {
				if r.Source == h.source && r.ID != h.run.ID && final.FinishedAt != nil &&
					!r.StartedAt.Before(h.run.StartedAt) && !r.StartedAt.After(*final.FinishedAt) {
					t.Errorf("%s: the holder kept run %d, yet %v started meanwhile", h.source, h.run.ID, r)
				}
			}
		}
		if isShort(h) && !lost {
			t.Errorf("%s: a 3 s lease outlived an outage that lasted until its holder gave up", h.source)
		}
		if !isShort(h) && !kept {
			t.Errorf("%s: a %v lease was lost in an outage of a few seconds", h.source, longLease)
		}
	}
	if longFailedBeats.Load() == 0 || shortFailedBeats.Load() == 0 {
		t.Errorf("heartbeats failed %d (short) and %d (long) times during the outage, want some of each",
			shortFailedBeats.Load(), longFailedBeats.Load())
	}
}

// startServer starts the stopped container and waits until the server
// accepts connections to dsn: the container's wait strategy only sees the
// port open (and the log lines of the first start).
func startServer(t *testing.T, srv *pgtest.Server, dsn string) {
	t.Helper()
	ctx := context.Background()
	if err := srv.Container.Start(ctx); err != nil {
		t.Fatalf("start the container: %v", err)
	}
	eventually(t, time.Minute, 100*time.Millisecond, "the restarted server accepts connections", func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, dsn)
		if err != nil {
			return false, err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(cctx, "SELECT 1")
		return err == nil, err
	})
}

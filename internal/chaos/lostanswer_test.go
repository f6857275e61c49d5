package chaos

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// TestLostAnswer: the server commits a claim, a heartbeat or a finish, and
// the connection drops before the client reads the answer (the proxy
// drops the answer to the request that carries the source's name, then
// closes the connection). Each call returns a connection error, which is
// neither a skip nor a lost lease, and no double run follows:
//
//   - Claim (and Do, which never calls fn): the run is committed with
//     nobody to run it. It holds the source, against every claimer, its
//     own included, until its lease ends by the database clock; then the
//     next claim marks it expired and takes the source over.
//   - Heartbeat: the lease was extended, but the holder counts on the
//     lease it last heard of. The next heartbeat succeeds; the run goes on,
//     and other claims are still skipped.
//   - Finish: the outcome is recorded and the source is free. Finish again
//     with the same outcome returns nil; with another, ErrFinished.
//
// The lease is 4 s so that a retry after a reconnect fits in it on a
// loaded machine; the test waits one lease, once, for the takeover.
func TestLostAnswer(t *testing.T) {
	db := sharedtest.MigratedDB(t)
	direct := newStore(t, db.Pool)
	p := startProxy(t, db)
	pool := proxiedPool(t, db, p, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	const lease = 4 * time.Second
	var lost atomic.Int32
	a := newClaimer(t, newStore(t, pool), runclaim.WithLease(lease), runclaim.WithOwner("a"),
		runclaim.WithHooks(runclaim.Hooks{LeaseLost: func(runclaim.Event) { lost.Add(1) }}))
	b := newClaimer(t, direct, runclaim.WithLease(lease), runclaim.WithOwner("b"))
	ctx, cancel := context.WithTimeout(t.Context(), 3*wait)
	defer cancel()

	// Prepare every statement on the proxied connection, so that the
	// request that carries a source's name is the one that commits.
	warm, err := a.Claim(ctx, "lost-answer/warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := warm.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}

	// wantHeld checks that claims of src by both claimers are skipped as
	// already running, naming run id.
	wantHeld := func(t *testing.T, src string, id int64) {
		t.Helper()
		for _, c := range []*runclaim.Claimer{a, b} {
			run, err := c.Claim(ctx, src)
			var nc *runclaim.NotClaimedError
			if err == nil {
				_ = run.Finish(ctx, nil)
				t.Fatalf("%s claimed %q as run %d while run %d held it: a double run", c.Settings().Owner, src, run.ID, id)
			}
			if !errors.As(err, &nc) || !errors.Is(err, runclaim.ErrAlreadyRunning) || nc.Holder == nil || nc.Holder.ID != id {
				t.Fatalf("%s's claim of %q: %v, want a skip naming run %d", c.Settings().Owner, src, err, id)
			}
		}
	}
	// wantConnErr checks that err is the lost connection, not a skip, a
	// lost lease or a finished run.
	wantConnErr := func(t *testing.T, what string, err error) {
		t.Helper()
		switch {
		case err == nil:
			t.Fatalf("%s returned nil although its answer was dropped", what)
		case errors.Is(err, runclaim.ErrNotClaimed), errors.Is(err, runclaim.ErrLeaseLost), errors.Is(err, runclaim.ErrFinished):
			t.Fatalf("%s = %v, want a connection error", what, err)
		case !isConnectionError(err):
			t.Errorf("%s = %v, want a connection error", what, err)
		}
		t.Logf("%s returned: %v", what, err)
	}

	t.Run("claim", func(t *testing.T) {
		const src = "lost-answer/claim"
		p.CutReplyTo([]byte(src))
		called := false
		err := a.Do(ctx, src, func(context.Context, *runclaim.Run) error {
			called = true
			return nil
		})
		wantConnErr(t, "Do (its claim's answer lost)", err)
		if called {
			t.Error("Do called fn without knowing it won")
		}
		rs := rows(t, db.Pool, src)
		if len(rs) != 1 || rs[0].Status != "running" || rs[0].Owner != "a" {
			t.Fatalf("runs of %q: %v, want the one the lost claim committed", src, rs)
		}
		orphan := rs[0]
		if got := orphan.LeaseUntil.Sub(orphan.StartedAt); got != lease {
			t.Errorf("the orphan's lease is %v, want %v", got, lease)
		}
		wantHeld(t, src, orphan.ID)

		// Once its lease has ended by the database clock, the next claim
		// takes the source over.
		var taken *runclaim.Run
		eventually(t, lease+wait, lease/20, "a takeover of the orphaned run", func() (bool, error) {
			run, err := b.Claim(ctx, src)
			if err == nil {
				taken = run
				return true, nil
			}
			if !errors.Is(err, runclaim.ErrAlreadyRunning) {
				t.Fatalf("claim of %q while waiting for the takeover: %v", src, err)
			}
			return false, err
		})
		if taken.StartedAt.Before(orphan.LeaseUntil) {
			t.Errorf("run %d started at %v, before the orphan's lease ended at %v", taken.ID, taken.StartedAt, orphan.LeaseUntil)
		}
		if got := rowByID(t, db.Pool, orphan.ID).Status; got != "expired" {
			t.Errorf("the orphan is %s after the takeover, want expired", got)
		}
		if err := taken.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("heartbeat", func(t *testing.T) {
		const src = "lost-answer/heartbeat"
		run, err := a.Claim(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		before := run.Deadline()
		p.CutReplyTo([]byte(src))
		wantConnErr(t, "Heartbeat", run.Heartbeat(ctx))
		if got := rowByID(t, db.Pool, run.ID); got.Status != "running" || !got.LeaseUntil.After(before) {
			t.Fatalf("run after the lost heartbeat: %v, want running with its lease extended past %v", got, before)
		}
		if got := run.Deadline(); !got.Equal(before) {
			t.Errorf("Deadline = %v after a heartbeat with no answer, want the last one heard of, %v", got, before)
		}
		wantHeld(t, src, run.ID)
		if err := run.Heartbeat(ctx); err != nil {
			t.Fatalf("the next Heartbeat: %v", err)
		}
		wantHeld(t, src, run.ID)
		if err := run.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("finish", func(t *testing.T) {
		const src = "lost-answer/finish"
		run, err := a.Claim(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		jobErr := errors.New("boom")
		p.CutReplyTo([]byte(src))
		wantConnErr(t, "Finish", run.Finish(ctx, jobErr))
		if got := rowByID(t, db.Pool, run.ID); got.Status != "failed" || got.Error == nil || *got.Error != "boom" {
			t.Fatalf("run after the lost finish: %v, want failed with \"boom\"", got)
		}
		// The run is over: the source is free, and no other run of it
		// started while it was running.
		next, err := b.Claim(ctx, src)
		if err != nil {
			t.Fatalf("claim after the finish: %v", err)
		}
		if err := next.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if err := run.Finish(ctx, jobErr); err != nil {
			t.Errorf("Finish again with the same outcome: %v, want nil", err)
		}
		if err := run.Finish(ctx, nil); !errors.Is(err, runclaim.ErrFinished) {
			t.Errorf("Finish again with another outcome: %v, want ErrFinished", err)
		}
	})

	if n := lost.Load(); n != 0 {
		t.Errorf("LeaseLost fired %d times; no run was lost", n)
	}
	if st := p.Stats(); st.Cuts != 3 {
		t.Errorf("the proxy cut %d answers, want 3", st.Cuts)
	}
}

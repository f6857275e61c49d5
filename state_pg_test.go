package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestStateSaveRace: a holder without heartbeats saves its state over and
// over until a save is refused, while a rival claims the source until it
// wins once the holder's lease has lapsed. The rival's State must be the
// holder's last save that succeeded, and so must the source's state
// afterwards: no save lands after the claim that took the run over, and
// no save that succeeded is missed by it. Rounds race at the lease's end,
// by the database clock, whatever the machine's speed.
func TestStateSaveRace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	const lease = 50 * time.Millisecond
	holder, err := runclaim.New(store, runclaim.WithOwner("holder"), runclaim.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	rival, err := runclaim.New(store, runclaim.WithOwner("rival"), runclaim.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var refusedLate int
	for round := range 20 {
		src := fmt.Sprintf("race/%d", round)
		run, err := holder.Claim(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		var (
			wg     sync.WaitGroup
			lastOK string
			saves  int
		)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				s := fmt.Sprintf("holder-%d", i)
				err := run.SaveState(ctx, []byte(s))
				if err != nil {
					if !errors.Is(err, runclaim.ErrLeaseLost) {
						t.Errorf("round %d: save %d: %v", round, i, err)
					}
					return
				}
				lastOK, saves = s, saves+1
			}
		}()
		var won *runclaim.Run
		for won == nil {
			r, err := rival.Claim(ctx, src)
			switch {
			case err == nil:
				won = r
			case !errors.Is(err, runclaim.ErrAlreadyRunning):
				t.Fatalf("round %d: rival claim: %v", round, err)
			}
		}
		wg.Wait()
		if saves == 0 {
			continue // the holder never saved: nothing to compare
		}
		refusedLate++
		if got := string(won.State()); got != lastOK {
			t.Errorf("round %d: the rival's run got state %q, want the holder's last save that succeeded, %q", round, got, lastOK)
		}
		st, ok, err := store.State(ctx, src)
		if err != nil || !ok || string(st.State) != lastOK {
			t.Errorf("round %d: the source's state afterwards: %q, %v, %v; want %q", round, st.State, ok, err, lastOK)
		}
		if err := won.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if refusedLate == 0 {
		t.Fatal("no round had a save to compare: the test exercised nothing")
	}
}

// TestStateFenceAgree: Fence and SaveState take the same run for the
// holder: both succeed while the lease is live, and both refuse with
// ErrLeaseLost once it has lapsed by the database clock, taken over or
// not; and a run named with another owner is refused by both.
func TestStateFenceAgree(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	fence := func(run *runclaim.Run) error {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		return store.Fence(ctx, tx, run)
	}
	lapsed := func(run *runclaim.Run) bool {
		var past bool
		if err := db.Pool.QueryRow(ctx, "SELECT pg_catalog.clock_timestamp() >= $1", run.LeaseUntil).Scan(&past); err != nil {
			t.Fatal(err)
		}
		return past
	}
	// The lease is short, so that the test need not wait long for it to
	// lapse; a machine too busy to fence and save within it gets a longer
	// one, on a source of its own (a lease that lapsed before the checks
	// of the live run is the machine's delay, not a fault; any other
	// refusal is).
	var (
		run   *runclaim.Run
		lease time.Duration
	)
	for lease = 200 * time.Millisecond; ; lease *= 4 {
		c, err := runclaim.New(store, runclaim.WithOwner("a"), runclaim.WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		run, err = c.Claim(ctx, fmt.Sprintf("agree-%v", lease))
		if err != nil {
			t.Fatal(err)
		}
		errFence := fence(run)
		errSave := run.SaveState(ctx, []byte("live"))
		if (errFence != nil || errSave != nil) && lapsed(run) && lease < time.Minute {
			t.Logf("the %v lease lapsed before the live run's checks (Fence: %v, SaveState: %v); again with a longer one", lease, errFence, errSave)
			continue
		}
		if errFence != nil {
			t.Fatalf("Fence of a live run: %v", errFence)
		}
		if errSave != nil {
			t.Fatalf("SaveState of a live run: %v", errSave)
		}
		break
	}
	// The same run, with another owner: neither takes it for the holder.
	err := store.SaveState(ctx, runclaim.RunInfo{ID: run.ID, Source: run.Source, Owner: "b", StartedAt: run.StartedAt}, []byte("b"))
	if !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("SaveState with another owner: %v, want ErrLeaseLost", err)
	}
	// Past the lease's end by the database clock.
	for !lapsed(run) {
		time.Sleep(lease / 4)
	}
	if err := store.SaveState(ctx, runclaim.RunInfo{ID: run.ID, Source: run.Source, Owner: run.Owner, StartedAt: run.StartedAt}, []byte("late")); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("SaveState after the lease ended: %v, want ErrLeaseLost", err)
	}
	if err := fence(run); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("Fence after the lease ended: %v, want ErrLeaseLost", err)
	}
	st, ok, err := store.State(ctx, run.Source)
	if err != nil || !ok || string(st.State) != "live" || st.RunID != run.ID {
		t.Errorf("state = %q (run %d), %v, %v; want %q saved by run %d", st.State, st.RunID, ok, err, "live", run.ID)
	}
}

// TestStateOperator: SetState and ClearState are refused while a run holds
// the source, unless forced, and the next run gets what they left.
func TestStateOperator(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	c, err := runclaim.New(store, runclaim.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Claim(ctx, "op")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.SaveState(ctx, []byte("cursor-9")); err != nil {
		t.Fatal(err)
	}
	if err := store.SetState(ctx, "op", []byte("cursor-1"), false); !errors.Is(err, runclaim.ErrSourceHeld) {
		t.Fatalf("SetState while held: %v, want ErrSourceHeld", err)
	}
	if _, err := store.ClearState(ctx, "op", false); !errors.Is(err, runclaim.ErrSourceHeld) {
		t.Fatalf("ClearState while held: %v, want ErrSourceHeld", err)
	}
	if st, _, _ := store.State(ctx, "op"); string(st.State) != "cursor-9" {
		t.Fatalf("state after refused calls: %q", st.State)
	}
	if err := store.SetState(ctx, "op", []byte("cursor-1"), true); err != nil {
		t.Fatalf("SetState forced: %v", err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	next, err := c.Claim(ctx, "op")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(next.State()); got != "cursor-1" {
		t.Fatalf("next run's state %q, want the operator's %q", got, "cursor-1")
	}
	if err := next.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if had, err := store.ClearState(ctx, "op", false); err != nil || !had {
		t.Fatalf("ClearState: %v, %v", had, err)
	}
	last, err := c.Claim(ctx, "op")
	if err != nil {
		t.Fatal(err)
	}
	if got := last.State(); got != nil {
		t.Fatalf("state after ClearState: %q, want nil", got)
	}
	_ = last.Finish(ctx, nil)
	if err := store.SetState(ctx, "op", make([]byte, runclaim.MaxStateLen+1), true); err == nil {
		t.Fatal("SetState of MaxStateLen+1 bytes: nil error")
	}
}

// TestMigrateRepairsStates: a table whose comment says version 9 but that
// lacks the table of states or the overload with a state is at version 8,
// and Migrate puts the missing object back; then a run's save reaches the
// next run.
func TestMigrateRepairsStates(t *testing.T) {
	t.Parallel()
	for name, damage := range map[string]string{
		"function": `DROP FUNCTION "public"."runclaim_runs_claim"(bigint, text, text, bigint, bigint, bigint, timestamptz, text[], bigint[], boolean)`,
		"table":    `DROP TABLE "public"."runclaim_runs_cursors"`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.New(t)
			fresh := repairDamaged(t, db, "the "+name+" missing", func(*runclaim.PostgresStore) string { return damage }, 8)
			c := newClaimer(t, fresh)
			run, err := c.Claim(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if err := run.SaveState(ctx, []byte("after repair")); err != nil {
				t.Fatal(err)
			}
			if err := run.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
			next, err := c.Claim(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			defer next.Finish(ctx, nil)
			if got := string(next.State()); got != "after repair" {
				t.Errorf("state after the repair: %q", got)
			}
		})
	}
}

// TestStateOperatorWaitsForClaim: SetState and ClearState without force
// wait for a claim of the source in flight (it holds the source's advisory
// lock until it commits) and then see its run: they are refused with
// ErrSourceHeld, and the state stays the one the claim read. The claim is
// played by a transaction that takes the lock and inserts a running run,
// as the claim function does, and commits once the operator's call waits.
func TestStateOperatorWaitsForClaim(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	for _, op := range []string{"set", "clear"} {
		t.Run(op, func(t *testing.T) {
			src := "racing-" + op
			if err := store.SetState(ctx, src, []byte("cursor-7"), false); err != nil {
				t.Fatal(err)
			}
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, runclaim.AdvisoryKeyOf(runclaim.DefaultNamespace, src)); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+store.Table()+` (source, status, owner, started_at, lease_until, heartbeat_at)
VALUES ($1, 'running', 'claimer', clock_timestamp(), clock_timestamp() + interval '1 minute', clock_timestamp())`, src); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				if op == "set" {
					done <- store.SetState(ctx, src, []byte("cursor-1"), false)
				} else {
					_, err := store.ClearState(ctx, src, false)
					done <- err
				}
			}()
			waitUntil(t, 10*time.Second, 2*time.Millisecond, op+" to wait for the claim's lock", func() bool { return lockWaiters(t, db.Pool) > 0 })
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := awaitRecv(t, done, 10*time.Second, op); !errors.Is(err, runclaim.ErrSourceHeld) {
				t.Errorf("%s state racing a claim = %v, want ErrSourceHeld", op, err)
			}
			if st, _, err := store.State(ctx, src); err != nil || string(st.State) != "cursor-7" {
				t.Errorf("state after %s racing a claim: %q, %v; want the state the claim read, %q", op, st.State, err, "cursor-7")
			}
		})
	}
}

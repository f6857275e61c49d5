package runclaim_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

// reissue does to the run what an asynchronous failover can do: the
// run's row and the sequence step that made its ID never reached the
// standby. It deletes the row and sets the table's ID sequence back, so
// that the next claim of any source gets run's ID again.
func reissue(t *testing.T, pool *pgxpool.Pool, store *runclaim.PostgresStore, run *runclaim.Run) {
	t.Helper()
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `DELETE FROM `+store.Table()+` WHERE id = $1`, run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence($1, 'id'), $2, false)`, store.Table(), run.ID); err != nil {
		t.Fatal(err)
	}
}

// reissuedRow reads a run's owner, status and lease end by ID.
func reissuedRow(t *testing.T, pool *pgxpool.Pool, store *runclaim.PostgresStore, id int64) (owner, status string, lease time.Time) {
	t.Helper()
	err := pool.QueryRow(t.Context(), `SELECT owner, status, lease_until FROM `+store.Table()+` WHERE id = $1`, id).Scan(&owner, &status, &lease)
	if err != nil {
		t.Fatal(err)
	}
	return owner, status, lease
}

// G14: a run ID handed out again, as after an asynchronous failover,
// never lets the old holder reach the new run. Its heartbeat, its finish
// and its fence each find the run lost and change nothing of the new
// run, and the old holder learns it lost its run.
func TestReissuedRunIDReachesNoNewRun(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()
	newClaimer := func(owner string) *runclaim.Claimer {
		c, err := runclaim.New(store, runclaim.WithOwner(owner), runclaim.WithLease(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old, err := newClaimer("old").Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	reissue(t, db.Pool, store, old)
	// The new run starts at least a microsecond after the old one by the
	// database clock: wait that out, so that the two are told apart by
	// their start whatever the clock's resolution.
	time.Sleep(time.Millisecond)
	cur, err := newClaimer("new").Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	if cur.ID != old.ID {
		t.Fatalf("the new run got ID %d, not the old run's %d: the failover was not simulated", cur.ID, old.ID)
	}
	_, _, leaseBefore := reissuedRow(t, db.Pool, store, cur.ID)

	if err := old.Heartbeat(ctx); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("the old holder's heartbeat: %v; want ErrLeaseLost", err)
	}
	select {
	case <-old.Lost():
	default:
		t.Error("the old run's Lost is not closed after its heartbeat found it gone")
	}
	if _, _, lease := reissuedRow(t, db.Pool, store, cur.ID); !lease.Equal(leaseBefore) {
		t.Errorf("the old holder's heartbeat moved the new run's lease from %v to %v", leaseBefore, lease)
	}

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Fence cannot tell this from a transaction on another database with a
	// run of that ID, so it refuses without ErrLeaseLost (see
	// TestFenceBadInput), naming both causes.
	if err := store.Fence(ctx, tx, old); err == nil || !strings.Contains(err.Error(), "handed its ID out again") {
		t.Errorf("the old holder's fence: %v; want a refusal naming a run ID handed out again", err)
	}
	_ = tx.Rollback(ctx)

	if err := old.Finish(ctx, errors.New("old outcome")); !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Errorf("the old holder's finish: %v; want ErrLeaseLost", err)
	}
	if owner, status, lease := reissuedRow(t, db.Pool, store, cur.ID); owner != "new" || status != string(runclaim.StatusRunning) || !lease.Equal(leaseBefore) {
		t.Errorf("after the old holder's finish the run is %s's, %s, lease until %v; want new's, running, until %v", owner, status, lease, leaseBefore)
	}
	if err := cur.Heartbeat(ctx); err != nil {
		t.Errorf("the new holder's heartbeat: %v", err)
	}
	if err := cur.Finish(ctx, nil); err != nil {
		t.Errorf("the new holder's finish: %v", err)
	}
}

// G14 under Do: the old holder's run context ends with ErrLeaseLost
// within a lease of the ID being handed out again, although every
// heartbeat it sends names an ID that is running; its heartbeats, sent
// in one statement for all of the claimer's runs, never extend the new
// run. DoMany's runs are covered the same way.
func TestReissuedRunIDCancelsOldDo(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()
	const lease = 2 * time.Second
	for _, many := range []bool{false, true} {
		name := "Do"
		if many {
			name = "DoMany"
		}
		t.Run(name, func(t *testing.T) {
			source := "do-" + name
			oldC, err := runclaim.New(store, runclaim.WithOwner("old"), runclaim.WithLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			newC, err := runclaim.New(store, runclaim.WithOwner("new"), runclaim.WithLease(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			var (
				once    sync.Once
				cur     *runclaim.Run
				started = make(chan *runclaim.Run, 1)
				cause   = make(chan error, 1)
			)
			fn := func(ctx context.Context, run *runclaim.Run) error {
				once.Do(func() { started <- run })
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return nil
			}
			done := make(chan error, 1)
			go func() {
				if many {
					done <- oldC.DoMany(ctx, []string{source}, fn)
				} else {
					done <- oldC.Do(ctx, source, fn)
				}
			}()
			old := <-started
			reissue(t, db.Pool, store, old)
			time.Sleep(time.Millisecond)
			cur, err = newC.Claim(ctx, source)
			if err != nil {
				t.Fatal(err)
			}
			if cur.ID != old.ID {
				t.Fatalf("the new run got ID %d, not the old run's %d", cur.ID, old.ID)
			}
			_, _, leaseBefore := reissuedRow(t, db.Pool, store, cur.ID)
			// Within a lease and a half, by this test's clock: the
			// claimer's heartbeats come every lease/3, and its own clock
			// gives up on the run shortly before the lease ends anyway. A
			// run ended by the local clock alone would also close Lost;
			// what tells the two apart is that no heartbeat moved the new
			// run's lease, checked below.
			select {
			case err := <-cause:
				if !errors.Is(err, runclaim.ErrLeaseLost) {
					t.Errorf("the old run's context ended with %v; want ErrLeaseLost", err)
				}
			case <-time.After(10 * lease):
				t.Fatalf("the old run's context did not end within %v of its ID being handed out again", 10*lease)
			}
			if err := <-done; !errors.Is(err, runclaim.ErrLeaseLost) {
				t.Errorf("%s returned %v; want ErrLeaseLost", name, err)
			}
			if owner, status, lease := reissuedRow(t, db.Pool, store, cur.ID); owner != "new" || status != string(runclaim.StatusRunning) || !lease.Equal(leaseBefore) {
				t.Errorf("after the old holder's %s the run is %s's, %s, lease until %v; want new's, running, until %v", name, owner, status, lease, leaseBefore)
			}
			if err := cur.Finish(ctx, nil); err != nil {
				t.Errorf("the new holder's finish: %v", err)
			}
		})
	}
}

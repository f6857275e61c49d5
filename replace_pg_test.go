package runclaim_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// TestReplaceOnPostgres: a claim with Replace asks the holder to stop; the
// holder's heartbeat learns it and keeps the lease; its finish records the
// run replaced; then the claim wins, and the history says both.
func TestReplaceOnPostgres(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	holder, err := newClaimer(t, store, runclaim.WithOwner("holder"), runclaim.WithLease(time.Minute)).Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	won := claimAsync(ctx, newClaimer(t, store, runclaim.WithOwner("replacer"), runclaim.WithLease(time.Minute)), "src", runclaim.Replace())
	var hbErr error
	for ctx.Err() == nil {
		if hbErr = holder.Heartbeat(ctx); hbErr != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.Is(hbErr, runclaim.ErrReplaced) || !errors.Is(hbErr, runclaim.ErrLeaseLost) {
		t.Fatalf("holder's heartbeat: %v, want ErrReplaced and ErrLeaseLost", hbErr)
	}
	select {
	case <-holder.Replaced():
	default:
		t.Error("Replaced() not closed after the heartbeat learnt of the request")
	}
	select {
	case <-holder.Lost():
		t.Error("Lost() closed: a replaced run keeps its lease")
	default:
	}
	if err := holder.Finish(ctx, nil); err != nil {
		t.Fatalf("Finish of the replaced run: %v", err)
	}
	r := waitFor(t, won, 10*time.Second, "the claim with Replace to win")
	if r.err != nil {
		t.Fatalf("claim with Replace: %v", r.err)
	}
	if err := r.run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	recs, err := store.History(ctx, "src", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[1].Status != runclaim.StatusReplaced || recs[0].Status != runclaim.StatusSucceeded {
		t.Errorf("history: %+v, want the replaced run and the replacer's", recs)
	}
}

// TestReplaceStress: four replicas, each with a store of its own, run
// one source with Do and Replace again and again for ten seconds, each run
// holding it until it is asked to stop (or a short while). No two
// functions ever run at once (checked in Go, with a counter of functions
// in flight), and no two runs' recorded lives overlap in the table
// (checked in SQL); and replacements did happen. Both stores.
func TestReplaceStress(t *testing.T) {
	t.Parallel()
	d := sharedtest.Scale(t, 10*time.Second)
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		replaceStress(t, runclaim.NewMemoryStore(), d)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		db := migratedDB(t)
		store := storeOn(t, db.Pool)
		replaceStress(t, store, d)
		var overlapping, replaced int
		if err := db.Pool.QueryRow(t.Context(), `SELECT
	(SELECT count(*) FROM `+store.Table()+` AS a JOIN `+store.Table()+` AS b
	   ON a.source = b.source AND a.id < b.id AND b.started_at < coalesce(a.finished_at, 'infinity')),
	(SELECT count(*) FROM `+store.Table()+` WHERE status = 'replaced')`).Scan(&overlapping, &replaced); err != nil {
			t.Fatal(err)
		}
		if overlapping > 0 || replaced == 0 {
			t.Errorf("in the table: %d pairs of runs overlap, %d runs replaced; want none, and some", overlapping, replaced)
		}
	})
}

func replaceStress(t *testing.T, store runclaim.Store, d time.Duration) {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	var inFlight, overlaps, runs, replaced atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		c := sharedtest.NewClaimer(t, store, runclaim.WithOwner("replica-"+string(rune('a'+i))), runclaim.WithHeartbeat(50*time.Millisecond))
		wg.Go(func() {
			for ctx.Err() == nil {
				err := c.Do(ctx, "src", func(fctx context.Context, run *runclaim.Run) error {
					if inFlight.Add(1) > 1 {
						overlaps.Add(1)
					}
					defer inFlight.Add(-1)
					runs.Add(1)
					select {
					case <-fctx.Done():
					case <-time.After(300 * time.Millisecond):
					}
					return nil
				}, runclaim.Replace())
				if errors.Is(err, runclaim.ErrReplaced) {
					replaced.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d times two functions of the source ran at once", n)
	}
	if runs.Load() < 4 || replaced.Load() < 2 {
		t.Errorf("%d runs, %d replaced in %v: the replicas hardly replaced each other", runs.Load(), replaced.Load(), d)
	}
	t.Logf("%d runs, %d replaced, in %v", runs.Load(), replaced.Load(), d)
}

package runclaim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestReplaceOnPostgres: a claim with Replace asks the holder to stop; the
// holder's heartbeat learns it and keeps the lease; its finish records the
// run replaced; then the claim wins.
func TestReplaceOnPostgres(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	db := pgtest.New(t)
	store := migratedStore(t, db.Pool)
	holderC := newClaimer(t, store, runclaim.WithOwner("holder"), runclaim.WithLease(time.Minute))
	holder, err := holderC.Claim(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan error, 1)
	go func() {
		run, err := newClaimer(t, store, runclaim.WithOwner("replacer"), runclaim.WithLease(time.Minute)).Claim(ctx, "src", runclaim.Replace())
		if err == nil {
			err = run.Finish(ctx, nil)
		}
		won <- err
	}()
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
	if err := <-won; err != nil {
		t.Fatalf("claim with Replace: %v", err)
	}
	recs, err := store.History(ctx, "src", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[1].Status != runclaim.StatusReplaced || recs[0].Status != runclaim.StatusSucceeded {
		t.Errorf("history: %+v, want the replaced run and the replacer's", recs)
	}
}

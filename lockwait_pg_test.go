package runclaim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// Rule: an advisory lock needs no privilege and its key is no secret, so
// any role that can connect can hold a source's lock, or the migration
// lock, for good. The calls that wait for such a lock (Pause, SetState and
// ClearState wait for a source's claims in flight; Migrate for another
// Migrate) wait a bounded time, then fail with 55P03 and an error that
// says another session holds the lock, having changed nothing; they never
// hang until their caller gives up, and never commit after it has.
func TestOperatorLockBounded(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	ctx := t.Context()
	// The squatter: a session-level lock on a connection of its own, from
	// a pool of its own, so that the store's pool keeps every connection.
	squat := func(t *testing.T, key int64) {
		t.Helper()
		conn, err := db.NewPool(t, nil).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_advisory_lock($1)`, key); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = conn.Exec(context.Background(), `SELECT pg_catalog.pg_advisory_unlock($1)`, key)
			conn.Release()
		})
	}
	// A bound well past the calls' own, so that a call that waits for
	// good fails the test rather than hang it.
	bounded := func(t *testing.T) context.Context {
		c, cancel := context.WithTimeout(ctx, 2*time.Minute)
		t.Cleanup(cancel)
		return c
	}
	held := func(t *testing.T, what string, err error) {
		t.Helper()
		if pgCode(err) != "55P03" || !strings.Contains(err.Error(), "another session held") || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("%s while another session holds the lock: %v (SQLSTATE %q); want 55P03 and an error that says so", what, err, pgCode(err))
		}
	}

	t.Run("pause", func(t *testing.T) {
		t.Parallel()
		squat(t, runclaim.AdvisoryKeyOf(runclaim.DefaultNamespace, "paused"))
		held(t, "Pause", store.Pause(bounded(t), "paused", time.Time{}, "hold"))
		if c, _, err := store.Controls(ctx, "paused"); err != nil || len(c) != 0 {
			t.Errorf("after the failed Pause: %+v, %v; want no pause", c, err)
		}
	})
	t.Run("set state", func(t *testing.T) {
		t.Parallel()
		squat(t, runclaim.AdvisoryKeyOf(runclaim.DefaultNamespace, "stated"))
		held(t, "SetState", store.SetState(bounded(t), "stated", []byte("x"), true))
		if _, ok, err := store.State(ctx, "stated"); err != nil || ok {
			t.Errorf("after the failed SetState: a state %v, %v; want none", ok, err)
		}
	})
	t.Run("clear state", func(t *testing.T) {
		t.Parallel()
		if err := store.SetState(ctx, "cleared", []byte("keep"), true); err != nil {
			t.Fatal(err)
		}
		squat(t, runclaim.AdvisoryKeyOf(runclaim.DefaultNamespace, "cleared"))
		_, err := store.ClearState(bounded(t), "cleared", true)
		held(t, "ClearState", err)
		if st, ok, err := store.State(ctx, "cleared"); err != nil || !ok || string(st.State) != "keep" {
			t.Errorf("after the failed ClearState: %q, %v, %v; want the state kept", st.State, ok, err)
		}
	})
	t.Run("migrate", func(t *testing.T) {
		t.Parallel()
		squat(t, runclaim.AdvisoryKeyOf("runclaim.migrate", ""))
		fresh, err := runclaim.NewPostgresStore(db.Pool, runclaim.WithTable(runclaim.DefaultSchema, "fresh_runs"))
		if err != nil {
			t.Fatal(err)
		}
		// The lock is held until the test ends: any bound runs out. A
		// shorter one than Migrate's 30 s spares the wait.
		runclaim.SetMigrateLockWait(fresh, 2*time.Second)
		err = fresh.Migrate(bounded(t))
		if pgCode(err) != "RCMLK" || !strings.Contains(err.Error(), "another session held the migration lock") {
			t.Errorf("Migrate while another session holds the migration lock: %v (SQLSTATE %q); want an error that says so", err, pgCode(err))
		}
		if have, _, err := fresh.SchemaVersion(ctx); err != nil || have != 0 {
			t.Errorf("after the failed Migrate: version %d, %v; want no table", have, err)
		}
	})
}

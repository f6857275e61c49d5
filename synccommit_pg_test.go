package runclaim_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestSynchronousCommit: with WithSynchronousCommit, every write
// transaction of the store (claim, heartbeat, finish, release, prune and
// the deletion of a claim given up) runs with that
// synchronous_commit, as a trigger on the runs table sees it, and the
// setting does not outlive the transaction: the same connections, used
// afterwards, show the server's default. A store without the option
// leaves the default alone.
func TestSynchronousCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	pool := db.NewPool(t, nil)
	plain := migratedStore(t, pool)
	// What each write saw: one row per row written, in commit order.
	// The claim of "slow" waits in the trigger until the test has cancelled
	// it and says so in go_on: an ordering, not a time, so that a busy
	// machine cannot let the claim finish before it is cancelled.
	if _, err := pool.Exec(ctx, `CREATE TABLE seen (n bigserial, op text, level text);
CREATE TABLE go_on (source text);
CREATE FUNCTION see() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' AND NEW.source = 'slow' THEN
		WHILE NOT EXISTS (SELECT 1 FROM public.go_on g WHERE g.source = NEW.source) LOOP
			PERFORM pg_catalog.pg_sleep(0.005); -- until the test has cancelled the claim
		END LOOP;
	END IF;
	INSERT INTO public.seen (op, level) VALUES (TG_OP, pg_catalog.current_setting('synchronous_commit'));
	RETURN NULL;
END $$;
CREATE TRIGGER see AFTER INSERT OR UPDATE OR DELETE ON `+plain.Table()+` FOR EACH ROW EXECUTE FUNCTION public.see()`); err != nil {
		t.Fatal(err)
	}
	var def string
	if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	const level = "remote_write" // not the server's default, "on"
	if def == level {
		t.Fatalf("the server's default synchronous_commit is already %q", level)
	}
	seen := func(t *testing.T) []string {
		t.Helper()
		rows, err := pool.Query(ctx, `DELETE FROM seen RETURNING op || ' ' || level`)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	check := func(t *testing.T, what string, got []string, want string) {
		t.Helper()
		if len(got) == 0 {
			t.Errorf("%s: the trigger saw no write", what)
		}
		for _, g := range got {
			if !strings.HasSuffix(g, " "+want) {
				t.Errorf("%s: a write ran with %q, want synchronous_commit %s", what, g, want)
			}
		}
	}
	lifecycle := func(t *testing.T, store *runclaim.PostgresStore, want string) {
		t.Helper()
		c := newClaimer(t, store, runclaim.WithLease(time.Minute))
		run, err := c.Claim(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		check(t, "claim", seen(t), want)
		if err := run.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		check(t, "heartbeat", seen(t), want)
		if err := run.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		check(t, "finish", seen(t), want)
		run, err = c.Claim(ctx, "a") // a second run: the first becomes prunable
		if err != nil {
			t.Fatal(err)
		}
		seen(t)
		if _, err := store.Release(ctx, run.ID, run.Source); err != nil {
			t.Fatal(err)
		}
		check(t, "release", seen(t), want)
		if _, err := store.Prune(ctx, time.Microsecond); err != nil {
			t.Fatal(err)
		}
		check(t, "prune", seen(t), want)
		// A claim given up while the server runs it, and won, deletes its
		// run in a transaction of its own.
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			for cctx.Err() == nil {
				var n int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = pg_catalog.current_database()`).Scan(&n); err != nil || n > 0 {
					cancel()
					_, _ = pool.Exec(ctx, `INSERT INTO go_on VALUES ('slow')`)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		_, claimErr := c.Claim(cctx, "slow")
		if _, err := pool.Exec(ctx, `DELETE FROM go_on`); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(claimErr, context.Canceled) {
			t.Fatalf("Claim cancelled in flight = %v, want context.Canceled", claimErr)
		}
		got := seen(t)
		if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "DELETE ") }) {
			t.Errorf("a claim given up after it won: the trigger saw %q, want its run deleted", got)
		}
		check(t, "claim given up, and its deletion", got, want)
	}

	t.Run("without", func(t *testing.T) {
		lifecycle(t, plain, def)
	})
	t.Run("with", func(t *testing.T) {
		store, err := runclaim.NewPostgresStore(pool, runclaim.WithSynchronousCommit(level))
		if err != nil {
			t.Fatal(err)
		}
		lifecycle(t, store, level)
		// SET LOCAL ends with its transaction: every connection of the
		// pool shows the default again.
		conns := pool.AcquireAllIdle(ctx)
		if len(conns) == 0 {
			t.Fatal("the pool has no idle connection")
		}
		for _, conn := range conns {
			var got string
			if err := conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != def {
				t.Errorf("after the store's writes a session shows synchronous_commit %q, want the default %q", got, def)
			}
			conn.Release()
		}
	})
}

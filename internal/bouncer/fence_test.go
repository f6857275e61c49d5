package bouncer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runclaim/runclaim"
)

// TestFence: a fenced transaction through PgBouncer in transaction mode,
// with background clients sharing its server connections. Fence succeeds;
// the run's heartbeat goes through; once the lease has ended, a rival's
// claim is skipped and an operator's Release refused (ErrFenced) while the
// transaction is open; after the commit the rival takes over, and the
// fenced write is dated before the rival's run. A Fence of the run that
// was taken over returns ErrLeaseLost. Afterwards no session is left in a
// transaction and the run's row is not locked.
func TestFence(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(strings.ReplaceAll(mode.String(), " ", "_"), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			e := setup(t)
			noise(t, e, mode)
			if _, err := e.db.Pool.Exec(ctx, `CREATE TABLE results (run_id bigint, written_at timestamptz DEFAULT clock_timestamp())`); err != nil {
				t.Fatal(err)
			}
			holder, s := e.claimer(t, mode, runclaim.WithOwner("holder"), runclaim.WithLease(time.Minute))
			rival, _ := e.claimer(t, mode, runclaim.WithOwner("rival"))
			app := e.pool(t, mode, 2, nil) // the job's own pool, through PgBouncer too

			run, err := holder.Claim(ctx, "fenced")
			if err != nil {
				t.Fatal(err)
			}
			tx, err := app.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if err := s.Fence(ctx, tx, run); err != nil {
				t.Fatalf("Fence through PgBouncer: %v", err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO results (run_id) VALUES ($1)`, run.ID); err != nil {
				t.Fatal(err)
			}
			if err := run.Heartbeat(ctx); err != nil {
				t.Fatalf("Heartbeat while fenced: %v", err)
			}
			// End the lease now by the database clock (a heartbeat with a
			// zero lease), rather than wait a minute.
			if _, err := e.db.Pool.Exec(ctx, `UPDATE `+e.table+` SET lease_until = clock_timestamp() WHERE id = $1`, run.ID); err != nil {
				t.Fatal(err)
			}
			e.waitDBClockPast(t, e.row(t, run.ID).LeaseUntil)
			var nc *runclaim.NotClaimedError
			if _, err := rival.Claim(ctx, "fenced"); !errors.As(err, &nc) || nc.Holder == nil || nc.Holder.ID != run.ID {
				t.Fatalf("rival's claim while fenced, after the lease ended: %v; want skipped, held by run %d", err, run.ID)
			}
			if _, err := s.Release(ctx, run.ID, ""); !errors.Is(err, runclaim.ErrFenced) {
				t.Fatalf("Release while fenced: %v; want ErrFenced", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit: %v", err)
			}
			next, err := rival.Claim(ctx, "fenced")
			if err != nil {
				t.Fatalf("rival's claim after the commit: %v", err)
			}
			var late int
			if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM results WHERE run_id = $1 AND written_at >= $2`, run.ID, next.StartedAt).Scan(&late); err != nil || late != 0 {
				t.Fatalf("%d fenced writes dated after the next run started (%v)", late, err)
			}

			tx2, err := app.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx2.Rollback(context.Background())
			if err := s.Fence(ctx, tx2, run); !errors.Is(err, runclaim.ErrLeaseLost) {
				t.Fatalf("Fence of the run taken over: %v; want ErrLeaseLost", err)
			}
			if err := tx2.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if err := next.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}

			var idleInTx int
			if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&idleInTx); err != nil {
				t.Fatal(err)
			}
			if idleInTx != 0 {
				t.Errorf("%d sessions idle in a transaction", idleInTx)
			}
			lock, err := e.db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback(context.Background())
			if _, err := lock.Exec(ctx, `SELECT FROM `+e.table+` WHERE id = $1 FOR UPDATE NOWAIT`, run.ID); err != nil {
				t.Errorf("the fenced run's row is still locked: %v", err)
			}
		})
	}
}

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

// TestWait: claims with runclaim.Wait through PgBouncer in transaction
// mode, with background clients sharing its server connections. Three
// waiters of a held source win one after the other, each after the run
// before it finished, with no two runs at once; a waiter whose ctx ends
// returns ctx's error. Waiting keeps no session state, so nothing is
// left in a transaction.
func TestWait(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(strings.ReplaceAll(mode.String(), " ", "_"), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			e := setup(t)
			noise(t, e, mode)
			holder, _ := e.claimer(t, mode, runclaim.WithOwner("holder"))
			run, err := holder.Claim(ctx, "waited")
			if err != nil {
				t.Fatal(err)
			}
			const waiters = 3
			type result struct {
				run *runclaim.Run
				err error
			}
			wins := make(chan result, waiters)
			for i := range waiters {
				c, _ := e.claimer(t, mode, runclaim.WithOwner("waiter"+string(rune('a'+i))))
				go func() {
					r, err := c.Claim(ctx, "waited", runclaim.Wait())
					wins <- result{r, err}
				}()
			}
			// One gives up: ctx's error, not a skip.
			quitter, _ := e.claimer(t, mode, runclaim.WithOwner("quitter"))
			qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if _, err := quitter.Claim(qctx, "waited", runclaim.Wait()); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, runclaim.ErrNotClaimed) {
				t.Errorf("a waiting claim whose ctx ended: %v; want ctx's error", err)
			}
			prev := run
			for range waiters {
				if err := prev.Finish(ctx, nil); err != nil {
					t.Fatalf("Finish of run %d: %v", prev.ID, err)
				}
				var r result
				select {
				case r = <-wins:
				case <-time.After(time.Minute):
					t.Fatal("no waiter won after the Finish")
				}
				if r.err != nil {
					t.Fatalf("waiting claim: %v", r.err)
				}
				if r.run.ID <= prev.ID || r.run.StartedAt.Before(prev.StartedAt) {
					t.Errorf("run %d (started %v) won after run %d (started %v)", r.run.ID, r.run.StartedAt, prev.ID, prev.StartedAt)
				}
				select {
				case extra := <-wins:
					t.Fatalf("a second waiter returned while run %d held the source: %v, %v", r.run.ID, extra.run, extra.err)
				default:
				}
				prev = r.run
			}
			if err := prev.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

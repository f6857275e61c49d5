package bouncer_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runclaim/runclaim"
)

// TestReplace: through PgBouncer in transaction mode, with other clients'
// statements on the same server connections, a claim with Replace takes
// a source over from a Do whose function returns on cancellation: the
// holder hears at its heartbeat (1 s), is recorded replaced, and the
// claim wins. Five times per mode; the latencies are logged (a timing is a
// figure for BENCHMARKS.md, not a verdict of a test on a shared machine).
func TestReplace(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(strings.ReplaceAll(mode.String(), " ", "_"), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			e := setup(t)
			noise(t, e, mode)
			holder, _ := e.claimer(t, mode, runclaim.WithOwner("holder"), runclaim.WithHeartbeat(time.Second))
			replacer, _ := e.claimer(t, mode, runclaim.WithOwner("replacer"))
			var took []time.Duration
			for range 5 {
				started, done := make(chan struct{}), make(chan error, 1)
				go func() {
					done <- holder.Do(ctx, "replaced", func(ctx context.Context, _ *runclaim.Run) error {
						close(started)
						<-ctx.Done()
						return nil
					})
				}()
				<-started
				t0 := time.Now()
				run, err := replacer.Claim(ctx, "replaced", runclaim.Replace())
				if err != nil {
					t.Fatalf("claim with Replace: %v", err)
				}
				took = append(took, time.Since(t0))
				if err := <-done; !errors.Is(err, runclaim.ErrReplaced) {
					t.Errorf("the holder's Do: %v, want ErrReplaced", err)
				}
				if err := run.Finish(ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
			slices.Sort(took)
			t.Logf("through PgBouncer: replaced in %v (median %v)", took, took[len(took)/2])
		})
	}
}

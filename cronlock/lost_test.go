package cronlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/cronlock"
)

// unreachable is a Store whose heartbeats fail once down is set, as when
// the database goes away.
type unreachable struct {
	runclaim.Store
	down atomic.Bool
}

func (s *unreachable) Heartbeat(ctx context.Context, req runclaim.HeartbeatRequest) (time.Time, error) {
	if s.down.Load() {
		return time.Time{}, errors.New("dial tcp: connection refused")
	}
	return s.Store.Heartbeat(ctx, req)
}

// TestJobSeesLostAfterShutdown: Job's fn winds down after the service's
// shutdown cancelled its context, and meanwhile the database goes away.
// fn must learn that its run is lost from run.Lost(), a margin before the
// lease ends by the local clock, although its context was cancelled long
// before. In a synctest bubble on the memory store, so the time is exact.
func TestJobSeesLostAfterShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &unreachable{Store: runclaim.NewMemoryStore()}
		claimer, err := runclaim.New(store)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		t0 := time.Now()
		var lostAt time.Duration
		job := must[cron.Job](t)(cronlock.Job(ctx, claimer, "sweep", cron.DiscardLogger, func(runCtx context.Context, run *runclaim.Run) error {
			cancel() // the service shuts down
			<-runCtx.Done()
			store.down.Store(true)
			select { // winding down
			case <-run.Lost():
				lostAt = time.Since(t0)
			case <-time.After(10 * claimer.Settings().Lease):
			}
			return runCtx.Err()
		}, everyMinute))
		job.Run()
		if want := claimer.Settings().Lease - claimer.Settings().ExpiryMargin; lostAt != want {
			t.Errorf("fn saw Lost at t0+%v, want t0+%v (the lease less the expiry margin)", lostAt, want)
		}
	})
}

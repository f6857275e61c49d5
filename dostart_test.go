package runclaim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// slowAnswers is a Store whose claims answer late: the run is won, but the
// answer reaches the caller after d, as through a stalled process or a
// claim slower than the lease on a loaded machine.
type slowAnswers struct {
	runclaim.Store
	d time.Duration
}

func (s slowAnswers) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	info, err := s.Store.Claim(ctx, req)
	time.Sleep(s.d)
	return info, err
}

// G1 (seen in internal/chaos TestRedeploy under load): a claim whose
// answer comes after the lease has ended by the holder's own clock must
// not start fn, since another replica may hold the source by then. Do
// returns ErrLeaseLost without calling fn, for Do and DoMany alike.
func TestDoDoesNotStartLostRun(t *testing.T) {
	const lease = 100 * time.Millisecond
	for _, many := range []bool{false, true} {
		store := slowAnswers{runclaim.NewMemoryStore(), 2 * lease}
		c, err := runclaim.New(store, runclaim.WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		called := false
		fn := func(context.Context, *runclaim.Run) error { called = true; return nil }
		if many {
			err = c.DoMany(t.Context(), []string{"src"}, fn)
		} else {
			err = c.Do(t.Context(), "src", fn)
		}
		if called || !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("many=%v: a claim answered %v after it was sent, with a lease of %v: fn called %v, Do returned %v; want fn not called and ErrLeaseLost",
				many, 2*lease, lease, called, err)
		}
	}
}

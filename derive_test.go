package runclaim_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runclaim/runclaim"
)

func TestWith(t *testing.T) {
	ctx := t.Context()
	store := runclaim.NewMemoryStore()
	var claimed []string
	logger := slog.New(slog.DiscardHandler)
	base, err := runclaim.New(store, runclaim.WithLease(time.Minute), runclaim.WithHeartbeat(5*time.Second),
		runclaim.WithLogger(logger),
		runclaim.WithHooks(runclaim.Hooks{Claimed: func(e runclaim.Event) { claimed = append(claimed, e.Run.Owner) }}))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("keeps what opts do not set", func(t *testing.T) {
		d, err := base.With(runclaim.WithMinInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if d.Settings().Owner != base.Settings().Owner || d.Settings().Lease != time.Minute || d.Settings().HeartbeatInterval != 5*time.Second ||
			d.Settings().Logger != logger || d.Settings().MinInterval != time.Hour || base.Settings().MinInterval != 0 {
			t.Fatalf("derived owner %q lease %v heartbeat %v logger %v interval %v (base interval %v)",
				d.Settings().Owner, d.Settings().Lease, d.Settings().HeartbeatInterval, d.Settings().Logger, d.Settings().MinInterval, base.Settings().MinInterval)
		}
		run, err := d.Claim(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if len(claimed) != 1 || claimed[0] != base.Settings().Owner {
			t.Fatalf("Claimed hook saw %v; want the base's owner once", claimed)
		}
		// The derived interval applies to the derived claimer only.
		if _, err := d.Claim(ctx, "s"); !errors.Is(err, runclaim.ErrTooSoon) {
			t.Fatalf("second claim by the derived claimer: %v; want ErrTooSoon", err)
		}
	})

	t.Run("a new lease gets a third of it as heartbeat", func(t *testing.T) {
		d, err := base.With(runclaim.WithLease(9 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if d.Settings().Lease != 9*time.Second || d.Settings().HeartbeatInterval != 3*time.Second {
			t.Fatalf("lease %v heartbeat %v; want 9s and 3s", d.Settings().Lease, d.Settings().HeartbeatInterval)
		}
		d, err = base.With(runclaim.WithLease(9*time.Second), runclaim.WithHeartbeat(time.Second))
		if err != nil || d.Settings().HeartbeatInterval != time.Second {
			t.Fatalf("With(lease, heartbeat) = %v, %v; want heartbeat 1s", d, err)
		}
	})

	t.Run("bad options", func(t *testing.T) {
		for name, opts := range map[string][]runclaim.Option{
			"nil":                               {nil},
			"negative interval":                 {runclaim.WithMinInterval(-time.Second)},
			"heartbeat too long":                {runclaim.WithHeartbeat(30 * time.Second)},
			"lease too short for the heartbeat": {runclaim.WithLease(20 * time.Second), runclaim.WithHeartbeat(10 * time.Second)},
			"bad owner":                         {runclaim.WithOwner("a\x00b")},
		} {
			d, err := base.With(opts...)
			if err == nil || d != nil || !strings.HasPrefix(err.Error(), "runclaim: ") {
				t.Errorf("%s: With = %v, %v; want an error", name, d, err)
			}
		}
		if base.Settings().Lease != time.Minute || base.Settings().HeartbeatInterval != 5*time.Second || base.Settings().MinInterval != 0 {
			t.Fatal("a failed With changed its Claimer")
		}
	})
}

func TestLoggerNil(t *testing.T) {
	c, err := runclaim.New(runclaim.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	if c.Settings().Logger != nil {
		t.Fatalf("Logger() = %v without WithLogger; want nil", c.Settings().Logger)
	}
}

// failingHeartbeats is a Store whose heartbeats always fail, as when the
// database is unreachable after the claim.
type failingHeartbeats struct{ runclaim.Store }

func (failingHeartbeats) Heartbeat(context.Context, runclaim.HeartbeatRequest) (time.Time, error) {
	return time.Time{}, errors.New("connection refused")
}

// TestExpiryMargin checks the documented formula, and that Do cancels a run
// whose heartbeats fail no earlier than ExpiryMargin before the end of its
// lease by the local clock (timers may fire late, never early).
//
// It runs in a synctest bubble: its timers and leases pass in no real time,
// and a busy machine cannot starve its heartbeats.
func TestExpiryMargin(t *testing.T) { synctest.Test(t, testExpiryMargin) }

func testExpiryMargin(t *testing.T) {
	const lease, hb = 600 * time.Millisecond, 100 * time.Millisecond
	c, err := runclaim.New(failingHeartbeats{runclaim.NewMemoryStore()}, runclaim.WithLease(lease), runclaim.WithHeartbeat(hb))
	if err != nil {
		t.Fatal(err)
	}
	margin := c.Settings().ExpiryMargin
	if want := (lease - 2*hb) / 4; margin != want {
		t.Fatalf("ExpiryMargin = %v; want (lease - 2*heartbeat)/4 = %v", margin, want)
	}
	start := time.Now()
	var cancelled time.Duration
	err = c.Do(t.Context(), "s", func(ctx context.Context, _ *runclaim.Run) error {
		select {
		case <-ctx.Done():
			cancelled = time.Since(start)
			return context.Cause(ctx)
		case <-time.After(20 * time.Second):
			return errors.New("not cancelled")
		}
	})
	if !errors.Is(err, runclaim.ErrLeaseLost) {
		t.Fatalf("Do: %v; want ErrLeaseLost", err)
	}
	if cancelled < lease-margin {
		t.Fatalf("cancelled %v after the claim; want no earlier than lease - ExpiryMargin = %v", cancelled, lease-margin)
	}
}

package runclaim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// Rule: a ClaimOption given twice, or nil, makes every entry point return
// an error that is not a skip, before anything is claimed; fn is not
// called.
func TestClaimOptionsRefused(t *testing.T) {
	ctx := t.Context()
	c, err := runclaim.New(runclaim.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	tick := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		opts []runclaim.ClaimOption
	}{
		{"ForTick twice", []runclaim.ClaimOption{runclaim.ForTick(tick), runclaim.ForTick(tick)}},
		{"ForTick twice, other ticks", []runclaim.ClaimOption{runclaim.ForTick(tick), runclaim.ForTick(tick.Add(time.Minute))}},
		{"nil option", []runclaim.ClaimOption{nil}},
		{"zero tick", []runclaim.ClaimOption{runclaim.ForTick(time.Time{})}},
		{"WithKeys twice", []runclaim.ClaimOption{runclaim.WithKeys("a"), runclaim.WithKeys("b")}},
		{"WithKeys without keys", []runclaim.ClaimOption{runclaim.WithKeys()}},
		{"WithKeys empty key", []runclaim.ClaimOption{runclaim.WithKeys("")}},
		{"WithKeys NUL", []runclaim.ClaimOption{runclaim.WithKeys("a\x00b")}},
		{"WithKeys key twice", []runclaim.ClaimOption{runclaim.WithKeys("a", "a")}},
	} {
		notSkip := func(what string, err error) {
			t.Helper()
			if err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
				t.Errorf("%s with %s: %v; want an error that is not a skip", what, tc.name, err)
			}
		}
		_, err := c.Claim(ctx, "src", tc.opts...)
		notSkip("Claim", err)
		_, err = c.ClaimMany(ctx, []string{"src"}, tc.opts...)
		notSkip("ClaimMany", err)
		fn := func(context.Context, *runclaim.Run) error { t.Errorf("fn called with %s", tc.name); return nil }
		notSkip("Do", c.Do(ctx, "src", fn, tc.opts...))
		notSkip("DoMany", c.DoMany(ctx, []string{"src"}, fn, tc.opts...))
	}
	// Nothing was claimed.
	run, err := c.Claim(ctx, "src", runclaim.ForTick(tick))
	if err != nil {
		t.Fatalf("a claim after the refused ones: %v", err)
	}
	if !run.Tick.Equal(tick) {
		t.Errorf("run.Tick = %v, want %v", run.Tick, tick)
	}
}

// Settings reports what New's options made of the Claimer, defaults
// included, and With's changes; a changed copy changes nothing.
func TestSettings(t *testing.T) {
	c, err := runclaim.New(runclaim.NewMemoryStore(), runclaim.WithOwner("pod-7"), runclaim.WithLease(time.Minute),
		runclaim.WithMinInterval(time.Hour), runclaim.WithMaxRunTime(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Settings()
	if s.Owner != "pod-7" || s.Lease != time.Minute || s.MinInterval != time.Hour || s.MaxRunTime != 2*time.Hour ||
		s.HeartbeatInterval != 20*time.Second || s.Logger != nil {
		t.Errorf("Settings() = %+v", s)
	}
	if s.ExpiryMargin <= 0 || s.HeartbeatTimeout <= 0 || s.RetryDelay <= 0 ||
		s.ExpiryMargin+s.HeartbeatInterval > s.Lease {
		t.Errorf("Settings() heartbeat timings %+v do not fit in the lease", s)
	}
	s.Owner = "changed"
	if c.Settings().Owner != "pod-7" {
		t.Error("changing the copy changed the Claimer")
	}
	d, err := c.With(runclaim.WithLease(3 * time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if ds := d.Settings(); ds.Owner != "pod-7" || ds.Lease != 3*time.Minute || ds.HeartbeatInterval != time.Minute || ds.MinInterval != time.Hour {
		t.Errorf("With(WithLease(3m)).Settings() = %+v", ds)
	}
	def, err := runclaim.New(runclaim.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	if ds := def.Settings(); ds.Lease != runclaim.DefaultLease || ds.Owner == "" || ds.MinInterval != 0 || ds.MaxRunTime != 0 {
		t.Errorf("defaults: Settings() = %+v", ds)
	}
}

package runclaim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// Rule: a Claimer's keys are WithSourceKeys's for the source and
// WithKeys's, on Claim, ClaimMany, Do and DoMany; a key with no room skips
// with ErrLimited, and fn is not called.
func TestClaimerKeys(t *testing.T) {
	ctx := t.Context()
	mem := runclaim.NewMemoryStore()
	c, err := runclaim.New(mem, runclaim.WithSourceKeys(func(source string) []string {
		if strings.HasPrefix(source, "avito/") {
			return []string{"site:avito"}
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := mem.SetLimit(ctx, "site:avito", runclaim.Limit{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	run, err := c.Claim(ctx, "avito/moscow")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Claim(ctx, "avito/kazan")
	var nc *runclaim.NotClaimedError
	if !errors.Is(err, runclaim.ErrLimited) || !errors.Is(err, runclaim.ErrNotClaimed) || !errors.As(err, &nc) || nc.Key != "site:avito" {
		t.Fatalf("second claim of a key with MaxRunning 1: %v; want ErrLimited for site:avito", err)
	}
	called := false
	if err := c.Do(ctx, "avito/kazan", func(context.Context, *runclaim.Run) error { called = true; return nil }); !errors.Is(err, runclaim.ErrLimited) || called {
		t.Errorf("Do of a limited key: %v, fn called %v", err, called)
	}
	runs, err := c.ClaimMany(ctx, []string{"avito/kazan", "other"})
	if err != nil || len(runs) != 1 || runs[0].Source != "other" {
		t.Errorf("ClaimMany: %v, %d runs; want only other", err, len(runs))
	}
	// WithKeys adds to the source's keys.
	if err := mem.Cooldown(ctx, "proxy:eu", time.Now().Add(time.Hour), "HTTP 429"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Claim(ctx, "plain", runclaim.WithKeys("proxy:eu"))
	if !errors.As(err, &nc) || nc.Key != "proxy:eu" || nc.Note != "HTTP 429" {
		t.Errorf("claim with WithKeys of a cooling key: %v", err)
	}
	// Run.Cooldown, by the store's clock.
	if err := run.Cooldown(ctx, "site:avito", time.Hour, "HTTP 429 Retry-After 3600"); err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_, err = c.Claim(ctx, "avito/kazan")
	if !errors.As(err, &nc) || nc.Note != "HTTP 429 Retry-After 3600" {
		t.Errorf("claim after Run.Cooldown: %v", err)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if err := run.Cooldown(ctx, "site:avito", d, ""); err == nil {
			t.Errorf("Run.Cooldown(%v) returned nil", d)
		}
	}
	if err := run.Cooldown(ctx, "", time.Second, ""); err == nil {
		t.Errorf("Run.Cooldown of an empty key returned nil")
	}
}

// notLimiter is a Store that does not honour keys.
type notLimiter struct{ runclaim.Store }

// Rule: a claim that names keys on a Store that is not a Limiter is an
// error, not a silent claim without them.
func TestKeysNeedLimiter(t *testing.T) {
	ctx := t.Context()
	c, err := runclaim.New(notLimiter{runclaim.NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "src", runclaim.WithKeys("k")); err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
		t.Errorf("Claim with keys on a store that is not a Limiter: %v", err)
	}
	if _, err := c.ClaimMany(ctx, []string{"src"}, runclaim.WithKeys("k")); err == nil || errors.Is(err, runclaim.ErrNotClaimed) {
		t.Errorf("ClaimMany with keys on a store that is not a Limiter: %v", err)
	}
	if _, err := runclaim.New(runclaim.NewMemoryStore(), runclaim.WithSourceKeys(nil)); err == nil {
		t.Errorf("WithSourceKeys(nil) returned nil")
	}
}

// Rule: Limit.Validate names the field.
func TestLimitValidate(t *testing.T) {
	for _, tc := range []struct {
		l     runclaim.Limit
		field string
	}{
		{runclaim.Limit{MaxRunning: -1}, "MaxRunning"},
		{runclaim.Limit{MaxStarts: -1}, "MaxStarts"},
		{runclaim.Limit{MaxStarts: 1}, "Per"},
		{runclaim.Limit{Per: time.Second}, "Per"},
		{runclaim.Limit{MaxStarts: 1, Per: time.Nanosecond}, "Per"},
		{runclaim.Limit{MaxStarts: 1, Per: runclaim.MaxLimitPer + time.Second}, "Per"},
	} {
		err := tc.l.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Limit%+v.Validate() = %v, want an error naming %s", tc.l, err, tc.field)
		}
	}
	for _, l := range []runclaim.Limit{{}, {MaxRunning: 3}, {MaxStarts: 100, Per: time.Hour}} {
		if err := l.Validate(); err != nil {
			t.Errorf("Limit%+v.Validate() = %v", l, err)
		}
	}
}

// Rule: a cooldown note that cannot be stored is refused with an error
// that names a cooldown note, never a pause note.
func TestCooldownNoteErrors(t *testing.T) {
	t.Parallel()
	for _, note := range []string{strings.Repeat("n", runclaim.MaxCooldownNoteLen+1), "bad \xff", "nul \x00"} {
		err := runclaim.NewMemoryStore().Cooldown(t.Context(), "k", time.Now().Add(time.Hour), note)
		if err == nil || !strings.Contains(err.Error(), "cooldown note") || strings.Contains(err.Error(), "pause") {
			t.Errorf("Cooldown with note %.20q: %v; want an error about the cooldown note alone", note, err)
		}
	}
	if err := runclaim.NewMemoryStore().Pause(t.Context(), "s", time.Time{}, strings.Repeat("n", runclaim.MaxPauseNoteLen+1)); err == nil || !strings.Contains(err.Error(), "pause note") {
		t.Errorf("Pause with a long note: %v", err)
	}
}

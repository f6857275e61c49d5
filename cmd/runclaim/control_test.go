package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/testclock"
)

// controlOnMemory makes the control commands act on a memory store with a
// clock of its own, for the length of the test.
func controlOnMemory(t *testing.T) (*runclaim.MemoryStore, *testclock.Clock) {
	t.Helper()
	clock := testclock.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	mem := runclaim.NewMemoryStore(runclaim.WithClock(clock.Now))
	prev := openControl
	pauses := &pauseLog{MemoryStore: mem, until: map[string]time.Time{}}
	openControl = func(*cli, context.Context) (controlTarget, error) {
		return controlTarget{ctl: pauses, now: func(context.Context) (time.Time, error) { return clock.Now(), nil },
			paused: func(_ context.Context, source string) (bool, error) {
				until, ok := pauses.until[source]
				return ok && (until.IsZero() || clock.Now().Before(until)), nil
			}}, nil
	}
	t.Cleanup(func() { openControl = prev })
	return mem, clock
}

// pauseLog is a memory store that remembers the pauses made through it,
// since a memory store does not list them.
type pauseLog struct {
	*runclaim.MemoryStore
	until map[string]time.Time // source: the pause's end, zero for none
}

func (p *pauseLog) Pause(ctx context.Context, source string, until time.Time, note string) error {
	err := p.MemoryStore.Pause(ctx, source, until, note)
	if err == nil {
		p.until[source] = until
	}
	return err
}

func (p *pauseLog) Resume(ctx context.Context, source string) error {
	err := p.MemoryStore.Resume(ctx, source)
	if err == nil {
		delete(p.until, source)
	}
	return err
}

// claimErr claims source on store with a minimum interval and returns the
// error; a claim that wins is finished.
func claimErr(t *testing.T, store runclaim.Store, source string, interval time.Duration) error {
	t.Helper()
	c, err := runclaim.New(store, runclaim.WithOwner("test"), runclaim.WithMinInterval(interval))
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Claim(t.Context(), source)
	if err == nil {
		if err := run.Finish(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
	}
	return err
}

// TestPauseResumeTrigger runs the three commands on a memory store and
// checks what they did through claims.
func TestPauseResumeTrigger(t *testing.T) {
	mem, clock := controlOnMemory(t)

	r := mustRun(t, nil, exitOK, "pause", "avito", "--note", "banned; ticket 42")
	if want := `paused "avito" until 'runclaim resume' (note: banned; ticket 42); a running run goes on`; !strings.Contains(r.stdout, want) {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	err := claimErr(t, mem, "avito", 0)
	var nc *runclaim.NotClaimedError
	if !errors.Is(err, runclaim.ErrPaused) || !errors.As(err, &nc) || nc.Note != "banned; ticket 42" || !nc.RetryAfter.IsZero() {
		t.Fatalf("claim after pause: %v, want ErrPaused with the note and no end", err)
	}

	// --until as a duration counts from the store's clock.
	r = mustRun(t, nil, exitOK, "pause", "avito", "--until", "1d2h", "--json")
	obj := decodeObject(t, r.stdout, "source", "paused_until", "note")
	want := clock.Now().Add(26 * time.Hour)
	if obj["source"] != "avito" || !rfc3339(t, obj["paused_until"]).Equal(want) || obj["note"] != "" {
		t.Errorf("JSON %v, want avito paused until %v without a note", obj, want)
	}
	if err := claimErr(t, mem, "avito", 0); !errors.As(err, &nc) || !nc.RetryAfter.Equal(want) {
		t.Errorf("claim during the timed pause: %v, want ErrPaused until %v", err, want)
	}
	clock.Advance(26 * time.Hour)
	if err := claimErr(t, mem, "avito", time.Hour); err != nil {
		t.Errorf("claim once the pause ended: %v", err)
	}

	// --until as a time; one that has passed is refused.
	at := clock.Now().Add(time.Hour).Format(time.RFC3339)
	r = mustRun(t, nil, exitOK, "pause", "avito", "--until", at)
	if !strings.Contains(r.stdout, "until "+at) {
		t.Errorf("stdout %q lacks the end %s", r.stdout, at)
	}
	past := clock.Now().Add(-time.Hour).Format(time.RFC3339)
	r = mustRun(t, nil, exitUsage, "pause", "avito", "--until", past)
	if !strings.Contains(r.stderr, "runclaim pause: --until "+past+" is in the past") || strings.Contains(r.stderr, "zero time") {
		t.Errorf("stderr %q", r.stderr)
	}

	// Trigger waits for the pause; resume lets it in despite the interval.
	mustRun(t, nil, exitOK, "trigger", "avito")
	if err := claimErr(t, mem, "avito", time.Hour); !errors.Is(err, runclaim.ErrPaused) {
		t.Errorf("claim of a paused, triggered source: %v, want ErrPaused", err)
	}
	r = mustRun(t, nil, exitOK, "resume", "avito")
	if want := `resumed "avito"`; !strings.HasPrefix(r.stdout, want) {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	if err := claimErr(t, mem, "avito", time.Hour); err != nil {
		t.Errorf("triggered claim after resume: %v", err)
	}
	if err := claimErr(t, mem, "avito", time.Hour); !errors.Is(err, runclaim.ErrTooSoon) {
		t.Errorf("second claim after one trigger: %v, want ErrTooSoon", err)
	}
	if r := mustRun(t, nil, exitOK, "resume", "never-paused", "--json"); decodeObject(t, r.stdout, "source", "was_paused")["source"] != "never-paused" {
		t.Errorf("resume --json: %s", r.stdout)
	}
	if r := mustRun(t, nil, exitOK, "trigger", "avito", "--json"); decodeObject(t, r.stdout, "source", "seen")["source"] != "avito" {
		t.Errorf("trigger --json: %s", r.stdout)
	}
}

// TestControlUsage: bad command lines are refused with exit 2 before the
// store is opened, and change nothing.
func TestControlUsage(t *testing.T) {
	mem, _ := controlOnMemory(t)
	for _, args := range [][]string{
		{"pause"},
		{"pause", ""},
		{"pause", "a\x00b"},
		{"pause", "a", "b"},
		{"pause", "x", "--until", "soon"},
		{"pause", "x", "--until", "-1h"},
		{"pause", "x", "--until", "0s"},
		{"pause", "x", "--until", "2026-13-01T00:00:00Z"},
		{"pause", "x", "--until", ""},
		{"pause", "x", "--note", "a\x00b"},
		{"pause", "x", "--note", "\xff"},
		{"pause", "x", "--note", strings.Repeat("n", runclaim.MaxPauseNoteLen+1)},
		{"resume"},
		{"resume", "x", "y"},
		{"resume", "bad\nsource"},
		{"trigger"},
		{"trigger", "\xff"},
	} {
		if r := runCLI(t, nil, nil, args...); r.code != exitUsage {
			t.Errorf("%q: %+v, want exit 2", args, r)
		}
	}
	if err := claimErr(t, mem, "x", 0); err != nil {
		t.Errorf("a bad command line paused x: %v", err)
	}
}

// TestControlNeedsController: on a store that cannot pause, the commands
// fail with a clear error.
func TestControlNeedsController(t *testing.T) {
	prev := openControl
	openControl = func(*cli, context.Context) (controlTarget, error) {
		return controlTarget{}, errors.New("this store cannot pause")
	}
	t.Cleanup(func() { openControl = prev })
	for _, cmd := range []string{"pause", "resume", "trigger"} {
		r := runCLI(t, nil, nil, cmd, "x")
		if r.code != exitError || !strings.Contains(r.stderr, "runclaim "+cmd+": this store cannot pause") {
			t.Errorf("%s: %+v, want exit 1 and the error", cmd, r)
		}
	}
}

// TestControlHelp: each command's help has examples.
func TestControlHelp(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"pause", "resume", "trigger"} {
		r := mustRun(t, nil, exitOK, cmd, "--help")
		if !strings.Contains(r.stdout, "Examples:\n  runclaim "+cmd) && !strings.Contains(r.stdout, "Examples:\n  # ") {
			t.Errorf("%s --help lacks examples:\n%s", cmd, r.stdout)
		}
	}
}

// TestExecSkipPaused: exec says why it skipped a paused source, with the
// pause's end and its note, escaped.
func TestExecSkipPaused(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		nc   runclaim.NotClaimedError
		want string
	}{
		{runclaim.NotClaimedError{Source: "avito", Reason: runclaim.ErrPaused, Note: "banned\x1b[31m"},
			`"avito" is paused until resumed ('runclaim resume'): banned\x1b[31m`},
		{runclaim.NotClaimedError{Source: "avito", Reason: runclaim.ErrPaused, RetryAfter: end},
			`"avito" is paused until ` + formatTime(end)},
	} {
		if got := skipReason(&tc.nc, 0); got != tc.want {
			t.Errorf("skipReason = %q, want %q", got, tc.want)
		}
	}
}

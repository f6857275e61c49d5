package runclaim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
)

// TestRunningFunc: RunningFunc gives the running runs by source, of every
// source or of one, with the database time it also returns, the same ones
// as Running; it stops at fn's first error and returns that error as it
// is; it refuses bad input before any SQL.
func TestRunningFunc(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	c := newClaimer(t, store)
	ids := map[string]int64{}
	for _, source := range []string{"c", "a", "b"} {
		run, err := c.Claim(ctx, source)
		if err != nil {
			t.Fatal(err)
		}
		ids[source] = run.ID
	}
	done, err := c.Claim(ctx, "done")
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}

	collect := func(source string) []runclaim.RunRecord {
		t.Helper()
		var got []runclaim.RunRecord
		var at time.Time
		now, err := store.RunningFunc(ctx, source, func(r runclaim.RunRecord, now time.Time) error {
			if !at.IsZero() && !now.Equal(at) {
				t.Errorf("RunningFunc(%q): the time given changed from %v to %v", source, at, now)
			}
			at = now
			got = append(got, r)
			return nil
		})
		if err != nil {
			t.Fatalf("RunningFunc(%q): %v", source, err)
		}
		if now.IsZero() || !at.IsZero() && !now.Equal(at) {
			t.Errorf("RunningFunc(%q) returned the time %v, gave fn %v", source, now, at)
		}
		return got
	}
	for source, want := range map[string][]string{"": {"a", "b", "c"}, "b": {"b"}, "done": nil} {
		got := collect(source)
		if len(got) != len(want) {
			t.Fatalf("RunningFunc(%q): %d runs, want %d", source, len(got), len(want))
		}
		for i, r := range got {
			if r.Source != want[i] || r.ID != ids[want[i]] || r.Status != runclaim.StatusRunning {
				t.Errorf("RunningFunc(%q): run %d is %+v, want the running run %d of %s", source, i, r, ids[want[i]], want[i])
			}
		}
		runs, now, err := store.Running(ctx, source)
		if err != nil || len(runs) != len(got) || now.IsZero() {
			t.Fatalf("Running(%q) = %d runs, %v, %v; RunningFunc gave %d", source, len(runs), now, err, len(got))
		}
		for i := range runs {
			if runs[i] != got[i] {
				t.Errorf("Running(%q), run %d: %+v, RunningFunc %+v", source, i, runs[i], got[i])
			}
		}
	}

	t.Run("fn's error", func(t *testing.T) {
		stop := errors.New("stop here")
		calls := 0
		_, err := store.RunningFunc(ctx, "", func(runclaim.RunRecord, time.Time) error {
			calls++
			if calls == 2 {
				return stop
			}
			return nil
		})
		if err != stop || calls != 2 {
			t.Errorf("RunningFunc = %v after %d calls, want exactly the function's error after 2", err, calls)
		}
		// The connection went back to the pool in a usable state.
		if got := collect(""); len(got) != len(ids) {
			t.Errorf("after a stop: %d runs, want %d", len(got), len(ids))
		}
	})

	t.Run("bad input", func(t *testing.T) {
		noop := func(runclaim.RunRecord, time.Time) error { t.Error("fn called"); return nil }
		var nilCtx context.Context
		for name, call := range map[string]func() error{
			"nil ctx":   func() error { _, err := store.RunningFunc(nilCtx, "a", noop); return err },
			"invisible": func() error { _, err := store.RunningFunc(ctx, "s\u200brc", noop); return err },
			"nil fn":    func() error { _, err := store.RunningFunc(ctx, "a", nil); return err },
			"cancelled ctx": func() error {
				c, cancel := context.WithCancel(ctx)
				cancel()
				_, err := store.RunningFunc(c, "a", noop)
				return err
			},
			"invalid UTF-8": func() error { _, err := store.RunningFunc(ctx, "\xff", noop); return err },
		} {
			if err := call(); err == nil {
				t.Errorf("%s: no error", name)
			}
		}
	})
}

package runclaim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/runclaim/runclaim"
)

// TestHistoryFunc: HistoryFunc gives the runs newest first, at most limit
// of them, the same ones as History; it stops at fn's first error and
// returns that error as it is; it refuses bad input before any SQL.
func TestHistoryFunc(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	c := newClaimer(t, store)
	var ids []int64
	for i := range 5 {
		run, err := c.Claim(ctx, "src")
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Finish(ctx, fmt.Errorf("failure %d", i)); err != nil {
			t.Fatal(err)
		}
		ids = append([]int64{run.ID}, ids...) // newest first
	}
	if _, err := c.Claim(ctx, "other"); err != nil {
		t.Fatal(err)
	}

	collect := func(limit int) []runclaim.RunRecord {
		t.Helper()
		var got []runclaim.RunRecord
		if err := store.HistoryFunc(ctx, "src", limit, func(r runclaim.RunRecord) error {
			got = append(got, r)
			return nil
		}); err != nil {
			t.Fatalf("HistoryFunc(limit %d): %v", limit, err)
		}
		return got
	}
	for _, limit := range []int{1, 3, 5, 100} {
		got := collect(limit)
		if want := min(limit, len(ids)); len(got) != want {
			t.Fatalf("limit %d: %d runs, want %d", limit, len(got), want)
		}
		for i, r := range got {
			if r.ID != ids[i] || r.Source != "src" || r.Status != runclaim.StatusFailed || r.Error != fmt.Sprintf("failure %d", len(ids)-1-i) {
				t.Errorf("limit %d: run %d is %+v, want ID %d, failed with failure %d", limit, i, r, ids[i], len(ids)-1-i)
			}
		}
		hist, err := store.History(ctx, "src", limit)
		if err != nil || len(hist) != len(got) {
			t.Fatalf("History(limit %d) = %d runs, %v; HistoryFunc gave %d", limit, len(hist), err, len(got))
		}
		for i := range hist {
			if hist[i] != got[i] {
				t.Errorf("limit %d, run %d: History %+v, HistoryFunc %+v", limit, i, hist[i], got[i])
			}
		}
	}

	t.Run("fn's error", func(t *testing.T) {
		stop := errors.New("stop here")
		calls := 0
		err := store.HistoryFunc(ctx, "src", 100, func(runclaim.RunRecord) error {
			calls++
			if calls == 2 {
				return stop
			}
			return nil
		})
		if err != stop || calls != 2 {
			t.Errorf("HistoryFunc = %v after %d calls, want exactly the function's error after 2", err, calls)
		}
		// The connection went back to the pool in a usable state.
		if got := collect(100); len(got) != len(ids) {
			t.Errorf("after a stop: %d runs, want %d", len(got), len(ids))
		}
	})

	t.Run("bad input", func(t *testing.T) {
		noop := func(runclaim.RunRecord) error { t.Error("fn called"); return nil }
		var nilCtx context.Context
		for name, call := range map[string]func() error{
			"nil ctx":        func() error { return store.HistoryFunc(nilCtx, "src", 1, noop) },
			"empty source":   func() error { return store.HistoryFunc(ctx, "", 1, noop) },
			"invisible":      func() error { return store.HistoryFunc(ctx, "s\u200brc", 1, noop) },
			"zero limit":     func() error { return store.HistoryFunc(ctx, "src", 0, noop) },
			"negative limit": func() error { return store.HistoryFunc(ctx, "src", -1, noop) },
			"nil fn":         func() error { return store.HistoryFunc(ctx, "src", 1, nil) },
			"cancelled ctx": func() error {
				c, cancel := context.WithCancel(ctx)
				cancel()
				return store.HistoryFunc(c, "src", 1, noop)
			},
			"invalid UTF-8":   func() error { return store.HistoryFunc(ctx, "\xff", 1, noop) },
			"control":         func() error { return store.HistoryFunc(ctx, "a\x1bb", 1, noop) },
			"History, a zero": func() error { _, err := store.History(ctx, "src", 0); return err },
		} {
			if err := call(); err == nil {
				t.Errorf("%s: no error", name)
			}
		}
	})
}

package runclaim_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// FuzzPostgresClaim: against a real database (one per fuzzing process,
// created before the first input), a source is either refused with
// ErrInvalidSource and the table unchanged, or claimed and stored verbatim:
// the row's source, as bytes, is the input; History and Running find the
// run under exactly that source; a job error whose text is the source is
// stored verbatim too.
func FuzzPostgresClaim(f *testing.F) {
	addSourceSeeds(f)
	db := pgtest.New(f)
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		f.Fatal(err)
	}
	if err := store.Migrate(context.Background()); err != nil {
		f.Fatal(err)
	}
	c, err := runclaim.New(store, runclaim.WithOwner("fuzz"))
	if err != nil {
		f.Fatal(err)
	}
	table := store.Table()
	count := func(t *testing.T) (n int64) {
		t.Helper()
		if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	f.Fuzz(func(t *testing.T, source string) {
		ctx := context.Background()
		before := count(t)
		run, err := c.Claim(ctx, source)
		if !sourceOK(source) {
			checkRefusal(t, "Claim", source, err)
			if _, err := store.History(ctx, source, 1); !errors.Is(err, runclaim.ErrInvalidSource) {
				t.Fatalf("History(%q) = %v, want ErrInvalidSource", source, err)
			}
			if after := count(t); after != before {
				t.Fatalf("a refused source changed the row count from %d to %d", before, after)
			}
			return
		}
		if err != nil {
			t.Fatalf("Claim(%q): %v", source, err)
		}
		var stored []byte
		if err := db.Pool.QueryRow(ctx, "SELECT convert_to(source, 'UTF8') FROM "+table+" WHERE id = $1", run.ID).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(stored, []byte(source)) {
			t.Fatalf("stored source %q (%d bytes), want %q (%d bytes)", stored, len(stored), source, len(source))
		}
		running, _, err := store.Running(ctx, source)
		if err != nil || len(running) != 1 || running[0].ID != run.ID || running[0].Source != source {
			t.Fatalf("Running(%q) = %+v, %v; want run %d", source, running, err, run.ID)
		}
		if err := run.Finish(ctx, errors.New(source)); err != nil {
			t.Fatalf("Finish: %v", err)
		}
		hist, err := store.History(ctx, source, 2)
		if err != nil || len(hist) == 0 || hist[0].ID != run.ID {
			t.Fatalf("History(%q) = %+v, %v; want run %d first", source, hist, err, run.ID)
		}
		for _, h := range hist {
			if h.Source != source {
				t.Fatalf("History(%q) returned a run of %q", source, h.Source)
			}
		}
		if hist[0].Error != source || hist[0].Status != runclaim.StatusFailed {
			t.Fatalf("recorded outcome %s %q, want failed %q", hist[0].Status, hist[0].Error, source)
		}
		if after := count(t); after != before+1 {
			t.Fatalf("row count went from %d to %d, want one more", before, after)
		}
	})
}

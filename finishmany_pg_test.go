package runclaim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/runclaim/runclaim"
)

// TestDoManyFinishesTogether: the runs of a DoMany that end together have
// their outcomes recorded in a few round trips, not one each: the
// finishes that come while one is being sent go together in the next
// (FinishMany, one batch and one transaction). Every outcome is recorded.
// Before, 1,000 runs took 1,000 finish statements, and at 100,000 sources
// a replica's finishes outran FinishTimeout and were lost.
func TestDoManyFinishesTogether(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	pool, rec := recordingPool(t, db)
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.ProveExclusion(ctx); err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, store)
	sources := make([]string, runclaim.MaxClaimMany)
	for i := range sources {
		sources[i] = fmt.Sprintf("together/%04d", i)
	}
	rec.take()
	if err := c.DoMany(ctx, sources, func(context.Context, *runclaim.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	batches, queries := rec.take()
	isFinish := func(sql string) bool { return strings.Contains(sql, "finished_at = c.now") }
	trips, finishes := 0, 0
	for _, q := range queries {
		if isFinish(q) {
			trips++
			finishes++
		}
	}
	for _, b := range batches {
		n := 0
		for _, q := range b {
			if isFinish(q) {
				n++
			}
		}
		if n > 0 {
			trips++
			finishes += n
		}
	}
	if finishes != len(sources) {
		t.Errorf("%d finish statements for %d runs, want one each", finishes, len(sources))
	}
	if trips > len(sources)/10 {
		t.Errorf("the %d runs' outcomes took %d round trips, want at most %d: the finishes that wait were not sent together", len(sources), trips, len(sources)/10)
	}
	var succeeded int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+store.Table()+" WHERE source LIKE 'together/%' AND status = 'succeeded'").Scan(&succeeded); err != nil {
		t.Fatal(err)
	}
	if succeeded != len(sources) {
		t.Errorf("%d runs recorded succeeded, want %d", succeeded, len(sources))
	}
	t.Logf("%d finishes in %d round trips", finishes, trips)
}

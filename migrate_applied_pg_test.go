package runclaim_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestMigrateApplied: MigrateApplied reports the steps it applied: every
// step on a fresh database, none on a current one.
func TestMigrateApplied(t *testing.T) {
	db := pgtest.New(t)
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	applied, err := store.MigrateApplied(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var all []int
	for v := 1; v <= runclaim.LatestSchemaVersion; v++ {
		all = append(all, v)
	}
	if !slices.Equal(applied, all) {
		t.Errorf("first MigrateApplied applied %v, want %v", applied, all)
	}
	if applied, err := store.MigrateApplied(t.Context()); err != nil || len(applied) != 0 {
		t.Errorf("MigrateApplied on a current table: %v, %v; want none applied", applied, err)
	}
}

// TestMigrateAppliedConcurrent: of several MigrateApplied at once on a
// fresh table, each step is reported by exactly one: the one that applied
// it, not the ones that found it applied meanwhile.
func TestMigrateAppliedConcurrent(t *testing.T) {
	const rounds, migrators = 3, 4
	for range rounds {
		db := pgtest.New(t)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			mu      sync.Mutex
			applied []int
		)
		for range migrators {
			store, err := runclaim.NewPostgresStore(db.NewPool(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				<-start
				steps, err := store.MigrateApplied(t.Context())
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				applied = append(applied, steps...)
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		slices.Sort(applied)
		var all []int
		for v := 1; v <= runclaim.LatestSchemaVersion; v++ {
			all = append(all, v)
		}
		if !slices.Equal(applied, all) {
			t.Fatalf("the concurrent MigrateApplied reported the steps %v between them, want each of %v once", applied, all)
		}
	}
}

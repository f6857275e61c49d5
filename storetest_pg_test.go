package runclaim_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/storetest"
)

// TestPostgresStoreConformance runs the Store conformance suite against the
// Postgres store. Every subtest gets a fresh, empty backend: a runs table of
// its own in one shared database (creating a database per subtest would
// only add its cost). Each replica the suite opens on it is a store over a
// connection pool of its own, as a replica of a service has.
//
// It runs beside the package's other parallel tests (its subtests, one
// after another): its backends are tables of its own.
func TestPostgresStoreConformance(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var tables atomic.Int64
	storetest.RunReplicas(t, func(t *testing.T) func() runclaim.Store {
		table := fmt.Sprintf("runs_%d", tables.Add(1))
		return func() runclaim.Store {
			// Enough connections that the contention subtests' claimants
			// contend in the database, not for the pool.
			pool := db.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
			store, err := runclaim.NewPostgresStore(pool, runclaim.WithTable(runclaim.DefaultSchema, table))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if err := store.Migrate(ctx); err != nil { // idempotent: a no-op after the first replica's
				t.Fatal(err)
			}
			return store
		}
	})
}

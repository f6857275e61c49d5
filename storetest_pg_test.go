package runclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/storetest"
)

// TestPostgresStoreConformance runs the Store conformance suite against the
// Postgres store. The subtests share one database, as replicas do, each
// with a store of its own over the same table (the suite gives every
// subtest its own sources); a database per subtest would only add the cost
// of creating it.
func TestPostgresStoreConformance(t *testing.T) {
	db := pgtest.New(t)
	// Enough connections that the contention subtest's 16 workers contend
	// in the database, not for the pool.
	pool := db.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 24 })
	storetest.Run(t, func(t *testing.T) runclaim.Store {
		store, err := runclaim.NewPostgresStore(pool)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if err := store.Migrate(ctx); err != nil { // idempotent: a no-op after the first
			t.Fatal(err)
		}
		return store
	})
}

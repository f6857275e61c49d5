package runclaim_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/storetest"
)

// TestPostgresStoreConformance runs the Store conformance suite against the
// Postgres store. Every subtest gets a fresh, empty backend: a database of
// its own, a copy of one migrated once (copying it costs the server less
// than migrating a table). Each replica the suite opens on it is a store
// over a connection pool of its own, as a replica of a service has.
//
// It runs beside the package's other parallel tests (its subtests, one
// after another): its backends are databases of its own.
func TestPostgresStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.RunReplicas(t, func(t *testing.T) func() runclaim.Store {
		db := migratedDB(t)
		return func() runclaim.Store {
			// Enough connections that the contention subtests' claimants
			// contend in the database, not for the pool.
			return storeOn(t, db.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 }))
		}
	})
}

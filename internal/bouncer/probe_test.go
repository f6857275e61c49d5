package bouncer_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/bouncer"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestProbeThroughBouncer: through PgBouncer in transaction mode the
// store's probe holds session A in a transaction (one server connection)
// while session B's statements go to others: it proves that the advisory
// locks exclude, in both query modes.
func TestProbeThroughBouncer(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(strings.ReplaceAll(mode.String(), " ", "_"), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			store := e.store(t, e.pool(t, mode, 4, nil))
			if ok, err := store.ProveExclusion(t.Context()); !ok || err != nil {
				t.Fatalf("ProveExclusion through PgBouncer = %v, %v; want true", ok, err)
			}
		})
	}
}

// TestProbeBouncerPoolOfOne: a PgBouncer pool of one server connection
// gives session B none while A holds it: the probe cannot tell, within
// its wait, and claims go on.
func TestProbeBouncerPoolOfOne(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	b := bouncer.StartPool(t, pgtest.SharedServer(t).AdminDSN, 1)
	cfg, err := pgxpool.ParseConfig(b.DSN(db.Name))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.ProveExclusion(ctx); ok || err != nil {
		t.Fatalf("ProveExclusion through a PgBouncer pool of one = %v, %v; want false, nil (cannot tell)", ok, err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate through a PgBouncer pool of one: %v", err)
	}
	c, err := runclaim.New(store)
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Claim(ctx, "one")
	if err != nil {
		t.Fatalf("claim through a PgBouncer pool of one: %v", err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

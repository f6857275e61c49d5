package runclaim_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/fanout"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// TestProveExclusion: on PostgreSQL the probe proves that the advisory
// locks exclude, and Migrate and a claim go on.
func TestProveExclusion(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	if ok, err := store.ProveExclusion(ctx); !ok || err != nil {
		t.Fatalf("ProveExclusion = %v, %v; want true", ok, err)
	}
	run, err := newClaimer(t, store).Claim(ctx, "proven")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if n := advisoryLocks(t, db.Pool); n != 0 {
		t.Errorf("%d advisory locks still held after the probe", n)
	}
}

// TestProbeCannotTell: with a pool of one connection the probe cannot
// hold two sessions: it answers "cannot tell", the store logs that once,
// and claims go on.
func TestProbeCannotTell(t *testing.T) {
	var logs bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	ctx := t.Context()
	db := migratedDB(t)
	pool := db.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	store, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.ProveExclusion(ctx); ok || err != nil {
		t.Fatalf("ProveExclusion with a pool of one = %v, %v; want false, nil (cannot tell)", ok, err)
	}
	fresh, err := runclaim.NewPostgresStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, fresh)
	for _, src := range []string{"a", "b"} {
		run, err := c.Claim(ctx, src)
		if err != nil {
			t.Fatalf("claim %s on a pool of one: %v", src, err)
		}
		if err := run.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "cannot tell whether the database's advisory locks exclude"); n != 1 {
		t.Errorf("the store logged %d lines that it cannot tell, want 1:\n%s", n, logs.String())
	}
}

// TestProbeRefusesFanOut: through a proxy that sends each connection to
// another database of the server, as a sharding proxy sends them to
// other shards, advisory locks do not exclude. Without the probe, two
// replicas both win one source; with it, Migrate, Claim and ClaimMany are
// refused with ErrNoLockExclusion, naming the engine, and write nothing.
func TestProbeRefusesFanOut(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	shards := []*pgtest.DB{pgtest.New(t), pgtest.New(t)}
	var names []string
	for _, db := range shards {
		migratedStore(t, db.Pool)
		names = append(names, db.Name)
	}
	cfg := shards[0].Pool.Config().ConnConfig
	proxy, err := fanout.Start(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), names...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	through := func() *pgxpool.Pool {
		return shards[0].NewPool(t, func(c *pgxpool.Config) {
			c.ConnConfig.Host, c.ConnConfig.Port, c.ConnConfig.Fallbacks = "127.0.0.1", uint16(proxy.Addr().Port), nil
			c.MaxConns = 4
		})
	}

	// Without the probe: each replica's first connection lands on another
	// database, and both win "sweep".
	var won []string
	for _, owner := range []string{"replica-a", "replica-b"} {
		store, err := runclaim.NewPostgresStore(through())
		if err != nil {
			t.Fatal(err)
		}
		runclaim.SkipExclusionProbe(store)
		run, err := newClaimer(t, store, runclaim.WithOwner(owner)).Claim(ctx, "sweep")
		if err == nil {
			won = append(won, run.Owner)
		} else if !errors.Is(err, runclaim.ErrNotClaimed) {
			t.Fatal(err)
		}
	}
	if len(won) != 2 {
		t.Fatalf("without the probe, %v won through the fan-out proxy; want both replicas (a double run), or the proxy does not fan out", won)
	}

	// With it: refused, naming the engine, before anything is written.
	store, err := runclaim.NewPostgresStore(through())
	if err != nil {
		t.Fatal(err)
	}
	err = store.Migrate(ctx)
	if !errors.Is(err, runclaim.ErrNoLockExclusion) || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Fatalf("Migrate through the fan-out proxy: %v; want ErrNoLockExclusion naming the engine", err)
	}
	c := newClaimer(t, store)
	if _, err := c.Claim(ctx, "guarded"); !errors.Is(err, runclaim.ErrNoLockExclusion) {
		t.Errorf("Claim through the fan-out proxy: %v; want ErrNoLockExclusion", err)
	}
	if _, err := c.ClaimMany(ctx, []string{"guarded-1", "guarded-2"}); !errors.Is(err, runclaim.ErrNoLockExclusion) {
		t.Errorf("ClaimMany through the fan-out proxy: %v; want ErrNoLockExclusion", err)
	}
	if ok, err := store.ProveExclusion(ctx); ok || !errors.Is(err, runclaim.ErrNoLockExclusion) {
		t.Errorf("ProveExclusion through the fan-out proxy = %v, %v; want false, ErrNoLockExclusion", ok, err)
	}
	for _, db := range shards {
		var n int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM runclaim_runs WHERE source LIKE 'guarded%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("database %s has %d runs of the refused claims", db.Name, n)
		}
	}
}

// TestProbeBadInput: a nil or ended context is refused before any SQL.
func TestProbeBadInput(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store := storeOn(t, db.Pool)
	//lint:ignore SA1012 a nil context is the bad input tested
	if _, err := store.ProveExclusion(nil); err == nil { //nolint:staticcheck
		t.Error("ProveExclusion(nil): no error")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := store.ProveExclusion(ctx); err == nil {
		t.Error("ProveExclusion with an ended context: no error")
	}
}

// TestProbeRefusesNoAdvisoryLocks: an engine that has no advisory-lock
// functions at all (Aurora DSQL, Spanner's PostgreSQL interface) is
// refused, with what it answered, not retried as a passing fault. The
// stand-in: a pool whose transactions answer the probe's statement as
// such an engine does, undefined_function.
func TestProbeRefusesNoAdvisoryLocks(t *testing.T) {
	t.Parallel()
	db := migratedDB(t)
	store, err := runclaim.NewPostgresStore(noLocksPool{db.Pool})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := store.ProveExclusion(t.Context())
	if ok || !errors.Is(err, runclaim.ErrNoLockExclusion) || !strings.Contains(err.Error(), "42883") {
		t.Fatalf("ProveExclusion on an engine without advisory locks = %v, %v; want ErrNoLockExclusion with its SQLSTATE", ok, err)
	}
	if _, err := newClaimer(t, store).Claim(t.Context(), "x"); !errors.Is(err, runclaim.ErrNoLockExclusion) {
		t.Errorf("Claim: %v, want ErrNoLockExclusion", err)
	}
}

// noLocksPool is a pool whose transactions have no advisory-lock
// functions.
type noLocksPool struct{ *pgxpool.Pool }

func (p noLocksPool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := p.Pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return noLocksTx{tx}, nil
}

type noLocksTx struct{ pgx.Tx }

func (tx noLocksTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, "advisory") {
		return errRow{&pgconn.PgError{Code: "42883", Message: "function pg_try_advisory_xact_lock(bigint) does not exist"}}
	}
	return tx.Tx.QueryRow(ctx, sql, args...)
}

package runclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The exclusion probe: a claim relies on pg_advisory_xact_lock excluding
// every other session of the database. Some engines that speak the
// Postgres protocol break that silently (a stub that returns at once, a
// setting that makes the calls no-ops, a proxy that sends sessions to
// different shards). A store proves it once, at Migrate and at its first
// claim, and refuses to claim on a database that fails.

// probeAttempts is how many times session B tries the lock session A
// holds, each in a transaction of its own, so that a pooler or a proxy
// that routes per transaction sends it to as many server sessions as it
// would.
const probeAttempts = 3

// probeWait bounds the wait for session B's connection. A pool of one, or
// a PgBouncer pool of one server connection, gives none while A holds
// its own: the probe cannot tell, and claims go on.
const probeWait = 2 * time.Second

// probeTimeout bounds a store's first probe, which the store's other
// first claims wait for.
const probeTimeout = 4*probeWait + 5*time.Second

// probeBeginSQL begins session A's transaction and, in the same round
// trip, lifts the timeouts that would end A's session while B tries: a
// DBA's idle-in-transaction or transaction timeout, however short
// (transaction_timeout exists from PostgreSQL 17 on).
const probeBeginSQL = `BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT pg_catalog.set_config(s.name, '0', true) FROM pg_catalog.pg_settings AS s
WHERE s.name OPERATOR(pg_catalog.=) ANY ('{idle_in_transaction_session_timeout,transaction_timeout}'::pg_catalog.text[])`

// probeVerdict is what a probe found.
type probeVerdict int

const (
	probeUnknown    probeVerdict = iota // not probed yet, or the probe failed (a network error): probed again
	probeProven                         // the locks exclude
	probeCannotTell                     // fewer than two sessions could be had
	probeRefused                        // the locks do not exclude: every claim is refused
)

// probeState is a store's probe: run once, by the first claim or Migrate
// that needs it, while the others wait.
type probeState struct {
	mu      sync.Mutex
	verdict probeVerdict
	err     error // the refusal
	skip    bool  // tests only: no probe (what a store without one would do)
}

// beginner is what the probe needs of the pool beyond Querier: a
// transaction that holds its session, as *pgxpool.Pool gives.
type beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// ProveExclusion checks, on two sessions of the database, that its
// advisory locks exclude each other, which every claim relies on:
// session A takes pg_try_advisory_xact_lock of a random key in a
// transaction; session B, in probeAttempts statements of its own, each
// its own transaction, must fail to take it while A holds it, and must
// take it once A has committed.
//
// It returns true when the locks exclude. It returns false and a nil
// error when it cannot tell: the pool gives no second session within
// probeWait (a pool of one, a PgBouncer pool of one server connection),
// or the Querier is not a pool that can begin a transaction. It returns
// an error matching ErrNoLockExclusion, naming the engine (version()),
// when the locks do not exclude: a store that finds that refuses every
// claim from then on. Other errors (a network error, ctx's end) say
// nothing of the engine.
//
// Migrate and a store's first claim call it, once per store; it runs
// again each time it is called. `runclaim migrate --status` shows its
// answer.
func (s *PostgresStore) ProveExclusion(ctx context.Context) (bool, error) {
	if err := checkContext(ctx); err != nil {
		return false, err
	}
	verdict, err := s.probe(ctx)
	s.probed.mu.Lock()
	if verdict != probeUnknown {
		s.probed.verdict, s.probed.err = verdict, err
	}
	s.probed.mu.Unlock()
	return verdict == probeProven, err
}

// exclusive returns nil once the database's advisory locks are proven to
// exclude, or could not be tested; the refusal if they do not exclude; or
// the error of a probe that failed, which the next call runs again. The
// first call probes (see ProveExclusion) and logs a probe that cannot
// tell, once; the others wait for it, then cost a mutex.
func (s *PostgresStore) exclusive(ctx context.Context) error {
	p := &s.probed
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.skip {
		return nil
	}
	switch p.verdict {
	case probeProven, probeCannotTell:
		return nil
	case probeRefused:
		return p.err
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	verdict, err := s.probe(pctx)
	switch verdict {
	case probeUnknown:
		return fmt.Errorf("the advisory-lock probe: %w", err)
	case probeCannotTell:
		slog.Default().Warn("runclaim: cannot tell whether the database's advisory locks exclude across sessions: the pool gave no second session; claims go on without the proof (see docs/engines.md)",
			"table", s.Table())
	}
	p.verdict, p.err = verdict, err
	return err
}

// probe runs the probe once.
func (s *PostgresStore) probe(ctx context.Context) (probeVerdict, error) {
	b, ok := s.db.(beginner)
	if !ok {
		return probeCannotTell, nil
	}
	if p, ok := s.db.(interface{ Config() *pgxpool.Config }); ok && p.Config().MaxConns < 2 {
		return probeCannotTell, nil
	}
	key := rand.Int64()
	a, err := b.BeginTx(ctx, pgx.TxOptions{BeginQuery: probeBeginSQL})
	if err != nil {
		return probeUnknown, err
	}
	defer a.Rollback(context.WithoutCancel(ctx))
	var version string
	var took bool
	if err := a.QueryRow(ctx, "SELECT pg_catalog.pg_try_advisory_xact_lock($1), pg_catalog.version()", key).Scan(&took, &version); err != nil {
		// An engine without advisory locks (Aurora DSQL, Spanner's
		// PostgreSQL interface): undefined_function or
		// feature_not_supported.
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "0A000") {
			return probeRefused, fmt.Errorf("%w: the engine has no pg_try_advisory_xact_lock (SQLSTATE %s: %s); runclaim cannot keep a source to one run there (see docs/engines.md)",
				ErrNoLockExclusion, pgErr.Code, pgErr.Message)
		}
		return probeUnknown, err
	}
	refuse := func(what string) (probeVerdict, error) {
		return probeRefused, fmt.Errorf("%w: %s, on %s; runclaim cannot keep a source to one run there (see docs/engines.md)", ErrNoLockExclusion, what, version)
	}
	if !took {
		return refuse("session A could not take pg_try_advisory_xact_lock of a random key that no one holds")
	}
	// try is one attempt of B: one statement, in a transaction of its own
	// (a pooler in transaction mode may give each a server session of its
	// own), on another session than A's, which A holds. cannotTell when no
	// second session came within probeWait.
	try := func() (took, cannotTell bool, err error) {
		wctx, cancel := context.WithTimeout(ctx, probeWait)
		defer cancel()
		err = s.db.QueryRow(wctx, "SELECT pg_catalog.pg_try_advisory_xact_lock($1)", key).Scan(&took)
		if err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
			return false, true, nil
		}
		return took, false, err
	}
	for i := range probeAttempts {
		took, cannotTell, err := try()
		switch {
		case cannotTell:
			return probeCannotTell, nil
		case err != nil:
			return probeUnknown, err
		case took:
			return refuse(fmt.Sprintf("session B took pg_try_advisory_xact_lock of a key that session A held (attempt %d of %d)", i+1, probeAttempts))
		}
	}
	if err := a.Commit(ctx); err != nil {
		return probeUnknown, err
	}
	took, cannotTell, err := try()
	switch {
	case cannotTell:
		return probeCannotTell, nil
	case err != nil:
		return probeUnknown, err
	case !took:
		return refuse("session B could not take pg_try_advisory_xact_lock of a key once session A had committed")
	}
	return probeProven, nil
}

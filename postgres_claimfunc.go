package runclaim

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Schema version 3 adds the claim as one PL/pgSQL function in the runs
// table's schema (sql/003_claim_function.up.sql), named after the table
// with claimFuncSuffix: a claim is then one statement, SELECT * FROM the
// function, instead of the three of the batch of version 2 (kept, as a
// reference for the benchmarks, in testdata/claim_batch.sql). Later
// versions gave it overloads with more arguments (ticks, keys, states);
// the store calls the one of version 9 (lock.go), whose body version 10
// replaced. Every overload does what the batch did, in the same order and
// with the same answers:
//
//   - Under an isolation level other than READ COMMITTED it takes no lock,
//     reads and writes nothing, and reports the level: the store then sends
//     the call inside BEGIN ISOLATION LEVEL READ COMMITTED ... COMMIT, as
//     it does the batch.
//   - It bounds the transaction's lock_timeout as the batch's lock
//     statement does, then tries the advisory lock.
//   - One query reads the source's running run: a busy lock or a live
//     holder returns here. (From schema version 6, sql/006_lost_path.up.sql,
//     that query runs first, after lock_timeout is set and before the
//     advisory lock: a pause or a live holder returns at once, without
//     the lock, an answer true as of the query's snapshot; otherwise the
//     function takes the lock and reads again, so that a claim wins only
//     on what it read under the lock.) Only then does a second one read the next start
//     the minimum interval allows: a claim too soon returns there. Neither
//     has written anything.
//   - A lapsed run is marked expired (FOR UPDATE SKIP LOCKED, as the batch
//     does: a row that another transaction holds is left alone, and the
//     claim reports its holder instead of waiting), then the run is
//     inserted.
//
// The function is VOLATILE, so under READ COMMITTED each statement in it
// takes a fresh snapshot, after the lock: the read sees every run committed
// before the lock was taken, as the batch's later statements do. It is
// SECURITY INVOKER, so it runs with the caller's privileges on the table
// and grants nothing of its own, and every object it names is
// schema-qualified (from schema version 6 every function, operator and
// type too, so that it needs no SET search_path, whose save and restore
// cost each call; before, its search_path was pinned). PL/pgSQL keeps the plans of its
// statements for the session, as pgx keeps the batch's prepared
// statements. Each step is as cheap as it can be for the claims that stop
// there, since a lost claim is what every replica but one pays on every
// tick: assignments are PL/pgSQL's simple expressions, which skip the
// executor, and each query reads only what the decision after it needs.
//
// Its results: locked, whether it took the advisory lock; isolation, the
// transaction's isolation level when it refused to claim under it (else
// NULL); db_now, the database clock when it decided; won, whether it
// inserted a run; run_*, the run it inserted (without the owner, which is
// the caller's), or else the source's running run, if any; retry_after,
// the earliest start the minimum interval allows, when it read it. Since
// version 7, a win that used up a trigger returns run_owner
// usedTriggerMark and retry_after the trigger's time instead; a win
// without one returns both NULL.
//
// The function's name is the table's with claimFuncSuffix, which fits in
// Postgres's 63-byte identifiers for every table name WithTable accepts
// (see maxTableLen). Later schema versions must keep it, with this
// signature and these results, while a release that calls it may run.

// claimFuncSuffix makes the claim function's name from the table's.
const claimFuncSuffix = "_claim"

// The claim function of the current schema version: the one body of
// sql/claim.sql, which Migrate creates after the steps (the step of
// claimBodyVersion holds it; see renderStep), under a name that carries
// that version, so that a new body never replaces the one the replicas
// of the release before call. A store calls it on a table at the
// current version, and the overload of version 9 (stateFuncArgs) on one
// at the version before.
const (
	claimBodyVersion = 11
	claimBodySuffix  = "_claim11" // claimFuncSuffix and claimBodyVersion; no longer than runningSuffix (see maxTableLen)
	claimBodyArgs    = "(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[])"
)

// claimBody returns the quoted, schema-qualified name of the claim function
// of the current schema version.
func (s *PostgresStore) claimBody() string {
	return pgx.Identifier{s.schema, s.table + claimBodySuffix}.Sanitize()
}

// claimFuncArgs are the claim function's argument types: the advisory key,
// the source, the owner, the lease and the minimum interval in
// microseconds, and the lock timeout in milliseconds.
const claimFuncArgs = "(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint)"

// funcClaim is a call of the claim function's row, and the decision made
// of it.
type funcClaim struct {
	claimDecision
	isolationText        pgtype.Text
	won                  bool
	runID                pgtype.Int8
	runOwner             pgtype.Text
	runStarted, runLease pgtype.Timestamptz
	tick                 pgtype.Timestamptz // the tick sent
	limitedKey           pgtype.Text        // the key that had no room (version 8)
}

// settle turns the function's row into the claim's decision.
func (r *funcClaim) settle() {
	// The function names the level only when it refuses to claim under it,
	// and returns one run: the one it inserted, or the source's running one.
	r.isolation = "read committed"
	if r.isolationText.Valid {
		r.isolation = r.isolationText.String
	}
	switch {
	case r.limitedKey.Valid:
		// A key with no room (version 8): its name, the cooldown's note.
		r.limited, r.key, r.note = true, r.limitedKey.String, r.runOwner.String
	case r.won:
		r.insID, r.insStarted, r.insLease = r.runID, r.runStarted, r.runLease
		if r.runOwner.Valid && r.runOwner.String == usedTriggerMark {
			r.usedTrigger = r.retryAfter
		}
	case !r.locked && !r.runID.Valid && r.runOwner.Valid:
		// A pause (version 5; see postgres_control.go): its note and end.
		r.paused, r.note = true, r.runOwner.String
	default:
		r.curID, r.curOwner, r.curStarted, r.curLease = r.runID, r.runOwner, r.runStarted, r.runLease
	}
}

// usedTriggerMark is what the claim function of version 7 returns as
// run_owner for a win that used up a trigger; retry_after is then the
// trigger's time. Before version 7, run_owner is NULL on a win.
const usedTriggerMark = "trigger"

// claimFunc returns the quoted, schema-qualified name of the claim
// function.
func (s *PostgresStore) claimFunc() string {
	return pgx.Identifier{s.schema, s.table + claimFuncSuffix}.Sanitize()
}

// missingFunc reports whether err says the store's claim function is
// missing: 42883 undefined_function naming it when the call is parsed, or,
// for a call planned just before a concurrent DROP FUNCTION committed (a
// step's Down under load), XX000 "cache lookup failed for function". Any
// other 42883 (an operator or function the call's body uses, say) is an
// error of its own, not an older table.
func (s *PostgresStore) missingFunc(err error) bool {
	// The statements of the version before name the function of a key's
	// newest number too, which version 10 added (see call_state).
	return missingFuncNamed(err, s.table+claimFuncSuffix) || missingFuncNamed(err, s.table+topSuffix)
}

// missingFuncNamed reports whether err says that the function name (the
// table's name with a suffix) is missing, in either form a missing
// function gives: 42883, or XX000 for one dropped after the statement
// was planned.
func missingFuncNamed(err error, name string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42883": // undefined_function
		return strings.HasPrefix(pgErr.Message, "function ") &&
			(strings.Contains(pgErr.Message, name) || strings.Contains(pgErr.Message, pgx.Identifier{name}.Sanitize()))
	case "XX000": // internal_error
		return strings.HasPrefix(pgErr.Message, "cache lookup failed for function")
	}
	return false
}

// missingStates reports whether err says the table of states is missing
// (42P01): a call of the overload of version 9 under way when the step's
// Down dropped the table. The call wrote nothing.
func (s *PostgresStore) missingStates(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01" && strings.Contains(pgErr.Message, s.table+statesSuffix)
}

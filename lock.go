package runclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AdvisoryKey returns the 64-bit key of the transaction-scoped advisory
// lock that serialises the claims of source in s's namespace (see
// WithNamespace): FNV-64a over the namespace, a NUL byte and source. The
// derivation is fixed across releases so that replicas on different
// versions agree; an operator can find a claim in flight, or a session
// that holds the lock, in pg_locks by it (docs/security.md).
func (s *PostgresStore) AdvisoryKey(source string) int64 {
	return advisoryKey(s.namespace, source)
}

// advisoryKey is AdvisoryKey in namespace.
func advisoryKey(namespace, source string) int64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(namespace); i++ {
		h ^= uint64(namespace[i])
		h *= prime64
	}
	h *= prime64 // the NUL separator: h ^= 0 is a no-op
	for i := 0; i < len(source); i++ {
		h ^= uint64(source[i])
		h *= prime64
	}
	return int64(h)
}

// The claim's locking protocol. A claim takes the transaction-scoped
// advisory lock of its source's key, only under READ COMMITTED (under
// another isolation level the snapshot of the read would predate the
// lock, so the claim refuses and the store re-sends it inside BEGIN
// ISOLATION LEVEL READ COMMITTED ... COMMIT), bounds its wait for a lock on
// the runs table, reads the source under the lock, frees it of a lapsed run
// only when it will go on to insert, and inserts the run; or it says why
// not. It is one call of the claim function, whose body, sql/claim.sql,
// states the decision in order; its row scans into a small struct and
// turns into one claimDecision, which outcome reads. A lost claim updates
// and inserts nothing, so it assigns no transaction ID and its commit
// flushes no WAL.

// errNeedExplicit says the session's isolation level is not READ COMMITTED,
// so the claim wrote nothing and must be sent in the explicit form.
var errNeedExplicit = errors.New("runclaim: session isolation is not read committed")

// inClaimForm sends a claim (one source's, or a ClaimMany call's) in the
// store's form, and once more in the explicit form if the session's
// isolation needed it, which the store then keeps to.
func inClaimForm[R, T any](s *PostgresStore, send func(explicit bool) (R, T, error)) (R, T, error) {
	r, t, err := send(s.useExplicit())
	if err == errNeedExplicit {
		s.explicit.Store(true)
		r, t, err = send(true)
	}
	return r, t, err
}

// The explicit form's transaction control, around the claim's statements
// and the other one-row statements (see queryRow).
const (
	beginSQL  = `BEGIN ISOLATION LEVEL READ COMMITTED`
	commitSQL = `COMMIT`
)

// claimDecision is what a claim returned, in the terms outcome decides
// on. The nullable columns scan into pgtype values rather
// than pointers, which spares pgx an allocation per column for the scan
// plan and another per non-NULL value.
type claimDecision struct {
	locked    bool   // the claim took the advisory lock
	isolation string // the transaction's isolation level

	now                  pgtype.Timestamptz // the database clock when the claim decided
	insID                pgtype.Int8        // the run inserted, if any
	insStarted, insLease pgtype.Timestamptz
	curID                pgtype.Int8 // the source's running run, if any
	curOwner             pgtype.Text
	curStarted, curLease pgtype.Timestamptz
	retryAfter           pgtype.Timestamptz // the next start the minimum interval allows, when read
	doneTick             pgtype.Timestamptz // the latest tick served, when read (version 4)
	paused               bool               // the source is paused: retryAfter is its end (version 5)
	note                 string             // the pause's note
	usedTrigger          pgtype.Timestamptz // a win's trigger, used up by it: its time (version 7)
	limited              bool               // a key had no room: retryAfter is when it has, note a cooldown's (version 8)
	key                  string             // the key
}

// The store speaks two schema versions: the current one,
// LatestSchemaVersion, and the one before it, which a rolling deploy
// needs (new replicas run Migrate at start; the old ones keep their own
// functions). A claim is one call of the claim function: on the current
// version the one body of sql/claim.sql (claimBody), which decides every
// claim (plain, for a tick, naming keys, returning the state); on the
// version before, that version's function (claimPrev), which takes the
// same arguments and returns the same row. On an older table the call fails, having written nothing, and
// the claim returns tooOldError, which names Migrate: there is no other
// form to fall back to. See schemaCache for how a store tells the two.

// errReplaceOld stops a claim with Replace on a table at the version
// before the current one, whose function takes no token: it has sent
// nothing.
var errReplaceOld = errors.New("runclaim: Replace needs the current schema version")

// Claim implements Store. It sends the whole claim as one statement, a
// call of the claim function: one round trip once pgx has prepared it on
// the connection.
func (s *PostgresStore) Claim(ctx context.Context, req ClaimRequest) (RunInfo, error) {
	if err := checkRequest(ctx, req); err != nil {
		return RunInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return RunInfo{}, fmt.Errorf("runclaim: claim %s: %w", quoteForError(req.Source), err)
	}
	if err := s.exclusive(ctx); err != nil {
		return RunInfo{}, fmt.Errorf("runclaim: claim %s: %w", quoteForError(req.Source), err)
	}
	// Once sent, a claim commits at the server whether or not its answer is
	// read. Were it abandoned when ctx ends, a run won that way would hold
	// the source for a whole lease with nobody to run it. So the claim runs
	// on a context that ctx's end does not cancel until claimGrace later,
	// and a run won after ctx ended is deleted again: the claim then returns
	// ctx's error and, as any failed claim, leaves no row (G8).
	cctx, release := graceContext(ctx)
	defer release()

	info, trigger, err := inClaimForm(s, func(explicit bool) (RunInfo, time.Time, error) {
		return s.claim(cctx, req, explicit)
	})
	ctxErr := ctx.Err()
	if ctxErr == nil {
		return info, err
	}
	what := "claim " + quoteForError(req.Source)
	switch {
	case err == nil:
		// The run goes, and the trigger it used up, if any, comes back.
		sql, args := s.sql.unclaim, []any{info.ID, info.StartedAt, info.Source}
		if !trigger.IsZero() {
			sql, args = s.sql.unclaimTrigger, []any{info.ID, info.StartedAt, trigger, info.Source}
		}
		var gone int64
		if derr := s.queryRow(cctx, sql, args, &gone); derr != nil && !errors.Is(derr, pgx.ErrNoRows) {
			return RunInfo{}, fmt.Errorf("runclaim: %s: %w; and run %d, won meanwhile, could not be deleted: %w", what, ctxErr, info.ID, derr)
		}
		if derr := s.unclaimStarts(cctx, []ClaimRequest{req}, []RunInfo{info}); derr != nil {
			return RunInfo{}, fmt.Errorf("runclaim: %s: %w; and the starts of run %d, won meanwhile, could not be deleted: %w", what, ctxErr, info.ID, derr)
		}
		return RunInfo{}, fmt.Errorf("runclaim: %s: %w", what, ctxErr)
	case errors.Is(err, ctxErr):
		return info, err
	default:
		return RunInfo{}, fmt.Errorf("runclaim: %s: %w (%w)", what, ctxErr, err)
	}
}

// graceContext returns the context a claim runs on: ctx, not cancelled
// by ctx's end until claimGrace later (see Claim). release frees it.
func graceContext(ctx context.Context) (cctx context.Context, release func()) {
	if ctx.Done() == nil { // a context that cannot end
		return ctx, func() {}
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(claimGrace, cancel) })
	return cctx, func() {
		stop()
		cancel()
	}
}

// claimGrace is how long a claim already under way may go on after its
// context ends, to learn whether it won (see Claim).
const claimGrace = 5 * time.Second

// claim runs the claim protocol once, in the implicit form or, with
// explicit, inside BEGIN ISOLATION LEVEL READ COMMITTED ... COMMIT, as one
// call of the claim function.
//
// A win also returns the time of the trigger it used up, zero if none, so
// that a caller that gives the run up can give the trigger back.
func (s *PostgresStore) claim(ctx context.Context, req ClaimRequest, explicit bool) (RunInfo, time.Time, error) {
	r := &stateClaim{}
	r.tick = pgtype.Timestamptz{Time: req.Tick, Valid: !req.Tick.IsZero()}
	r.args = [9]any{advisoryKey(s.namespace, req.Source), req.Source, req.Owner,
		req.Lease.Microseconds(), req.MinInterval.Microseconds(), claimLockTimeout.Milliseconds(), &r.tick, nil, nil}
	if len(req.Keys) > 0 {
		r.args[7], r.args[8] = req.Keys, s.keyLocks(nil, req.Keys)
	}
	r.dest = [12]any{&r.locked, &r.isolationText, &r.now, &r.won, &r.runID, &r.runOwner, &r.runStarted, &r.runLease, &r.retryAfter, &r.doneTick, &r.limitedKey, &r.state}
	call := func(prev bool) error {
		sql, args := s.sql.call, r.args[:]
		if prev {
			sql = s.sql.callPrev
		}
		if req.Replace != "" {
			if prev {
				return errReplaceOld
			}
			// The token: the function of schema version 13's last argument.
			sql, args = s.sql.callReplace, append(args, req.Replace)
		}
		var err error
		if !explicit {
			err = s.db.QueryRow(ctx, sql, args...).Scan(r.dest[:]...)
		} else {
			err = s.explicitQueryRow(ctx, sql, args, r.dest[:]...)
		}
		r.settle()
		return err
	}
	err := s.sendClaim(ctx, call)
	switch {
	case err == nil:
	case errors.Is(err, errReplaceOld):
		return RunInfo{}, time.Time{}, fmt.Errorf("runclaim: claim %s with Replace: the runs table %s is at schema version %d, and Replace needs %d: run Migrate (or `runclaim migrate`)",
			quoteForError(req.Source), s.Table(), oldestClaimVersion, LatestSchemaVersion)
	case s.missingFunc(err) || s.missingStates(err):
		return RunInfo{}, time.Time{}, s.tooOldError(ctx, "claim "+quoteForError(req.Source), err)
	default:
		return RunInfo{}, time.Time{}, s.claimError(ctx, req, err)
	}
	info, trigger, err := r.result(req, explicit)
	if err == nil && r.state != nil {
		info.State, info.HasState = string(r.state), true
	}
	return info, trigger, err
}

// sendClaim sends a claim, or a ClaimMany, with call: in the form of the
// current version, or, with prev, of the version before (see
// schemaCache). A call that finds its function missing has written
// nothing. When the form of the current version does, the store reads the
// table's version: older than the version before, the claim is refused
// (a table that old may still hold that version's functions, with older
// bodies); otherwise the claim goes again in the form of the version
// before, whose functions a table at the current version keeps too, so
// that this is right even while a step is undone and applied again under
// the store; and later claims go in that form until schemaRecheck has
// passed.
// When the form of the version before finds its function missing, the
// store reads the table's version, and sends the claim in the current
// form if the table is current. It returns the error of the last call.
func (s *PostgresStore) sendClaim(ctx context.Context, call func(prev bool) error) error {
	prev := s.schemaVer.previous()
	err := call(prev)
	switch {
	case err == nil:
		if !prev && s.schemaVer.version.Load() == oldestClaimVersion {
			s.schemaVer.set(LatestSchemaVersion) // migrated meanwhile
		}
		return nil
	case !(s.missingFunc(err) || s.missingStates(err)):
		return err
	case !prev:
		if st, serr := s.schemaState(ctx); serr == nil && st.version() < oldestClaimVersion {
			return err // older than both forms: the functions of the version before answer for theirs
		}
		if err = call(true); err == nil {
			s.schemaVer.set(oldestClaimVersion)
		}
		return err
	}
	if st, serr := s.schemaState(ctx); serr == nil && st.version() == LatestSchemaVersion {
		return call(false)
	}
	return err
}

// tooOldError explains a claim (what) that found the table without the
// claim function of oldestClaimVersion (err): it reads the table's version
// to say which it is. The claim wrote nothing.
func (s *PostgresStore) tooOldError(ctx context.Context, what string, err error) error {
	have := "older than " + strconv.Itoa(oldestClaimVersion)
	if st, serr := s.schemaState(ctx); serr == nil {
		if v := st.version(); v == 0 {
			have = "missing"
		} else {
			have = "at schema version " + strconv.Itoa(v)
		}
	}
	return fmt.Errorf("runclaim: %s: the runs table %s is %s, and this release claims on version %d, or %d while a rolling upgrade runs; "+
		"run Migrate (or `runclaim migrate`), or apply the steps of Migrations with your migration tool: %w",
		what, s.Table(), have, LatestSchemaVersion, oldestClaimVersion, err)
}

// claimError explains a claim that failed in the database.
func (s *PostgresStore) claimError(ctx context.Context, req ClaimRequest, err error) error {
	if len(req.Keys) > 0 && ctx.Err() == nil && s.keyLockBusy(err) {
		return keyBusy(req, err)
	}
	switch pgCode(err) {
	case "23505": // unique_violation: two running runs, or two runs of a tick
		return fmt.Errorf("runclaim: claim %s: a concurrent claim inserted a running run of it, or a run of the same tick, without waiting for this store's advisory lock; "+
			"every store on %s must use the same namespace (WithNamespace; this one uses %q), and nothing else may insert running runs: %w",
			quoteForError(req.Source), s.Table(), s.namespace, err)
	case "42501": // insufficient_privilege
		return fmt.Errorf("runclaim: claim %s: %w (%s; in all, the role needs EXECUTE on function %s%s (on a table at the version before, %s%s), SELECT, INSERT, UPDATE and DELETE on %s, SELECT and UPDATE (triggered_at) on %s, and, for keys and states, the grants docs/least-privilege.md lists)",
			quoteForError(req.Source), err, privilegeHint(err), s.claimBody(), claimBodyArgs, s.claimPrev(), claimBodyArgs, s.Table(), s.controlTable())
	}
	return s.wrap(ctx, "claim "+quoteForError(req.Source), err)
}

// result is outcome, and the time of the trigger a win used up.
func (r *claimDecision) result(req ClaimRequest, explicit bool) (RunInfo, time.Time, error) {
	info, err := r.outcome(req, explicit)
	if err != nil || !r.usedTrigger.Valid {
		return info, time.Time{}, err
	}
	return info, r.usedTrigger.Time, nil
}

// outcome turns what a claim returned into its answer, in the order of
// sql/claim.sql: a pause, a key with no room (decided after every other
// reason), a live holder, a tick served, too soon, a lapsed holder that
// could not be expired, then a claim in flight.
func (r *claimDecision) outcome(req ClaimRequest, explicit bool) (RunInfo, error) {
	if !r.locked && r.isolation != "read committed" {
		if explicit {
			return RunInfo{}, fmt.Errorf("runclaim: claim: transaction isolation is %q inside BEGIN ISOLATION LEVEL READ COMMITTED", r.isolation)
		}
		return RunInfo{}, errNeedExplicit
	}
	tick := normalTick(req.Tick)
	if r.paused {
		var end time.Time
		if r.retryAfter.Valid {
			end = r.retryAfter.Time
		}
		return RunInfo{}, &NotClaimedError{Source: req.Source, Reason: ErrPaused, RetryAfter: end, Note: r.note, Tick: tick}
	}
	if r.limited {
		return RunInfo{}, &NotClaimedError{Source: req.Source, Reason: ErrLimited, Key: r.key, RetryAfter: r.retryAfter.Time, Note: r.note, Tick: tick}
	}
	if r.insID.Valid {
		return RunInfo{ID: r.insID.Int64, Source: req.Source, Owner: req.Owner, StartedAt: r.insStarted.Time, LeaseUntil: r.insLease.Time, Tick: tick}, nil
	}
	nc := &NotClaimedError{Source: req.Source, Reason: ErrAlreadyRunning, Tick: tick}
	if !r.locked && r.retryAfter.Valid {
		// Reserved for a claim with Replace (version 13), until then.
		nc.RetryAfter = r.retryAfter.Time
	}
	tooSoon := r.locked && r.retryAfter.Valid && r.retryAfter.Time.After(r.now.Time)
	tickDone := r.locked && !tick.IsZero() && r.doneTick.Valid && !r.doneTick.Time.Before(tick)
	live := r.curID.Valid && r.curLease.Time.After(r.now.Time)
	switch {
	case tickDone && !live:
		nc.Reason, nc.DoneTick = ErrTickDone, r.doneTick.Time
	case r.curID.Valid && (live || !tooSoon):
		// A live holder; or a lapsed run that the claim did not expire: it
		// was locked by another transaction (a late finish, a release, a
		// fence), or the interval passed between two statements.
		nc.Holder = &RunInfo{ID: r.curID.Int64, Source: req.Source, Owner: r.curOwner.String, StartedAt: r.curStarted.Time, LeaseUntil: r.curLease.Time}
		nc.RetryAfter = r.curLease.Time
	case tooSoon:
		nc.Reason, nc.RetryAfter = ErrTooSoon, r.retryAfter.Time
	case r.locked:
		// Locked, nothing running, not too soon, yet no insert: cannot happen
		// unless the table was changed under us.
		return RunInfo{}, fmt.Errorf("runclaim: claim %s: the claim statement inserted nothing without a reason", quoteForError(req.Source))
	}
	return RunInfo{}, nc
}

// The claim function. Its name is the table's with claimFuncSuffix (and
// the version of its body, claimBodySuffix), which fits in Postgres's
// 63-byte identifiers for every table name WithTable accepts (see
// maxTableLen). It is VOLATILE, so under READ COMMITTED each statement in
// it takes a fresh snapshot, after the lock; SECURITY INVOKER, so it runs
// with the caller's privileges and grants nothing of its own; and every
// object it names is schema-qualified, so it needs no SET search_path.
// Its results: locked, whether it took the advisory lock; isolation, the
// transaction's isolation level when it refused to claim under it (else
// NULL); db_now, the database clock when it decided; won, whether it
// inserted a run; run_*, the run it inserted (without the owner, which is
// the caller's), or else the source's running run, if any; retry_after,
// the earliest start the minimum interval allows, when it read it. A win
// that used up a trigger returns run_owner usedTriggerMark and
// retry_after the trigger's time instead.

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

// stateClaim is what a call of the overload of version 9 sends and
// returns, in one allocation.
type stateClaim struct {
	funcClaim
	state []byte
	args  [9]any
	dest  [12]any
}

// ---------------------------------------------------------------------------
// The proof that the database's advisory locks exclude

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
	// settled is set once claims go on without asking again (proven, or
	// cannot tell; or, in tests, no probe at all): a claim then reads one
	// atomic, not the mutex.
	settled atomic.Bool
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
		s.probed.settle(verdict, err)
	}
	s.probed.mu.Unlock()
	return verdict == probeProven, err
}

// exclusive returns nil once the database's advisory locks are proven to
// exclude, or could not be tested; the refusal if they do not exclude; or
// the error of a probe that failed, which the next call runs again. The
// first call probes (see ProveExclusion) and logs a probe that cannot
// tell, once; the others wait for it, then cost an atomic read.
func (s *PostgresStore) exclusive(ctx context.Context) error {
	p := &s.probed
	if p.settled.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
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
	p.settle(verdict, err)
	return err
}

// settle records a probe's verdict; p.mu is held.
func (p *probeState) settle(verdict probeVerdict, err error) {
	p.verdict, p.err = verdict, err
	p.settled.Store(verdict == probeProven || verdict == probeCannotTell)
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
	// probeAttempts attempts while A holds the key, which must fail, then
	// one once A has committed, which must succeed.
	for i := range probeAttempts + 1 {
		committed := i == probeAttempts
		if committed {
			if err := a.Commit(ctx); err != nil {
				return probeUnknown, err
			}
		}
		took, cannotTell, err := try()
		switch {
		case cannotTell:
			return probeCannotTell, nil
		case err != nil:
			return probeUnknown, err
		case took && !committed:
			return refuse(fmt.Sprintf("session B took pg_try_advisory_xact_lock of a key that session A held (attempt %d of %d)", i+1, probeAttempts))
		case !took && committed:
			return refuse("session B could not take pg_try_advisory_xact_lock of a key once session A had committed")
		}
	}
	return probeProven, nil
}

package runclaim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// PostgresStore's ClaimMany calls the claim function (lock.go) once per
// source in one statement (sql/claim_many.sql): one
// round trip, one transaction, one commit, so one WAL flush for all the
// runs it wins and none when it wins nothing. Each call is the single
// claim's, with its guarantees: it checks the isolation level (under
// another level than READ COMMITTED every call refuses, and the store
// sends the statement again in the explicit form, as it does a claim);
// the first call bounds the transaction's lock_timeout before anything
// touches the table, and the others find it bounded; each tries its own
// source's advisory lock, which never waits, then re-reads the source in
// statements of its own, each with a snapshot taken after the lock. Two
// calls whose sources overlap, in any order, cannot deadlock: neither
// waits for a lock the other holds (a busy advisory lock is a skip, the
// lapsed run's expiry skips rows locked by others, and the runs they
// insert are of different sources, or serve different ticks). The locks
// won are held until the commit, so a claim of one of those sources
// meanwhile is skipped as "in flight".
//
// On a table without the claim function (schema version 2) each source
// is claimed with the batch, one at a time; a failure then deletes the
// runs won before it, so that the call still claims nothing when it fails.

// ClaimMany implements ManyStore in one statement.
func (s *PostgresStore) ClaimMany(ctx context.Context, reqs []ClaimRequest) ([]ClaimResult, error) {
	if err := cmp.Or(checkContext(ctx), validateClaims(reqs)); err != nil || len(reqs) == 0 {
		return nil, err
	}
	what := fmt.Sprintf("claim %d sources", len(reqs))
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("runclaim: %s: %w", what, err)
	}
	if err := s.exclusive(ctx); err != nil {
		return nil, fmt.Errorf("runclaim: %s: %w", what, err)
	}
	// As Claim does: a statement sent commits whether or not its answer is
	// read, so it runs on past ctx's end for claimGrace, and the runs won
	// after ctx ended are deleted again.
	cctx, release := graceContext(ctx)
	defer release()

	res, triggers, err := inClaimForm(s, func(explicit bool) ([]ClaimResult, []time.Time, error) {
		return s.claimMany(cctx, reqs, explicit)
	})
	ctxErr := ctx.Err()
	switch {
	case ctxErr == nil:
		return res, err
	case err == nil:
		if derr := s.unclaimMany(cctx, res, triggers); derr != nil {
			return nil, fmt.Errorf("runclaim: %s: %w; and the runs won meanwhile could not be deleted: %w", what, ctxErr, derr)
		}
		if derr := s.unclaimStarts(cctx, reqs, resultRuns(res)); derr != nil {
			return nil, fmt.Errorf("runclaim: %s: %w; and the starts of the runs won meanwhile could not be deleted: %w", what, ctxErr, derr)
		}
		return nil, fmt.Errorf("runclaim: %s: %w", what, ctxErr)
	case errors.Is(err, ctxErr):
		return nil, err
	default:
		return nil, fmt.Errorf("runclaim: %s: %w (%w)", what, ctxErr, err)
	}
}

// claimMany decides reqs once, in the implicit form or, with explicit,
// inside BEGIN ISOLATION LEVEL READ COMMITTED ... COMMIT: in one call of
// the claim function per request, in one statement. Beside the results it
// returns the time of the trigger each win used up (zero if none), for
// unclaimMany.
func (s *PostgresStore) claimMany(ctx context.Context, reqs []ClaimRequest, explicit bool) ([]ClaimResult, []time.Time, error) {
	keys := false
	for _, r := range reqs {
		keys = keys || len(r.Keys) > 0
	}
	var (
		res      []ClaimResult
		triggers []time.Time
	)
	err := s.sendClaim(ctx, func(prev bool) (err error) {
		res, triggers, err = s.callMany(ctx, reqs, explicit, prev)
		return err
	})
	switch {
	case err == nil || err == errNeedExplicit:
		return res, triggers, err
	case s.missingFunc(err) || s.missingStates(err):
		return nil, nil, s.tooOldError(ctx, fmt.Sprintf("claim %d sources", len(reqs)), err)
	case keys && ctx.Err() == nil && s.keyLockBusy(err):
		return s.keysBusy(ctx, reqs, explicit, err)
	}
	return nil, nil, s.claimManyError(ctx, reqs, err)
}

// keysBusy answers a ClaimMany whose wait for a key's lock ran out: the
// statement wrote nothing. Each source that names a key is skipped
// (keyBusy); the others, which need no key's lock, are claimed again in a
// statement of their own.
func (s *PostgresStore) keysBusy(ctx context.Context, reqs []ClaimRequest, explicit bool, busy error) ([]ClaimResult, []time.Time, error) {
	res, triggers := make([]ClaimResult, len(reqs)), make([]time.Time, len(reqs))
	var plain []ClaimRequest
	var at []int
	for i, r := range reqs {
		if len(r.Keys) > 0 {
			res[i].Err = keyBusy(r, busy)
		} else {
			plain, at = append(plain, r), append(at, i)
		}
	}
	if len(plain) == 0 {
		return res, triggers, nil
	}
	pres, ptriggers, err := s.claimMany(ctx, plain, explicit)
	if err != nil {
		return nil, nil, err
	}
	for j, i := range at {
		res[i], triggers[i] = pres[j], ptriggers[j]
	}
	return res, triggers, nil
}

// manyArgs are the arrays a ClaimMany statement sends.
type manyArgs struct {
	keys                    []int64
	sources, owners         []string
	leases, intervals       []int64
	ticks                   []pgtype.Timestamptz
	keyOffsets, keyCounts   []int32  // each request's keys in keyNames
	keyNames                []string // every request's keys, one after the other
	results                 []stateClaim
	ord                     int64
	lockTimeoutMilliseconds int64
}

// callMany sends reqs as one call of the claim function per request, in
// one statement: the overload with a tick, or, when any names a key, the
// overload with keys. It returns the
// decisions, or errNeedExplicit when the transaction's isolation level
// made every call refuse.
func (s *PostgresStore) callMany(ctx context.Context, reqs []ClaimRequest, explicit, prev bool) ([]ClaimResult, []time.Time, error) {
	n := len(reqs)
	a := manyArgs{
		keys: make([]int64, n), sources: make([]string, n), owners: make([]string, n),
		leases: make([]int64, n), intervals: make([]int64, n), results: make([]stateClaim, n),
		lockTimeoutMilliseconds: claimLockTimeout.Milliseconds(),
	}
	keyed := false
	for _, r := range reqs {
		keyed = keyed || len(r.Keys) > 0
	}
	a.ticks = make([]pgtype.Timestamptz, n)
	if keyed {
		a.keyOffsets, a.keyCounts = make([]int32, n), make([]int32, n)
	}
	for i, r := range reqs {
		if keyed {
			a.keyOffsets[i], a.keyCounts[i] = int32(len(a.keyNames)), int32(len(r.Keys))
			a.keyNames = append(a.keyNames, r.Keys...)
		}
		a.keys[i], a.sources[i], a.owners[i] = advisoryKey(s.namespace, r.Source), r.Source, r.Owner
		a.leases[i], a.intervals[i] = r.Lease.Microseconds(), r.MinInterval.Microseconds()
		a.ticks[i] = pgtype.Timestamptz{Time: r.Tick, Valid: !r.Tick.IsZero()}
	}
	sql, args := s.sql.callMany, []any{a.keys, a.sources, a.owners, a.leases, a.intervals, a.lockTimeoutMilliseconds, a.ticks}
	if prev {
		sql = s.sql.callManyPrev
	}
	if keyed {
		batchKeys, batchCounts := batchKeyCounts(reqs)
		single := make([]pgtype.Text, n) // each request's only key
		for i, r := range reqs {
			if len(r.Keys) == 1 {
				single[i] = pgtype.Text{String: r.Keys[0], Valid: true}
			}
		}
		sql, args = s.sql.callManyKeys, append(args, a.keyOffsets, a.keyCounts, a.keyNames, s.keyLocks(nil, a.keyNames), batchKeys, batchCounts, single)
		if prev {
			sql = s.sql.callManyKeysPrev
		}
	}
	rowsRead := 0
	read := func(rows pgx.Rows) error {
		for rows.Next() {
			if rowsRead == n {
				return fmt.Errorf("runclaim: claim %d sources: more rows than sources", n)
			}
			r := &a.results[rowsRead]
			if err := rows.Scan(&a.ord, &r.locked, &r.isolationText, &r.now, &r.won, &r.runID, &r.runOwner, &r.runStarted, &r.runLease, &r.retryAfter, &r.doneTick, &r.limitedKey, &r.state); err != nil {
				return err
			}
			if a.ord != int64(rowsRead+1) {
				return fmt.Errorf("runclaim: claim %d sources: row %d answers source %d", n, rowsRead+1, a.ord)
			}
			r.settle()
			rowsRead++
		}
		return rows.Err()
	}
	var err error
	if !explicit {
		var rows pgx.Rows
		rows, err = s.db.Query(ctx, sql, args...)
		if err == nil {
			err = read(rows)
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	} else {
		err = s.sendBatch(ctx, true, func(b *pgx.Batch) { b.Queue(sql, args...).Query(read) })
	}
	if err != nil {
		return nil, nil, err
	}
	if rowsRead != n {
		return nil, nil, fmt.Errorf("runclaim: claim %d sources: %d rows", n, rowsRead)
	}
	out, triggers := make([]ClaimResult, n), make([]time.Time, n)
	var failed error
	for i := range a.results {
		out[i].Run, triggers[i], out[i].Err = a.results[i].result(reqs[i], explicit)
		if out[i].Err == nil && a.results[i].state != nil {
			out[i].Run.State, out[i].Run.HasState = string(a.results[i].state), true
		}
		if failed == nil && out[i].Err != nil && !errors.Is(out[i].Err, ErrNotClaimed) {
			failed = out[i].Err
		}
	}
	if failed != nil {
		// The transaction has committed: undo what it won, in every row,
		// before and after the one that failed.
		if failed != errNeedExplicit {
			failed = fmt.Errorf("runclaim: claim %d sources: %w", n, failed)
		}
		if derr := s.unclaimMany(ctx, out, triggers); derr != nil {
			return nil, nil, fmt.Errorf("%w; and the runs it won could not be deleted: %w", failed, derr)
		}
		if derr := s.unclaimStarts(ctx, reqs, resultRuns(out)); derr != nil {
			return nil, nil, fmt.Errorf("%w; and the starts of the runs it won could not be deleted: %w", failed, derr)
		}
		return nil, nil, failed
	}
	return out, triggers, nil
}

// batchKeyCounts returns the keys reqs name, each once, in the order
// first named, and how many of reqs name each: what the first call of a
// ClaimMany with keys checks the room of.
func batchKeyCounts(reqs []ClaimRequest) ([]string, []int32) {
	var keys []string
	var counts []int32
	at := make(map[string]int)
	for _, r := range reqs {
		for i, k := range r.Keys {
			if slices.Contains(r.Keys[:i], k) {
				continue // a request's key counts once
			}
			j, ok := at[k]
			if !ok {
				j = len(keys)
				at[k] = j
				keys, counts = append(keys, k), append(counts, 0)
			}
			counts[j]++
		}
	}
	return keys, counts
}

// resultRuns returns the runs res won, pairwise; a zero RunInfo for a
// skip.
func resultRuns(res []ClaimResult) []RunInfo {
	out := make([]RunInfo, len(res))
	for i, r := range res {
		if r.Err == nil {
			out[i] = r.Run
		}
	}
	return out
}

// unclaimMany deletes the runs that res won, so that a ClaimMany that
// fails leaves no row, and gives back the triggers they used up (the
// times in triggers, pairwise with res; zero for none). It runs on ctx without its cancellation, bounded
// as Finish is.
func (s *PostgresStore) unclaimMany(ctx context.Context, res []ClaimResult, triggers []time.Time) error {
	var (
		ids         []int64
		starts      []time.Time
		sources     []string
		used        []pgtype.Timestamptz
		anyTriggers bool
	)
	for i, r := range res {
		if r.Err == nil && r.Run.ID > 0 {
			ids = append(ids, r.Run.ID)
			starts = append(starts, r.Run.StartedAt)
			sources = append(sources, r.Run.Source)
			used = append(used, pgtype.Timestamptz{Time: triggers[i], Valid: !triggers[i].IsZero()})
			anyTriggers = anyTriggers || !triggers[i].IsZero()
		}
	}
	if len(ids) == 0 {
		return nil
	}
	dctx, cancel := finishContext(ctx)
	defer cancel()
	if anyTriggers {
		// The runs go, and the triggers they used up come back.
		return s.batchReadCommitted(dctx, func(b *pgx.Batch) { b.Queue(s.sql.unclaimManyTrigger, ids, starts, used, sources) })
	}
	return s.batchReadCommitted(dctx, func(b *pgx.Batch) { b.Queue(s.sql.unclaimMany, ids, starts, sources) })
}

// claimManyError explains a ClaimMany that failed in the database, as
// claimError does a claim.
func (s *PostgresStore) claimManyError(ctx context.Context, reqs []ClaimRequest, err error) error {
	what := fmt.Sprintf("claim %d sources", len(reqs))
	switch pgCode(err) {
	case "23505": // unique_violation
		return fmt.Errorf("runclaim: %s: a concurrent claim inserted a running run of one of them, or a run of the same tick, without waiting for this store's advisory lock; "+
			"every store on %s must use the same namespace (WithNamespace; this one uses %q), and nothing else may insert running runs: %w",
			what, s.Table(), s.namespace, err)
	case "25006": // read_only_sql_transaction
		// The claim function says it in these words; a batch with keys,
		// whose statement also writes the starts, is refused by the
		// server before the function runs.
		if !strings.Contains(err.Error(), readOnlyClaim) {
			return fmt.Errorf("runclaim: %s: %s: %w", what, readOnlyClaim, err)
		}
	case "42501": // insufficient_privilege
		return fmt.Errorf("runclaim: %s: %w (the role needs EXECUTE on function %s as well as SELECT, INSERT and UPDATE on %s; see docs/least-privilege.md)",
			what, err, s.claimFunc(), s.Table())
	}
	return s.wrap(ctx, what, err)
}

// HeartbeatMany implements ManyStore in one statement.
func (s *PostgresStore) HeartbeatMany(ctx context.Context, reqs []HeartbeatRequest) ([]HeartbeatResult, error) {
	if err := cmp.Or(checkContext(ctx), validateHeartbeats(reqs)); err != nil || len(reqs) == 0 {
		return nil, err
	}
	what := fmt.Sprintf("heartbeat %d runs", len(reqs))
	// One lease for the statement: a Claimer's runs share it. Requests
	// with other leases go in statements of their own.
	byLease := map[time.Duration][]int{}
	for i, r := range reqs {
		byLease[r.Lease] = append(byLease[r.Lease], i)
	}
	out := make([]HeartbeatResult, len(reqs))
	for lease, idx := range byLease {
		ids, sources, starts := make([]int64, len(idx)), make([]string, len(idx)), make([]time.Time, len(idx))
		for j, i := range idx {
			ids[j], sources[j], starts[j] = reqs[i].ID, reqs[i].Source, reqs[i].StartedAt
		}
		// By ID, source and start: two requests may share an ID handed
		// out again after a failover, and only the one that names the
		// row's run was extended.
		extended := make(map[runRef]time.Time, len(idx))
		asked := make(map[runRef]bool)
		var (
			ref          runRef
			started, end pgtype.Timestamptz
			stop         bool
		)
		err := s.withStop(func(withStop bool) error {
			q := s.sql.heartbeatMany
			if withStop {
				q = s.sql.heartbeatManyStop
			}
			return s.batchReadCommitted(ctx, func(b *pgx.Batch) {
				b.Queue(q, ids, sources, lease.Microseconds(), starts).Query(func(rows pgx.Rows) error {
					dest := []any{&ref.id, &ref.source, &started, &end, &stop}
					if !withStop {
						dest = dest[:4]
					}
					for rows.Next() {
						stop = false
						if err := rows.Scan(dest...); err != nil {
							return err
						}
						ref.start = started.Time.UnixMicro()
						extended[ref] = end.Time
						asked[ref] = stop
					}
					return rows.Err()
				})
			})
		})
		if err != nil {
			return nil, s.wrap(ctx, what, err)
		}
		for _, i := range idx {
			if t, ok := extended[refOf(reqs[i])]; ok {
				out[i].LeaseUntil = t
				if asked[refOf(reqs[i])] {
					out[i].Err = fmt.Errorf("runclaim: heartbeat run %d: %w", reqs[i].ID, ErrReplaced)
				}
			} else {
				out[i].Err = fmt.Errorf("runclaim: heartbeat run %d: %w", reqs[i].ID, ErrLeaseLost)
			}
		}
	}
	return out, nil
}

// readOnlyClaim is what the claim function says on a server that cannot
// write, and what a batch the server refused for it says too.
const readOnlyClaim = "cannot claim on a server that cannot write (a standby, or default_transaction_read_only): its answer could come from stale data"

// FinishMany does what Finish does for each request, in one round trip and
// one transaction: the statements of Finish, one per request, inside BEGIN
// ISOLATION LEVEL READ COMMITTED ... COMMIT, sent as one batch. The errors
// are in the order of reqs, each nil or what Finish would have returned for
// that run alone. An error of the whole call (the batch failed, and rolled
// back) records no outcome: the caller finishes those runs one by one.
// It refuses more than MaxClaimMany requests, and an invalid one, before
// it sends anything.
//
// A Claimer uses it, when its store has it, for the finishes of its runs
// that come while another is being recorded (DoMany's, mostly): they go
// together in the next call.
func (s *PostgresStore) FinishMany(ctx context.Context, reqs []FinishRequest) ([]error, error) {
	if err := validateFinishes(ctx, reqs); err != nil {
		return nil, err
	}
	type row struct{ newStatus, oldStatus, oldError pgtype.Text }
	rows := make([]row, len(reqs))
	err := s.withStop(func(withStop bool) error {
		q := s.sql.finish
		if withStop {
			q = s.sql.finishStop
		}
		return s.sendBatch(ctx, true, func(b *pgx.Batch) {
			for i, req := range reqs {
				var errText *string
				if req.Status == StatusFailed {
					errText = &req.Error
				}
				b.Queue(q, req.ID, req.Source, string(req.Status), errText, req.StartedAt).QueryRow(func(r pgx.Row) error {
					return r.Scan(&rows[i].newStatus, &rows[i].oldStatus, &rows[i].oldError)
				})
			}
		})
	})
	if err != nil {
		return nil, s.wrap(ctx, fmt.Sprintf("finish %d runs", len(reqs)), err)
	}
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		r := rows[i]
		errs[i] = s.finishAnswer(ctx, req, "finish run "+strconv.FormatInt(req.ID, 10), r.newStatus, r.oldStatus, r.oldError)
	}
	return errs, nil
}

package runclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Schema version 8 (sql/008_keys.up.sql) adds keys: a keys column on the
// runs table (the keys each run's claim named) with two partial indexes of
// the running runs' keys, a btree of those naming one (keyedSuffix) and a
// GIN index of those naming more (keysetSuffix); a table of
// keys' limits and cooldowns (keysSuffix), one row per key; a table of
// keys' starts (startsSuffix), one row per key a run named; and an
// overload of the claim function with two more arguments, the keys and
// their advisory locks, and one more result, the key that had no room.
//
// A claim that names no key takes the path it took before keys, the same
// statement: keys cost nothing to claims that do not use them. A claim
// that names keys calls the overload, which, right after it bounds the
// transaction's lock_timeout, takes each key's transaction-scoped advisory
// lock (waiting, within that bound, for a claim that holds it), in
// ascending order, so that two claims never wait on each other. Then it
// decides as version 7 does and, after every other reason to skip, decides
// each key in the order named, in statements after the locks, so that it
// counts every run that the claims that held a key's lock before it
// committed: never more than the limit wins, and a claim that finds room
// wins. The locks are advisory, so a claim skipped for a key writes
// nothing (no row lock, no transaction ID, no WAL). A run started records
// its keys in its row and one start per key.

var _ Limiter = (*PostgresStore)(nil)

// KeyLocks returns the 64-bit keys of the transaction-scoped advisory
// locks that a claim naming key takes on s's table. table serialises the
// claims naming key on the table, whatever their namespace (G17: every
// store on the table shares the key's limit row, runs and starts):
// AdvisoryKey, in the namespace "runclaim.key", of the table's quoted,
// schema-qualified name and the key, NUL-separated. namespace is the lock
// by which the releases before this one serialised them, in s's namespace
// only: AdvisoryKey of the key behind a NUL byte, "key" and a NUL byte,
// which no source can spell; a claim takes it too, in ascending order
// with the other, for as long as replicas of such a release may run
// beside this one, so that old and new replicas of one namespace still
// exclude each other. Both derivations are fixed across releases.
func (s *PostgresStore) KeyLocks(key string) (table, namespace int64) {
	return tableKeyLock(s.Table(), key), keyLock(s.namespace, key)
}

// keyLock is the key's lock of namespace (see KeyLocks).
func keyLock(namespace, key string) int64 {
	return advisoryKey(namespace, "\x00key\x00"+key)
}

// tableKeyLock is the key's lock of the table (see KeyLocks).
func tableKeyLock(table, key string) int64 {
	return advisoryKey("runclaim.key", table+"\x00"+key)
}

// keyLocks returns the advisory locks of keys, ascending, once each: each
// key's lock of the table and, for replicas of the previous release, of
// the namespace (see KeyLock).
func (s *PostgresStore) keyLocks(locks []int64, keys []string) []int64 {
	table := s.Table()
	for _, k := range keys {
		locks = append(locks, keyLock(s.namespace, k))
		if !s.previousKeyLocks {
			locks = append(locks, tableKeyLock(table, k))
		}
	}
	slices.Sort(locks)
	return slices.Compact(locks)
}

// unclaimStarts deletes the starts that the runs of infos, won by claims
// of reqs (pairwise) given up, recorded for their keys.
func (s *PostgresStore) unclaimStarts(ctx context.Context, reqs []ClaimRequest, infos []RunInfo) error {
	var (
		keys   []string
		starts []time.Time
		ids    []int64
	)
	for i, info := range infos {
		if info.ID == 0 {
			continue
		}
		for _, k := range reqs[i].Keys {
			keys, starts, ids = append(keys, k), append(starts, info.StartedAt), append(ids, info.ID)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	// The keys' locks first, in the same transaction, as a claim takes
	// them: from schema version 10, deleting a start renumbers the key's
	// later ones.
	locks := s.keyLocks(nil, keys)
	return s.batchReadCommitted(ctx, func(b *pgx.Batch) {
		b.Queue(s.sql.lockKeys, locks)
		b.Queue(s.sql.unclaimStarts, keys, starts, ids)
	})
}

// SetLimit implements Limiter in one statement. It needs schema version 8
// and, for the role, INSERT and UPDATE on the keys table (see
// docs/least-privilege.md).
func (s *PostgresStore) SetLimit(ctx context.Context, key string, l Limit) error {
	if err := checkKeyCall(ctx, key); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	var at time.Time
	err := s.db.QueryRow(ctx, s.sql.setLimit, key, l.MaxRunning, l.MaxStarts, l.Per.Microseconds(), l.MinGap.Microseconds()).Scan(&at)
	return s.keyError(ctx, "set limit "+quoteForError(key), err)
}

// DeleteLimit implements Limiter in one statement.
func (s *PostgresStore) DeleteLimit(ctx context.Context, key string) error {
	if err := checkKeyCall(ctx, key); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, s.sql.deleteLimit, key)
	return s.keyError(ctx, "delete limit "+quoteForError(key), err)
}

// Cooldown implements Limiter in one statement. The end is checked
// against the database's clock: an until that is not after it is
// refused, and nothing changes.
func (s *PostgresStore) Cooldown(ctx context.Context, key string, until time.Time, note string) error {
	if err := checkCooldown(ctx, key, until, note); err != nil {
		return err
	}
	return s.cool(ctx, key, &until, 0, note)
}

// cooldownFor is Run.Cooldown's: a cooldown of d from the database clock.
func (s *PostgresStore) cooldownFor(ctx context.Context, key string, d time.Duration, note string) error {
	if err := checkCooldownFor(ctx, key, d, note); err != nil {
		return err
	}
	return s.cool(ctx, key, nil, d, note)
}

// cool sends the cooldown statement: until *until, or d from the
// database clock when until is nil.
func (s *PostgresStore) cool(ctx context.Context, key string, until *time.Time, d time.Duration, note string) error {
	var now, end time.Time
	err := s.db.QueryRow(ctx, s.sql.cooldown, key, until, note, d.Microseconds()).Scan(&now, &end)
	if err != nil {
		return s.keyError(ctx, "cooldown "+quoteForError(key), err)
	}
	if !end.After(now) {
		return pastCooldown(key, end, now)
	}
	return nil
}

// EndCooldown implements Limiter in one statement.
func (s *PostgresStore) EndCooldown(ctx context.Context, key string) error {
	if err := checkKeyCall(ctx, key); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, s.sql.endCooldown, key)
	return s.keyError(ctx, "end cooldown "+quoteForError(key), err)
}

// keyError wraps the error of a Limiter call, nil for nil, and says what
// a missing table or privilege means.
func (s *PostgresStore) keyError(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	switch pgCode(err) {
	case "42P01": // undefined_table
		return fmt.Errorf("runclaim: %s: the table %s is missing: the runs table %s is at a schema version older than %d, which keys need; run Migrate (or apply the Migrations): %w",
			what, s.keysTable(), s.Table(), keysVersion, err)
	case "42703": // undefined_column: min_gap_us, on a table of the version before
		return fmt.Errorf("runclaim: %s: the keys table %s lacks the column of Limit.MinGap: the runs table %s is at a schema version older than %d; run Migrate (or `runclaim migrate`, or apply the Migrations): %w",
			what, s.keysTable(), s.Table(), LatestSchemaVersion, err)
	case "42501": // insufficient_privilege
		return fmt.Errorf("runclaim: %s: %w (the role needs SELECT, INSERT and UPDATE on %s; see docs/least-privilege.md)", what, err, s.keysTable())
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("runclaim: %s: no answer", what)
	}
	return s.wrap(ctx, what, err)
}

// Keys returns every key that has a limit or a cooldown in force, by
// name, with its live runs and its starts in the window, and the database
// clock when it read them. When more than MaxKeyStates keys have one, it
// returns the first MaxKeyStates by name and the clock with an error
// matching ErrKeysTruncated; with any other error, it returns no keys. It
// needs schema version 8, and SELECT on the runs, keys and starts tables.
func (s *PostgresStore) Keys(ctx context.Context) ([]KeyState, time.Time, error) {
	if err := checkContext(ctx); err != nil {
		return nil, time.Time{}, err
	}
	rows, err := s.db.Query(ctx, s.sql.keysState, MaxKeyStates+1)
	if err != nil {
		return nil, time.Time{}, s.keyError(ctx, "keys", err)
	}
	defer rows.Close()
	var (
		out []KeyState
		now time.Time
	)
	for rows.Next() {
		var (
			k                    KeyState
			maxRunning, maxStart int32
			perUS, running, n    int64
			gapUS                int64
			until, last          pgtype.Timestamptz
		)
		if err := rows.Scan(&k.Key, &maxRunning, &maxStart, &perUS, &running, &n, &until, &k.Note, &now, &gapUS, &last); err != nil {
			return nil, time.Time{}, s.keyError(ctx, "keys", err)
		}
		k.Limit = Limit{MaxRunning: int(maxRunning), MaxStarts: int(maxStart), Per: time.Duration(perUS) * time.Microsecond, MinGap: time.Duration(gapUS) * time.Microsecond}
		if last.Valid {
			k.LastStart = last.Time
		}
		k.Running, k.Starts = int(running), int(n)
		if until.Valid {
			k.CoolingUntil = until.Time
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, s.keyError(ctx, "keys", err)
	}
	if len(out) > MaxKeyStates {
		return out[:MaxKeyStates], now, fmt.Errorf("runclaim: keys: %w (%d): the first %d by name are returned", ErrKeysTruncated, MaxKeyStates, MaxKeyStates)
	}
	if now.IsZero() {
		if err := s.db.QueryRow(ctx, s.sql.clock).Scan(&now); err != nil {
			return nil, time.Time{}, s.wrap(ctx, "keys", err)
		}
	}
	return out, now, nil
}

// keyLockBusy reports whether err is a claim's wait for a key's lock that
// ran out (55P03 lock_not_available): a claim of the key that held it
// longer than the claim's bound, or any session that holds it. The claim
// functions take the keys' locks in an assignment of their own, before
// they read anything; every wait for a table's lock is in an SQL
// statement, and stays an error (G9). The call wrote nothing.
func (s *PostgresStore) keyLockBusy(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		return false
	}
	name := s.table + claimFuncSuffix
	return strings.Contains(pgErr.Where, "at assignment") &&
		(strings.Contains(pgErr.Where, name) || strings.Contains(pgErr.Where, pgx.Identifier{name}.Sanitize()))
}

// keyBusy is the skip of a claim of req whose wait for a key's lock ran
// out (keyLockBusy): ErrLimited, naming the first key (the locks are taken
// in their own order, and the error does not say which one waited), with
// RetryAfter now, by this process's clock.
func keyBusy(req ClaimRequest, err error) *NotClaimedError {
	return &NotClaimedError{Source: req.Source, Reason: ErrLimited, Key: req.Keys[0], RetryAfter: time.Now(), Tick: req.Tick,
		Note: fmt.Sprintf("the lock of a key it names stayed busy for %v (%v)", claimLockTimeout, err)}
}

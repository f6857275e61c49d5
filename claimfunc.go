package runclaim

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Schema version 3 adds the claim as one PL/pgSQL function in the runs
// table's schema, named after the table with claimFuncSuffix: a claim is
// then one statement, SELECT * FROM the function, instead of the three of
// the batch (lock.go). The function does what the batch does, in the same
// order and with the same answers:
//
//   - Under an isolation level other than READ COMMITTED it takes no lock,
//     reads and writes nothing, and reports the level: the store then sends
//     the call inside BEGIN ISOLATION LEVEL READ COMMITTED ... COMMIT, as
//     it does the batch.
//   - It bounds the transaction's lock_timeout as lockSQL does, then tries
//     the advisory lock.
//   - One query reads the source's running run: a busy lock or a live
//     holder returns here. Only then does a second one read the next start
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
// and grants nothing of its own, and its search_path is pinned, with every
// object it names schema-qualified. PL/pgSQL keeps the plans of its
// statements for the session, as pgx keeps the batch's prepared
// statements.
//
// The function's name is the table's with claimFuncSuffix, which fits in
// Postgres's 63-byte identifiers for every table name WithTable accepts
// (see maxTableLen). Later schema versions must keep it, with this
// signature and these results, while a release that calls it may run.

// claimFuncSuffix makes the claim function's name from the table's.
const claimFuncSuffix = "_claim"

// claimFuncArgs are the claim function's argument types: the advisory key,
// the source, the owner, the lease and the minimum interval in
// microseconds, and the lock timeout in milliseconds.
const claimFuncArgs = "(bigint, text, text, bigint, bigint, bigint)"

// claimFuncDDL creates the function: %[1]s is its quoted name, %[2]s the
// dollar-quoted body. Its results: locked, whether it took the advisory
// lock; isolation, the transaction's isolation level when it refused to
// claim under it (else NULL); db_now, the database clock when it decided;
// won, whether it inserted a run; run_*, the run it inserted (without the
// owner, which is the caller's), or else the source's running run, if any;
// retry_after, the earliest start the
// minimum interval allows, when it read it.
const claimFuncDDL = `CREATE OR REPLACE FUNCTION %[1]s(
	p_key bigint, p_source text, p_owner text, p_lease bigint, p_min_interval bigint, p_lock_timeout bigint,
	OUT locked boolean, OUT isolation text, OUT db_now timestamptz, OUT won boolean,
	OUT run_id bigint, OUT run_owner text, OUT run_started timestamptz, OUT run_lease timestamptz,
	OUT retry_after timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS %[2]s;
`

// claimFuncBody is the function's body: %[1]s is the runs table. Each step
// is as cheap as it can be for the claims that stop there, since a lost
// claim is what every replica but one pays on every tick: assignments are
// PL/pgSQL's simple expressions, which skip the executor, and each query
// reads only what the decision after it needs.
const claimFuncBody = `
DECLARE
	ignored text;
BEGIN
	locked := false;
	won := false;
	IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
		isolation := pg_catalog.current_setting('transaction_isolation');
		RETURN;
	END IF;
	IF pg_catalog.current_setting('lock_timeout') = '0'
	   OR pg_catalog.current_setting('lock_timeout')::interval >= p_lock_timeout * interval '1 millisecond' THEN
		ignored := pg_catalog.set_config('lock_timeout', p_lock_timeout::text, true);
	END IF;
	locked := pg_catalog.pg_try_advisory_xact_lock(p_key);
	SELECT c.id, c.owner, c.started_at, c.lease_until INTO run_id, run_owner, run_started, run_lease
	  FROM %[1]s AS c WHERE c.source = p_source AND c.status = 'running';
	db_now := pg_catalog.clock_timestamp();
	IF NOT locked OR run_lease > db_now THEN
		RETURN;
	END IF;
	SELECT l.started_at + greatest(l.min_interval, p_min_interval * interval '1 microsecond') INTO retry_after
	  FROM %[1]s AS l WHERE l.source = p_source ORDER BY l.started_at DESC LIMIT 1;
	db_now := pg_catalog.clock_timestamp();
	IF retry_after > db_now THEN
		RETURN;
	END IF;
	IF run_id IS NOT NULL THEN
		UPDATE %[1]s AS e SET status = 'expired', finished_at = pg_catalog.clock_timestamp()
		WHERE e.id IN (
			SELECT x.id FROM %[1]s AS x
			WHERE x.source = p_source AND x.status = 'running' AND x.lease_until <= pg_catalog.clock_timestamp()
			FOR UPDATE SKIP LOCKED);
		IF NOT FOUND THEN
			SELECT c.id, c.owner, c.started_at, c.lease_until
			  INTO run_id, run_owner, run_started, run_lease
			  FROM %[1]s AS c WHERE c.source = p_source AND c.status = 'running';
			db_now := pg_catalog.clock_timestamp();
			IF run_id IS NOT NULL THEN
				RETURN;
			END IF;
		END IF;
	END IF;
	db_now := pg_catalog.clock_timestamp();
	INSERT INTO %[1]s AS i (source, status, owner, started_at, lease_until, heartbeat_at, min_interval)
	VALUES (p_source, 'running', p_owner, db_now, db_now + p_lease * interval '1 microsecond', db_now,
	        p_min_interval * interval '1 microsecond')
	RETURNING i.id, i.started_at, i.lease_until INTO run_id, run_started, run_lease;
	run_owner := NULL;
	won := true;
END
`

// claimCallSQL calls the function: %s is its quoted name.
const claimCallSQL = `SELECT * FROM %s($1::bigint, $2::text, $3::text, $4::bigint, $5::bigint, $6::bigint)`

// claimFunc returns the quoted, schema-qualified name of the claim
// function.
func (s *PostgresStore) claimFunc() string {
	return pgx.Identifier{s.schema, s.table + claimFuncSuffix}.Sanitize()
}

// claimFuncSQL is the DDL of the claim function.
func (s *PostgresStore) claimFuncSQL() string {
	return fmt.Sprintf(claimFuncDDL, s.claimFunc(), dollarQuote(fmt.Sprintf(claimFuncBody, s.Table())))
}

// The store learns the schema version it claims on without a round trip
// of its own: until it knows it, or while it knows a version without the
// function and the knowledge is older than schemaRecheck, a claim sent as
// a batch reads the version too, in the same batch. From version 3 on the
// store calls the function; when a call finds no function (42883
// undefined_function: a step undone, or a table replaced), the store
// forgets the version and sends that claim again as a batch. Migrate and
// SchemaVersion record what they find.
//
// schemaRecheck bounds how long a store that started on a table without
// the function goes on sending the batch after another replica's Migrate
// added it.
const schemaRecheck = 30 * time.Second

// claimFuncVersion is the first schema version with the claim function.
const claimFuncVersion = 3

// schemaCache is what a store knows of its table's schema version.
type schemaCache struct {
	base    time.Time     // monotonic origin of checked
	recheck time.Duration // schemaRecheck; tests change it
	version atomic.Int64  // 0: not known
	checked atomic.Int64  // when version was read, as nanoseconds since base
}

// useFunc reports whether claims should call the function.
func (c *schemaCache) useFunc() bool { return c.version.Load() >= claimFuncVersion }

// useTickFunc reports whether claims should call the function of ticks.
func (c *schemaCache) useTickFunc() bool { return c.version.Load() >= tickFuncVersion }

// stale reports whether a batch claim should read the version too.
func (c *schemaCache) stale() bool {
	v := c.version.Load()
	switch {
	case v >= claimFuncVersion:
		return false
	case v == 0:
		return true
	}
	return time.Duration(int64(time.Since(c.base))-c.checked.Load()) >= c.recheck
}

// set records version v as read now.
func (c *schemaCache) set(v int) {
	c.checked.Store(int64(time.Since(c.base)))
	c.version.Store(int64(v))
}

// forget makes the next claim read the version again.
func (c *schemaCache) forget() { c.version.Store(0) }

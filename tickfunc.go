package runclaim

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Schema version 4 adds ticks (ClaimTick):
//
//   - the tick column, the scheduled tick a run serves, NULL for a plain
//     claim and for the runs of releases before it, which do not name it;
//   - a unique index on (source, tick DESC) over the runs that serve their
//     tick (running, succeeded, failed): the claim finds the latest tick
//     served in one index probe, however long the history, and no two
//     such runs can share a tick, the database's own check of "one run
//     per tick" behind the advisory lock, as the running index is of G1;
//   - the claim function with a seventh argument, the tick, and a tenth
//     result, done_tick. It is an overload: the six-argument function of
//     version 3 stays, unchanged, for the replicas of the release before
//     during a rolling deploy.
//
// The function does what the six-argument one does, and, for a tick
// claim, between the running run's probe and the interval's: after a live
// holder or a busy lock has returned, it reads the latest tick served,
// leaving out the source's running run, which has lapsed by then and serves
// no tick; a tick at or before it returns there, with nothing written, so
// that a lost tick claim writes no WAL either. The insert records the
// tick.

// tickFuncVersion is the first schema version with ticks.
const tickFuncVersion = 4

// tickFuncArgs are the argument types of the version 4 claim function.
const tickFuncArgs = "(bigint, text, text, bigint, bigint, bigint, timestamptz)"

// tickFuncDDL creates the version 4 function: %[1]s is its quoted name,
// %[2]s the dollar-quoted body.
const tickFuncDDL = `CREATE OR REPLACE FUNCTION %[1]s(
	p_key bigint, p_source text, p_owner text, p_lease bigint, p_min_interval bigint, p_lock_timeout bigint,
	p_tick timestamptz,
	OUT locked boolean, OUT isolation text, OUT db_now timestamptz, OUT won boolean,
	OUT run_id bigint, OUT run_owner text, OUT run_started timestamptz, OUT run_lease timestamptz,
	OUT retry_after timestamptz, OUT done_tick timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS %[2]s;
`

// tickFuncBody is the version 4 function's body: %[1]s is the runs table.
const tickFuncBody = `
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
	IF p_tick IS NOT NULL THEN
		-- The latest tick served; the running run, lapsed by now, serves none.
		SELECT d.tick INTO done_tick
		  FROM %[1]s AS d
		 WHERE d.source = p_source AND d.tick IS NOT NULL AND d.status IN ('running', 'succeeded', 'failed')
		   AND d.id IS DISTINCT FROM run_id
		 ORDER BY d.tick DESC LIMIT 1;
		IF done_tick >= p_tick THEN
			RETURN;
		END IF;
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
	INSERT INTO %[1]s AS i (source, status, owner, started_at, lease_until, heartbeat_at, min_interval, tick)
	VALUES (p_source, 'running', p_owner, db_now, db_now + p_lease * interval '1 microsecond', db_now,
	        p_min_interval * interval '1 microsecond', p_tick)
	RETURNING i.id, i.started_at, i.lease_until INTO run_id, run_started, run_lease;
	run_owner := NULL;
	won := true;
END
`

// tickCallSQL calls the version 4 function: %s is its quoted name.
const tickCallSQL = `SELECT * FROM %s($1::bigint, $2::text, $3::text, $4::bigint, $5::bigint, $6::bigint, $7::timestamptz)`

// tickIndexSuffix makes the name of the index of ticks served from the
// table's.
const tickIndexSuffix = "_tick"

// tickIndex returns the quoted name of the index of ticks served.
func (s *PostgresStore) tickIndex() string {
	return pgx.Identifier{s.table + tickIndexSuffix}.Sanitize()
}

// tickStepSQL is the DDL of schema version 4, without its version comment.
func (s *PostgresStore) tickStepSQL() string {
	t := s.Table()
	return fmt.Sprintf("ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS tick timestamptz;\n"+
		"CREATE UNIQUE INDEX IF NOT EXISTS %[2]s ON %[1]s (source, tick DESC) WHERE tick IS NOT NULL AND status IN ('running', 'succeeded', 'failed');\n",
		t, s.tickIndex()) +
		fmt.Sprintf(tickFuncDDL, s.claimFunc(), dollarQuote(fmt.Sprintf(tickFuncBody, t)))
}

// tickStepDownSQL undoes schema version 4, without the version comment.
func (s *PostgresStore) tickStepDownSQL() string {
	return fmt.Sprintf("DROP FUNCTION IF EXISTS %s%s;\nDROP INDEX IF EXISTS %s;\nALTER TABLE %s DROP COLUMN IF EXISTS tick;\n",
		s.claimFunc(), tickFuncArgs, pgx.Identifier{s.schema, s.table + tickIndexSuffix}.Sanitize(), s.Table())
}

-- States: the claim that returns the state of a win, a run saves its
-- state, and an operator reads, sets or clears it (schema version 9; see
-- sql/009_states.up.sql).

-- name: save_state
-- Saves $5 as the state of source $2 for run $1, started at $4 by owner
-- $3, if it is running and its lease has not ended by the database clock:
-- the run and lease that Fence checks. The run row is locked FOR SHARE,
-- which a claim expiring it (FOR UPDATE SKIP LOCKED) skips, and which
-- waits for a finish or heartbeat in flight and reads the row as it left
-- it. No row: the run does not hold its lease.
WITH c AS MATERIALIZED (
	SELECT pg_catalog.clock_timestamp() AS now
), r AS (
	SELECT t.id, t.source FROM {{table}} AS t, c
	WHERE t.id OPERATOR(pg_catalog.=) $1 AND t.source OPERATOR(pg_catalog.=) $2 AND t.owner OPERATOR(pg_catalog.=) $3 AND t.started_at OPERATOR(pg_catalog.=) $4::pg_catalog.timestamptz
	  AND t.status OPERATOR(pg_catalog.=) 'running' AND t.lease_until OPERATOR(pg_catalog.>) c.now
	FOR SHARE OF t
)
INSERT INTO {{table_states}} AS s (source, state, run_id, saved_at)
SELECT r.source, $5::pg_catalog.bytea, r.id, c.now FROM r, c
ON CONFLICT (source) DO UPDATE SET state = excluded.state, run_id = excluded.run_id, saved_at = excluded.saved_at
RETURNING s.run_id

-- name: read_state
-- The state of source $1, when it was saved and by which run (NULL when
-- an operator set it); no row without one.
SELECT state, saved_at, run_id FROM {{table_states}} WHERE source OPERATOR(pg_catalog.=) $1

-- name: lock_source
-- Waits for the advisory lock $1 of a source, which every claim that may
-- start a run of it holds until it commits; the transaction's. Sent
-- before set_state and clear_state, in their transaction: their check of
-- the source's run, in a statement of its own, then sees the run of every
-- claim that won before, and a claim after them reads what they wrote.
SELECT pg_catalog.pg_advisory_xact_lock($1::bigint)

-- name: set_state
-- Sets the state of source $1 to $2, as an operator, unless $3 and a run
-- of the source is running with a live lease. The row is the state set;
-- no row: refused, the source is held. After lock_source.
WITH held AS MATERIALIZED (
	SELECT EXISTS (SELECT FROM {{table}} AS t WHERE t.source OPERATOR(pg_catalog.=) $1 AND t.status OPERATOR(pg_catalog.=) 'running' AND t.lease_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()) AS held
)
INSERT INTO {{table_states}} AS s (source, state, run_id, saved_at)
SELECT $1, $2::pg_catalog.bytea, NULL, pg_catalog.clock_timestamp() FROM held WHERE NOT ($3::boolean AND held.held)
ON CONFLICT (source) DO UPDATE SET state = excluded.state, run_id = excluded.run_id, saved_at = excluded.saved_at
RETURNING s.source

-- name: clear_state
-- Clears the state of source $1 (the next run gets none), unless $2 and a
-- run of the source is running with a live lease. The row: whether the
-- source was held, and whether a state was deleted. After lock_source.
WITH held AS MATERIALIZED (
	SELECT EXISTS (SELECT FROM {{table}} AS t WHERE t.source OPERATOR(pg_catalog.=) $1 AND t.status OPERATOR(pg_catalog.=) 'running' AND t.lease_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()) AS held
), d AS (
	DELETE FROM {{table_states}} AS s USING held WHERE s.source OPERATOR(pg_catalog.=) $1 AND NOT ($2::boolean AND held.held) RETURNING s.source
)
SELECT held.held, EXISTS (SELECT FROM d) FROM held

-- What a run's holder sends: heartbeats and the finish, each one
-- statement, and the delete of a run won after its claimer gave up.

-- name: heartbeat
-- Extends the lease of run $1 of source $2, started at $4, to $3
-- microseconds from now. It reads the clock once, so that lease_until -
-- heartbeat_at is exactly the lease. The start tells the run from another
-- that got its ID again after an asynchronous failover (G14).
UPDATE {{table}}
-- GREATEST: a heartbeat that read the clock before a later one but
-- waited for its row lock (say one whose caller gave up on it) must not
-- move the lease back.
SET lease_until = GREATEST(lease_until, c.now OPERATOR(pg_catalog.+) ($3::bigint OPERATOR(pg_catalog.*) interval '1 microsecond')),
	heartbeat_at = GREATEST(heartbeat_at, c.now)
FROM (SELECT pg_catalog.clock_timestamp() AS now) AS c
-- By ID and source, which the partial index on running runs answers in one
-- probe whatever the statistics say; and only a lease that has not ended:
-- a lapsed lease is lost (G2), whether or not a claim has expired the run
-- yet.
WHERE id OPERATOR(pg_catalog.=) $1 AND source OPERATOR(pg_catalog.=) $2 AND started_at OPERATOR(pg_catalog.=) $4::pg_catalog.timestamptz AND status OPERATOR(pg_catalog.=) 'running' AND lease_until OPERATOR(pg_catalog.>) c.now
RETURNING lease_until

-- name: finish
-- Records the outcome ($3, the status; $4, the error text) of running run
-- $1 of source $2, started at $5 (see heartbeat), or marks it expired if its lease has ended by the
-- database clock, and reports the row as it was before, so that a repeated
-- Finish can be told from a lost run in one statement.
WITH c AS MATERIALIZED (
	-- The row's two clock readings are one.
	SELECT pg_catalog.clock_timestamp() AS now
), byid AS MATERIALIZED (
	-- The old row by its ID alone, a primary-key probe whatever the
	-- statistics, then checked for the source: a planner that used the
	-- source's history index for "id = $1 AND source = $2" would read the
	-- source's whole history.
	SELECT status, error, source, started_at FROM {{table}} WHERE id OPERATOR(pg_catalog.=) $1
), old AS (
	SELECT status, error FROM byid WHERE source OPERATOR(pg_catalog.=) $2 AND started_at OPERATOR(pg_catalog.=) $5::pg_catalog.timestamptz
), upd AS (
	UPDATE {{table}} AS r SET
		status = CASE WHEN r.lease_until OPERATOR(pg_catalog.>) c.now THEN $3 ELSE 'expired' END,
		error = $4, finished_at = c.now
	FROM c
	WHERE r.id OPERATOR(pg_catalog.=) $1 AND r.source OPERATOR(pg_catalog.=) $2 AND r.started_at OPERATOR(pg_catalog.=) $5::pg_catalog.timestamptz AND r.status OPERATOR(pg_catalog.=) 'running'
	RETURNING r.status
)
SELECT (SELECT status FROM upd), old.status, old.error
FROM (SELECT) AS one LEFT JOIN old ON true

-- name: finish_stop
-- finish on a table at schema version 13 or later: a run asked to stop
-- (Replace) is recorded replaced, whatever its outcome; the claim that
-- asked reads its end from the row. Its row: as finish's.
WITH c AS MATERIALIZED (
	SELECT pg_catalog.clock_timestamp() AS now
), byid AS MATERIALIZED (
	SELECT status, error, source, started_at FROM {{table}} WHERE id OPERATOR(pg_catalog.=) $1
), old AS (
	SELECT status, error FROM byid WHERE source OPERATOR(pg_catalog.=) $2 AND started_at OPERATOR(pg_catalog.=) $5::pg_catalog.timestamptz
), upd AS (
	UPDATE {{table}} AS r SET
		status = CASE WHEN r.lease_until OPERATOR(pg_catalog.<=) c.now THEN 'expired'
		              WHEN r.stop_requested_at IS NOT NULL THEN 'replaced' ELSE $3 END,
		error = $4, finished_at = c.now
	FROM c
	WHERE r.id OPERATOR(pg_catalog.=) $1 AND r.source OPERATOR(pg_catalog.=) $2 AND r.started_at OPERATOR(pg_catalog.=) $5::pg_catalog.timestamptz AND r.status OPERATOR(pg_catalog.=) 'running'
	RETURNING r.status
)
SELECT (SELECT status FROM upd), old.status, old.error
FROM (SELECT) AS one LEFT JOIN old ON true

-- name: read_run
-- Run $1's status and error text, found by its ID alone (see finish) and
-- checked for its source, $2, and its start, $3: OFFSET 0 keeps the
-- planner from merging the two.
SELECT status, error FROM (SELECT status, error, source, started_at FROM {{table}} WHERE id OPERATOR(pg_catalog.=) $1 OFFSET 0) AS r
WHERE source OPERATOR(pg_catalog.=) $2 AND started_at OPERATOR(pg_catalog.=) $3::pg_catalog.timestamptz

-- name: unclaim
-- Deletes run $1, won by a claim whose caller gave up, so that a failed
-- claim leaves no row (G8). This is why the service role needs DELETE on
-- the runs table, besides Prune. $2 and $3 are its start and source (G14).
DELETE FROM {{table}} WHERE id OPERATOR(pg_catalog.=) $1 AND started_at OPERATOR(pg_catalog.=) $2::pg_catalog.timestamptz AND source OPERATOR(pg_catalog.=) $3 AND status OPERATOR(pg_catalog.=) 'running' RETURNING id

-- name: unclaim_run
-- Deletes running run $1 of source $2, started at $3, for Unclaim: a run
-- that a claim has just won and its caller takes back, so that it leaves
-- no row, serves no tick and counts for no minimum interval. By ID and
-- source, as heartbeat finds a run; another run, or one that is not
-- running, is not deleted, and no row comes back.
DELETE FROM {{table}} WHERE id OPERATOR(pg_catalog.=) $1 AND source OPERATOR(pg_catalog.=) $2 AND started_at OPERATOR(pg_catalog.=) $3::pg_catalog.timestamptz AND status OPERATOR(pg_catalog.=) 'running' RETURNING id

-- name: unclaim_run_keys
-- unclaim_run on a table with keys (schema version 8): the run's starts,
-- one per key its row names, go with it, so that a key's MaxStarts counts
-- the claim no more, as if it had never been made.
WITH gone AS (
	DELETE FROM {{table}} WHERE id OPERATOR(pg_catalog.=) $1 AND source OPERATOR(pg_catalog.=) $2 AND started_at OPERATOR(pg_catalog.=) $3::pg_catalog.timestamptz AND status OPERATOR(pg_catalog.=) 'running'
	RETURNING id, keys, started_at
), starts AS (
	DELETE FROM {{table_starts}} AS o USING gone
	WHERE o.key OPERATOR(pg_catalog.=) ANY (gone.keys) AND o.started_at OPERATOR(pg_catalog.=) gone.started_at AND o.run_id OPERATOR(pg_catalog.=) gone.id
)
SELECT id FROM gone

-- name: unclaim_trigger
-- unclaim for a run whose claim used up a trigger, made at $3, of the
-- source $4 (schema
-- version 7): it deletes the run and gives the trigger back to the
-- source, unless another is pending by now, in one transaction.
WITH gone AS (
	DELETE FROM {{table}} WHERE id OPERATOR(pg_catalog.=) $1 AND started_at OPERATOR(pg_catalog.=) $2::pg_catalog.timestamptz AND source OPERATOR(pg_catalog.=) $4 AND status OPERATOR(pg_catalog.=) 'running' RETURNING id, source
), back AS (
	UPDATE {{table_control}} AS k SET triggered_at = $3::pg_catalog.timestamptz
	FROM gone WHERE k.source OPERATOR(pg_catalog.=) gone.source AND k.triggered_at IS NULL
	RETURNING 1
)
SELECT id FROM gone

-- The operator commands' reads and writes (admin.go). Every run is read
-- as the same ten columns, in this order (see scanRecord); the tenth, the
-- tick, is NULL on a table before schema version 4, which has no tick
-- column, and each statement that reads runs has a twin, named with
-- "_tick", for a table that has it.

-- name: clock
SELECT pg_catalog.clock_timestamp()

-- name: running
-- The running runs, of every source or of source $1.
SELECT id, source, owner, started_at, lease_until, status, heartbeat_at, finished_at, coalesce(error, ''), NULL::pg_catalog.timestamptz FROM {{table}} WHERE status OPERATOR(pg_catalog.=) 'running' AND ($1 OPERATOR(pg_catalog.=) '' OR source OPERATOR(pg_catalog.=) $1) ORDER BY source

-- name: running_tick
SELECT id, source, owner, started_at, lease_until, status, heartbeat_at, finished_at, coalesce(error, ''), tick FROM {{table}} WHERE status OPERATOR(pg_catalog.=) 'running' AND ($1 OPERATOR(pg_catalog.=) '' OR source OPERATOR(pg_catalog.=) $1) ORDER BY source

-- name: history
-- Source $1's latest $2 runs, newest first.
SELECT id, source, owner, started_at, lease_until, status, heartbeat_at, finished_at, coalesce(error, ''), NULL::pg_catalog.timestamptz FROM {{table}} WHERE source OPERATOR(pg_catalog.=) $1 ORDER BY started_at DESC, id DESC LIMIT $2

-- name: history_tick
SELECT id, source, owner, started_at, lease_until, status, heartbeat_at, finished_at, coalesce(error, ''), tick FROM {{table}} WHERE source OPERATOR(pg_catalog.=) $1 ORDER BY started_at DESC, id DESC LIMIT $2

-- name: release_lock_timeout
-- Release's bound on the wait for the run's row, local to its transaction.
SELECT pg_catalog.set_config('lock_timeout', '{{release_lock_wait_ms}}', true)

-- name: release
-- Ends run $1 (or, with $1 = 0, source $2's running run) as released.
UPDATE {{table}} SET status = 'released', finished_at = pg_catalog.clock_timestamp(),
	error = 'released by an operator'
WHERE id OPERATOR(pg_catalog.=) ANY (
	SELECT id FROM {{table}} WHERE status OPERATOR(pg_catalog.=) 'running' AND (id OPERATOR(pg_catalog.=) $1 OR $1 OPERATOR(pg_catalog.=) 0 AND source OPERATOR(pg_catalog.=) $2)
	-- Locks the row before the update. The lock conflicts with a fenced
	-- transaction's key-share lock, so Release waits for it instead of
	-- freeing the source under it; and Postgres records a locked-then-
	-- updated row as an update of its key, so a fence that meets the
	-- release sees it (READ COMMITTED) or fails with a serialization error,
	-- rather than locking the row as it was before.
	FOR UPDATE)
RETURNING id, source, owner, started_at, lease_until, status, heartbeat_at, finished_at, coalesce(error, ''), NULL::pg_catalog.timestamptz

-- name: request_stop
-- Asks source $1's live running run to stop (schema version 13), as a
-- claim with Replace does but reserving the source for no one: the holder
-- learns at its next heartbeat and is recorded replaced when it finishes.
-- An earlier request stays as it was. Its row: the run, as release's.
UPDATE {{table}} AS r SET stop_requested_at = coalesce(r.stop_requested_at, c.now)
FROM (SELECT pg_catalog.clock_timestamp() AS now) AS c
WHERE r.source OPERATOR(pg_catalog.=) $1 AND r.status OPERATOR(pg_catalog.=) 'running' AND r.lease_until OPERATOR(pg_catalog.>) c.now
RETURNING r.id, r.source, r.owner, r.started_at, r.lease_until, r.status, r.heartbeat_at, r.finished_at, coalesce(r.error, ''), r.tick

-- name: release_tick
UPDATE {{table}} SET status = 'released', finished_at = pg_catalog.clock_timestamp(),
	error = 'released by an operator'
WHERE id OPERATOR(pg_catalog.=) ANY (
	SELECT id FROM {{table}} WHERE status OPERATOR(pg_catalog.=) 'running' AND (id OPERATOR(pg_catalog.=) $1 OR $1 OPERATOR(pg_catalog.=) 0 AND source OPERATOR(pg_catalog.=) $2)
	FOR UPDATE)
RETURNING id, source, owner, started_at, lease_until, status, heartbeat_at, finished_at, coalesce(error, ''), tick

-- name: prune
-- One batch of PruneRuns: of the next $3 runs by ID after $1, deletes the
-- finished ones that finished more than $2 microseconds ago and are not
-- among the $4 + 1 newest runs of their source. Returns how many it
-- deleted, how many it looked at, and the last ID it looked at. A batch
-- looks at $3 rows however many it deletes, so its cost does not grow
-- with the table.
WITH scope AS (
	SELECT id FROM {{table}} WHERE id OPERATOR(pg_catalog.>) $1 ORDER BY id LIMIT $3
), batch AS (
	SELECT id FROM {{table}} AS r
	-- An array, not IN (SELECT ...): the plan is a probe of the primary
	-- key per ID, never a hash join over the whole table.
	WHERE id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT id FROM scope)) AND status OPERATOR(pg_catalog.<>) 'running'
	  AND finished_at OPERATOR(pg_catalog.<) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) ($2::bigint OPERATOR(pg_catalog.*) interval '1 microsecond'))
	  -- Not among the newest $4 + 1 runs of its source: $4 + 1 runs of it
	  -- started later. The subquery stops there, so it reads at most
	  -- $4 + 1 entries of the history index. With $4 = 0, never the newest
	  -- run of a source, which the minimum interval is measured from.
	  AND EXISTS (SELECT FROM {{table}} AS newer WHERE newer.source OPERATOR(pg_catalog.=) r.source AND newer.started_at OPERATOR(pg_catalog.>) r.started_at OFFSET $4::int)
	-- Skips, without waiting, a row another transaction has locked (a run
	-- finished while a fenced transaction was open); a later prune deletes
	-- it.
	FOR UPDATE OF r SKIP LOCKED
), del AS (
	DELETE FROM {{table}} WHERE id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT id FROM batch)) RETURNING id
)
SELECT (SELECT pg_catalog.count(*) FROM del), pg_catalog.count(*), coalesce(pg_catalog.max(id), 0) FROM scope

-- name: prune_tick
-- One batch of PruneRuns on a table at schema version 4 or later: as
-- prune, and never the finished run of the latest tick its source has
-- served, which keeps that tick, and the older ones, done.
WITH scope AS (
	SELECT id FROM {{table}} WHERE id OPERATOR(pg_catalog.>) $1 ORDER BY id LIMIT $3
), batch AS (
	SELECT id FROM {{table}} AS r
	WHERE id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT id FROM scope)) AND status OPERATOR(pg_catalog.<>) 'running'
	  AND finished_at OPERATOR(pg_catalog.<) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) ($2::bigint OPERATOR(pg_catalog.*) interval '1 microsecond'))
	  AND EXISTS (SELECT FROM {{table}} AS newer WHERE newer.source OPERATOR(pg_catalog.=) r.source AND newer.started_at OPERATOR(pg_catalog.>) r.started_at OFFSET $4::int)
	  AND NOT (r.tick IS NOT NULL AND r.status OPERATOR(pg_catalog.=) ANY ('{succeeded,failed}'::pg_catalog.text[]) AND NOT EXISTS (
		SELECT FROM {{table}} AS later WHERE later.source OPERATOR(pg_catalog.=) r.source AND later.tick OPERATOR(pg_catalog.>) r.tick AND later.status OPERATOR(pg_catalog.=) ANY ('{succeeded,failed}'::pg_catalog.text[])))
	FOR UPDATE OF r SKIP LOCKED
), del AS (
	DELETE FROM {{table}} WHERE id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT id FROM batch)) RETURNING id
)
SELECT (SELECT pg_catalog.count(*) FROM del), pg_catalog.count(*), coalesce(pg_catalog.max(id), 0) FROM scope

-- The claim as a batch of three statements, for a table at schema version
-- 2 (without the claim function). The store sends them as one pgx.Batch:
-- one network write, one round trip, one implicit transaction that ends
-- at the batch's Sync. A lost claim updates and inserts nothing, so it
-- assigns no transaction ID and its commit flushes no WAL.

-- name: lock
-- Takes the advisory lock ($1, the source's key), only under READ
-- COMMITTED, and records in a transaction-local setting whether it did.
-- Under another isolation level the snapshot of the re-check would predate
-- the lock, so the statement refuses and reports the level; the store then
-- sends the explicit form, which wraps the same statements in BEGIN
-- ISOLATION LEVEL READ COMMITTED ... COMMIT.
SELECT pg_catalog.set_config('runclaim.locked',
	CASE WHEN pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed'
	     THEN pg_catalog.pg_try_advisory_xact_lock($1::bigint)::pg_catalog.text
	     ELSE 'false' END, true)::pg_catalog.bool,
	pg_catalog.current_setting('transaction_isolation'),
	-- Bounds how long the later statements may wait for a table lock: $2
	-- milliseconds, or the session's own lock_timeout if that is shorter.
	-- A claim waits for nothing but DDL or maintenance on the runs table,
	-- and for that only so long.
	pg_catalog.set_config('lock_timeout', CASE
		WHEN pg_catalog.current_setting('lock_timeout')::interval OPERATOR(pg_catalog.>) interval '0'
		 AND pg_catalog.current_setting('lock_timeout')::interval OPERATOR(pg_catalog.<) ($2::bigint OPERATOR(pg_catalog.*) interval '1 millisecond')
		THEN pg_catalog.current_setting('lock_timeout')
		ELSE $2::bigint::pg_catalog.text END, true)

-- name: expire
-- A later statement, so a fresh snapshot: marks the source's ($1) running
-- run whose lease has ended as expired. It is a statement of its own so
-- that the unique index on running runs no longer holds the old row when
-- the claim inserts.
UPDATE {{table}} SET status = 'expired', finished_at = pg_catalog.clock_timestamp()
WHERE id OPERATOR(pg_catalog.=) ANY (
	SELECT id FROM {{table}}
	WHERE source OPERATOR(pg_catalog.=) $1 AND status OPERATOR(pg_catalog.=) 'running' AND lease_until OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
	  AND pg_catalog.current_setting('runclaim.locked')::pg_catalog.bool
	  -- Only when the claim will go on to insert: not when the minimum
	  -- interval ($2 microseconds, or the one recorded with the latest
	  -- run) has not passed, so that a skip writes nothing.
	  AND NOT EXISTS (
		SELECT FROM (SELECT started_at, min_interval FROM {{table}} WHERE source OPERATOR(pg_catalog.=) $1 ORDER BY started_at DESC LIMIT 1) AS last
		WHERE (last.started_at OPERATOR(pg_catalog.+) greatest(last.min_interval, $2::bigint OPERATOR(pg_catalog.*) interval '1 microsecond')) OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
	-- Skips a row another transaction has locked (its holder's late
	-- finish, an operator's release, a fenced transaction): the claim then
	-- reports the source as running instead of waiting.
	FOR UPDATE SKIP LOCKED)

-- name: claim
-- Re-checks under the lock and inserts the run, or returns why not. $1
-- the source, $2 the owner, $3 the lease and $4 the claimer's minimum
-- interval in microseconds. Every time is clock_timestamp(), the
-- database's clock when the statement runs.
WITH st AS MATERIALIZED (
	SELECT pg_catalog.current_setting('runclaim.locked')::pg_catalog.bool AS locked, pg_catalog.clock_timestamp() AS now
), cur AS MATERIALIZED (
	SELECT id, owner, started_at, lease_until FROM {{table}} WHERE source OPERATOR(pg_catalog.=) $1 AND status OPERATOR(pg_catalog.=) 'running'
), last AS MATERIALIZED (
	-- The longer of the claimer's interval and the one recorded with the
	-- source's latest run, so that an interval binds every later claimer.
	SELECT started_at OPERATOR(pg_catalog.+) greatest(min_interval, $4::bigint OPERATOR(pg_catalog.*) interval '1 microsecond') AS next
	FROM {{table}} WHERE source OPERATOR(pg_catalog.=) $1 ORDER BY started_at DESC LIMIT 1
), ins AS (
	INSERT INTO {{table}} (source, status, owner, started_at, lease_until, heartbeat_at, min_interval)
	SELECT $1, 'running', $2, st.now, st.now OPERATOR(pg_catalog.+) ($3::bigint OPERATOR(pg_catalog.*) interval '1 microsecond'), st.now, $4::bigint OPERATOR(pg_catalog.*) interval '1 microsecond' FROM st
	WHERE st.locked
	  AND NOT EXISTS (SELECT FROM cur)
	  AND NOT EXISTS (SELECT FROM last WHERE last.next OPERATOR(pg_catalog.>) st.now)
	RETURNING id, started_at, lease_until
)
-- One row: the clock, the inserted run, the running run, the next start
-- the interval allows.
SELECT st.now, ins.id, ins.started_at, ins.lease_until,
	cur.id, cur.owner, cur.started_at, cur.lease_until, last.next
FROM st LEFT JOIN ins ON true LEFT JOIN cur ON true LEFT JOIN last ON true


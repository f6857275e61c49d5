-- Keys: the claim that names keys, and the operators' limits and
-- cooldowns (schema version 8; see sql/008_keys.up.sql).

-- name: unclaim_starts
-- Deletes the starts of the runs $3 started at $2 (pairwise) for the
-- keys $1 (each run's keys, flattened, pairwise too): a claim given up
-- after it won started nothing.
DELETE FROM {{table_starts}} AS o USING ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.timestamptz[]), pg_catalog.unnest($3::bigint[])) AS d(key, started_at, run_id)
WHERE o.key OPERATOR(pg_catalog.=) d.key AND o.started_at OPERATOR(pg_catalog.=) d.started_at AND o.run_id OPERATOR(pg_catalog.=) d.run_id

-- name: lock_keys
-- Takes the advisory locks $1 (ascending), waiting, for the transaction:
-- those of the keys whose starts the next statement deletes, so that the
-- renumbering of their starts (schema version 10) never waits on a row
-- while it holds a key's lock.
SELECT pg_catalog.pg_advisory_xact_lock(l.k) FROM ROWS FROM (pg_catalog.unnest($1::bigint[])) AS l(k)

-- name: lock_run_keys
-- lock_keys for the keys that running run $1 of source $2, started at $3,
-- names, by the locks of the table (KeyLocks, derived in SQL; schema
-- version 10), ascending: for Unclaim, which knows the run but not its
-- keys.
SELECT pg_catalog.pg_advisory_xact_lock(l.k)
FROM (SELECT {{table_keylock}}(u.k) AS k
        FROM {{table}} AS r, ROWS FROM (pg_catalog.unnest(r.keys)) AS u(k)
       WHERE r.id OPERATOR(pg_catalog.=) $1 AND r.source OPERATOR(pg_catalog.=) $2 AND r.started_at OPERATOR(pg_catalog.=) $3::pg_catalog.timestamptz
         AND r.status OPERATOR(pg_catalog.=) 'running'
       ORDER BY 1) AS l

-- name: set_limit
-- Creates or replaces the limit of key $1: $2 running, $3 starts per $4
-- microseconds, and $5 microseconds at least between two starts (schema
-- version 12). A cooldown stays. Its row: the database clock.
INSERT INTO {{table_keys}} AS k (key, max_running, max_starts, per_us, min_gap_us, limit_at)
VALUES ($1, $2, $3, $4, $5, pg_catalog.clock_timestamp())
ON CONFLICT (key) DO UPDATE SET max_running = EXCLUDED.max_running, max_starts = EXCLUDED.max_starts,
	per_us = EXCLUDED.per_us, min_gap_us = EXCLUDED.min_gap_us, limit_at = EXCLUDED.limit_at
RETURNING k.limit_at

-- name: delete_limit
-- Removes the limit of key $1; its cooldown stays. The row stays too,
-- constraining nothing.
UPDATE {{table_keys}} SET max_running = 0, max_starts = 0, per_us = 0, min_gap_us = 0, limit_at = NULL WHERE key OPERATOR(pg_catalog.=) $1

-- name: cooldown
-- A cooldown of key $1 until $2, or, when $2 is NULL, for $4 microseconds
-- from the database clock, with note $3. It never shortens one in force:
-- the row changes only when the new end is later. An end that is not
-- after the clock changes nothing. Its row: the clock and the end asked.
WITH c AS (
	SELECT pg_catalog.clock_timestamp() AS now
), e AS (
	SELECT c.now, coalesce($2::pg_catalog.timestamptz, c.now OPERATOR(pg_catalog.+) ($4::bigint OPERATOR(pg_catalog.*) interval '1 microsecond')) AS until FROM c
), up AS (
	INSERT INTO {{table_keys}} AS k (key, cooling_until, cooling_note, cooling_at)
	SELECT $1, e.until, $3, e.now FROM e WHERE e.until OPERATOR(pg_catalog.>) e.now
	ON CONFLICT (key) DO UPDATE SET cooling_until = EXCLUDED.cooling_until, cooling_note = EXCLUDED.cooling_note, cooling_at = EXCLUDED.cooling_at
	WHERE k.cooling_until IS NULL OR k.cooling_until OPERATOR(pg_catalog.<) EXCLUDED.cooling_until
	RETURNING 1
)
SELECT e.now, e.until FROM e

-- name: end_cooldown
-- Ends the cooldown of key $1, if any.
UPDATE {{table_keys}} SET cooling_until = NULL, cooling_note = '', cooling_at = NULL WHERE key OPERATOR(pg_catalog.=) $1 AND cooling_until IS NOT NULL

-- name: keys_state
-- Every key with a limit or a cooldown, by name: its limit, its live runs
-- and its starts in the window (at most max_starts of them counted), its
-- cooldown if in force, and the database clock; then its least gap
-- between starts and, with one, its newest start. At most $1 rows.
SELECT k.key, k.max_running, k.max_starts, k.per_us,
	(SELECT pg_catalog.count(*) FROM {{table}} AS r
	  WHERE r.status OPERATOR(pg_catalog.=) 'running' AND pg_catalog.cardinality(r.keys) OPERATOR(pg_catalog.=) 1 AND r.keys OPERATOR(pg_catalog.=) ARRAY[k.key] AND r.lease_until OPERATOR(pg_catalog.>) c.now)
	OPERATOR(pg_catalog.+) (SELECT pg_catalog.count(*) FROM {{table}} AS r
	  WHERE r.status OPERATOR(pg_catalog.=) 'running' AND pg_catalog.cardinality(r.keys) OPERATOR(pg_catalog.>) 1 AND r.keys OPERATOR(pg_catalog.@>) ARRAY[k.key] AND r.lease_until OPERATOR(pg_catalog.>) c.now),
	CASE WHEN k.max_starts OPERATOR(pg_catalog.>) 0 THEN (
		SELECT pg_catalog.count(*) FROM (
			SELECT FROM {{table_starts}} AS s
			 WHERE s.key OPERATOR(pg_catalog.=) k.key AND s.started_at OPERATOR(pg_catalog.>) (c.now OPERATOR(pg_catalog.-) (k.per_us OPERATOR(pg_catalog.*) interval '1 microsecond'))
			 LIMIT k.max_starts) AS w) ELSE 0 END,
	CASE WHEN k.cooling_until OPERATOR(pg_catalog.>) c.now THEN k.cooling_until END,
	CASE WHEN k.cooling_until OPERATOR(pg_catalog.>) c.now THEN k.cooling_note ELSE '' END,
	c.now, k.min_gap_us,
	CASE WHEN k.min_gap_us OPERATOR(pg_catalog.>) 0 THEN (
		SELECT m.started_at FROM {{table_starts}} AS m WHERE m.key OPERATOR(pg_catalog.=) k.key ORDER BY m.seq DESC LIMIT 1) END
FROM (SELECT pg_catalog.clock_timestamp() AS now) AS c, {{table_keys}} AS k
WHERE k.max_running OPERATOR(pg_catalog.>) 0 OR k.max_starts OPERATOR(pg_catalog.>) 0 OR k.min_gap_us OPERATOR(pg_catalog.>) 0 OR k.cooling_until OPERATOR(pg_catalog.>) c.now
ORDER BY k.key
LIMIT $1

-- Many claims in one statement (ClaimMany), and many heartbeats in one
-- statement (HeartbeatMany). Neither is a schema step: both call what
-- schema versions 3 and 4 already have.

-- name: call_many_tick
-- One call of the claim function of schema version 4 per element of the
-- arrays, in their order, in one statement: one round trip, one
-- transaction, one commit. $1 the advisory keys, $2 the sources, $3 the
-- owners, $4 the leases and $5 the minimum intervals in microseconds, $7
-- the ticks (NULL for a plain claim); $6 the bound on a table lock wait in
-- milliseconds. Each call tries its own source's advisory lock, which
-- never waits, so two calls with overlapping sets in any order cannot
-- deadlock; the first call sets the transaction's lock_timeout before
-- anything touches the table, and the later ones find it set. The locks
-- won are held until the statement commits. Each row: the element's
-- ordinal, then the function's row.
SELECT s.ord, c.locked, c.isolation, c.db_now, c.won, c.run_id, c.run_owner, c.run_started, c.run_lease, c.retry_after, c.done_tick
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $7::timestamptz[])
     WITH ORDINALITY AS s(key, source, owner, lease, min_interval, tick, ord)
-- LATERAL: the function is called once per element, after the previous
-- call has returned.
CROSS JOIN LATERAL {{table_claim}}(s.key, s.source, s.owner, s.lease, s.min_interval, $6::bigint, s.tick) AS c
ORDER BY s.ord

-- name: call_many
-- call_many_tick for a table at schema version 3: the six-argument
-- function, without ticks. done_tick is NULL.
SELECT s.ord, c.locked, c.isolation, c.db_now, c.won, c.run_id, c.run_owner, c.run_started, c.run_lease, c.retry_after, NULL::timestamptz
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::bigint[])
     WITH ORDINALITY AS s(key, source, owner, lease, min_interval, ord)
CROSS JOIN LATERAL {{table_claim}}(s.key, s.source, s.owner, s.lease, s.min_interval, $6::bigint) AS c
ORDER BY s.ord

-- name: unclaim_many
-- Deletes the runs $1, started at $2, of the sources $3 (pairwise; see
-- heartbeat_many), won by a
-- ClaimMany whose caller gave up or that failed after it committed, so
-- that a failed ClaimMany leaves no row.
DELETE FROM {{table}} AS r USING unnest($1::bigint[], $2::timestamptz[], $3::text[]) AS d(id, started_at, source)
WHERE r.id = ANY($1::bigint[]) AND r.id = d.id AND r.started_at = d.started_at AND r.source = d.source AND r.status = 'running'

-- name: unclaim_many_trigger
-- unclaim_many for runs of which some used up a trigger (schema version
-- 7): $3 the triggers' times, pairwise, NULL for a run that used none, and
-- $4 the sources. It
-- gives each trigger back to its source, unless another is pending by
-- now, in the same transaction.
WITH gone AS (
	DELETE FROM {{table}} AS r USING unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[], $4::text[]) AS d(id, started_at, trigger_at, source)
	WHERE r.id = ANY($1::bigint[]) AND r.id = d.id AND r.started_at = d.started_at AND r.source = d.source AND r.status = 'running'
	RETURNING r.source, d.trigger_at
), back AS (
	UPDATE {{table_control}} AS k SET triggered_at = gone.trigger_at
	FROM gone WHERE k.source = gone.source AND gone.trigger_at IS NOT NULL AND k.triggered_at IS NULL
	RETURNING 1
)
SELECT count(*) FROM gone

-- name: heartbeat_many
-- Extends the leases of the runs $1 of the sources $2, started at $4
-- (pairwise), to $3 microseconds from now, as heartbeat does for one: only
-- a running run whose lease has not ended. A run it does not return is
-- lost.
UPDATE {{table}} AS r
SET lease_until = GREATEST(r.lease_until, c.now + $3::bigint * interval '1 microsecond'),
    heartbeat_at = GREATEST(r.heartbeat_at, c.now) -- never back: see heartbeat
FROM (SELECT pg_catalog.clock_timestamp() AS now) AS c,
     unnest($1::bigint[], $2::text[], $4::timestamptz[]) AS h(id, source, started_at)
-- id = ANY lets the primary key find the rows whatever the statistics
-- say of the unnest; the join then checks each one's source.
WHERE r.id = ANY($1::bigint[]) AND r.id = h.id AND r.source = h.source AND r.started_at = h.started_at
  AND r.status = 'running' AND r.lease_until > c.now
RETURNING r.id, r.lease_until

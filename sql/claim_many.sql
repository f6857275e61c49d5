-- Many claims in one statement (ClaimMany), and many heartbeats in one
-- statement (HeartbeatMany). Neither is a schema step.

-- name: call_many
-- One call of the claim function's overload of version 9 (call_state)
-- per element of the arrays, in their order, in one statement: one round
-- trip, one transaction, one commit. $1 the advisory keys, $2 the
-- sources, $3 the owners, $4 the leases and $5 the minimum intervals in
-- microseconds, $7 the ticks (NULL for a plain claim); $6 the bound on a
-- table lock wait in milliseconds. Each call tries its own source's
-- advisory lock, which never waits, so two calls with overlapping sets in
-- any order cannot deadlock; the first call sets the transaction's
-- lock_timeout before anything touches the table, and the later ones find
-- it set. The locks won are held until the statement commits. Each win
-- reads its source's state under its lock, as a single claim does. Each
-- row: the element's ordinal, then the function's row. A batch that names
-- keys is call_many_keys_numbered.
SELECT s.ord, c.locked, c.isolation, c.db_now, c.won, c.run_id, c.run_owner, c.run_started, c.run_lease, c.retry_after, c.done_tick, c.limited_key, c.run_state
FROM ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::pg_catalog.text[]), pg_catalog.unnest($3::pg_catalog.text[]), pg_catalog.unnest($4::bigint[]), pg_catalog.unnest($5::bigint[]), pg_catalog.unnest($7::pg_catalog.timestamptz[]))
     WITH ORDINALITY AS s(key, source, owner, lease, min_interval, tick, ord)
-- LATERAL: the function is called once per element, after the previous
-- call has returned.
CROSS JOIN LATERAL {{table_claim}}(s.key, s.source, s.owner, s.lease, s.min_interval, $6::bigint, s.tick, NULL, NULL, true) AS c
ORDER BY s.ord

-- name: unclaim_many
-- Deletes the runs $1, started at $2, of the sources $3 (pairwise; see
-- heartbeat_many), won by a
-- ClaimMany whose caller gave up or that failed after it committed, so
-- that a failed ClaimMany leaves no row.
DELETE FROM {{table}} AS r USING ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::pg_catalog.timestamptz[]), pg_catalog.unnest($3::pg_catalog.text[])) AS d(id, started_at, source)
WHERE r.id OPERATOR(pg_catalog.=) ANY($1::bigint[]) AND r.id OPERATOR(pg_catalog.=) d.id AND r.started_at OPERATOR(pg_catalog.=) d.started_at AND r.source OPERATOR(pg_catalog.=) d.source AND r.status OPERATOR(pg_catalog.=) 'running'

-- name: unclaim_many_trigger
-- unclaim_many for runs of which some used up a trigger (schema version
-- 7): $3 the triggers' times, pairwise, NULL for a run that used none, and
-- $4 the sources. It
-- gives each trigger back to its source, unless another is pending by
-- now, in the same transaction.
WITH gone AS (
	DELETE FROM {{table}} AS r USING ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::pg_catalog.timestamptz[]), pg_catalog.unnest($3::pg_catalog.timestamptz[]), pg_catalog.unnest($4::pg_catalog.text[])) AS d(id, started_at, trigger_at, source)
	WHERE r.id OPERATOR(pg_catalog.=) ANY($1::bigint[]) AND r.id OPERATOR(pg_catalog.=) d.id AND r.started_at OPERATOR(pg_catalog.=) d.started_at AND r.source OPERATOR(pg_catalog.=) d.source AND r.status OPERATOR(pg_catalog.=) 'running'
	RETURNING r.source, d.trigger_at
), back AS (
	UPDATE {{table_control}} AS k SET triggered_at = gone.trigger_at
	FROM gone WHERE k.source OPERATOR(pg_catalog.=) gone.source AND gone.trigger_at IS NOT NULL AND k.triggered_at IS NULL
	RETURNING 1
)
SELECT pg_catalog.count(*) FROM gone

-- name: heartbeat_many
-- Extends the leases of the runs $1 of the sources $2, started at $4
-- (pairwise), to $3 microseconds from now, as heartbeat does for one: only
-- a running run whose lease has not ended. A run it does not return is
-- lost. Each row names its run by ID, source and start: two requests may
-- share an ID handed out again after a failover (G14).
UPDATE {{table}} AS r
SET lease_until = GREATEST(r.lease_until, c.now OPERATOR(pg_catalog.+) ($3::bigint OPERATOR(pg_catalog.*) interval '1 microsecond')),
    heartbeat_at = GREATEST(r.heartbeat_at, c.now) -- never back: see heartbeat
FROM (SELECT pg_catalog.clock_timestamp() AS now) AS c,
     ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::pg_catalog.text[]), pg_catalog.unnest($4::pg_catalog.timestamptz[])) AS h(id, source, started_at)
-- id = ANY lets the primary key find the rows whatever the statistics
-- say of the unnest; the join then checks each one's source.
WHERE r.id OPERATOR(pg_catalog.=) ANY($1::bigint[]) AND r.id OPERATOR(pg_catalog.=) h.id AND r.source OPERATOR(pg_catalog.=) h.source AND r.started_at OPERATOR(pg_catalog.=) h.started_at
  AND r.status OPERATOR(pg_catalog.=) 'running' AND r.lease_until OPERATOR(pg_catalog.>) c.now
RETURNING r.id, r.source, r.started_at, r.lease_until

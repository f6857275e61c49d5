-- Many claims in one statement (ClaimMany), and many heartbeats in one
-- statement (HeartbeatMany). Neither is a schema step.

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

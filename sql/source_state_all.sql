-- The state of every source, for SourceStates: the rows of
-- sql/source_state.sql (latest, finished, succeeded or unread) for each
-- source in the table, in order, at most $1 of them. $2 is how many of a
-- source newest runs are read at most to find its newest success.
--
-- A kind may name several: latest,finished,succeeded is one run that is
-- all three, sent once.
--
-- A skip scan down the history index, (source, started_at DESC), since
-- Postgres has no loose index scan of its own: each probe finds the next
-- source and its newest run at once, the first entry of the index after
-- the source before. The newest run is most often also the newest finished
-- and the newest succeeded run, and then no other probe is made: a walk
-- for the newest finished run runs only when the newest is running, and
-- one for the newest success only when the newest did not succeed. At
-- 10,000 sources of 100 runs each, that is 10,000 probes and 1,500 walks
-- where a probe and three walks per source made 40,000.
WITH RECURSIVE latest AS (
	(SELECT r.source, r.id, r.owner, r.started_at, r.lease_until, r.status, r.heartbeat_at, r.finished_at, r.error, 1 AS n
	FROM %[1]s AS r
	ORDER BY r.source, r.started_at DESC
	LIMIT 1)
	UNION ALL
	SELECT nxt.source, nxt.id, nxt.owner, nxt.started_at, nxt.lease_until, nxt.status, nxt.heartbeat_at, nxt.finished_at, nxt.error,
		latest.n OPERATOR(pg_catalog.+) 1
	FROM latest
	CROSS JOIN LATERAL (
		SELECT r.source, r.id, r.owner, r.started_at, r.lease_until, r.status, r.heartbeat_at, r.finished_at, r.error
		FROM %[1]s AS r
		WHERE r.source OPERATOR(pg_catalog.>) latest.source
		ORDER BY r.source, r.started_at DESC
		LIMIT 1
	) AS nxt
	WHERE latest.n OPERATOR(pg_catalog.<) $1
)
SELECT
	(SELECT pg_catalog.clock_timestamp()), -- once per statement: the database time of the read
	l.source, pick.kind,
	pick.id, pick.owner, pick.started_at, pick.lease_until, pick.status, pick.heartbeat_at, pick.finished_at, pick.error
FROM latest AS l
CROSS JOIN LATERAL (
	-- The newest run, with the kinds it also is: the newest finished run
	-- unless it is running, the newest succeeded run if it succeeded.
	SELECT CASE WHEN l.status OPERATOR(pg_catalog.=) 'running' THEN 'latest'
		WHEN l.status OPERATOR(pg_catalog.=) 'succeeded' THEN 'latest,finished,succeeded'
		ELSE 'latest,finished' END AS kind,
		l.id, l.owner, l.started_at, l.lease_until, l.status, l.heartbeat_at, l.finished_at, l.error
	UNION ALL
	-- Else the walk for the newest finished run passes over the one
	-- running run.
	(SELECT 'finished', r.id, r.owner, r.started_at, r.lease_until, r.status, r.heartbeat_at, r.finished_at, r.error
	FROM %[1]s AS r
	WHERE l.status OPERATOR(pg_catalog.=) 'running'
		AND r.source OPERATOR(pg_catalog.=) l.source AND r.status OPERATOR(pg_catalog.<>) 'running'
	ORDER BY r.started_at DESC
	LIMIT 1)
	UNION ALL
	-- When the newest run did not succeed, as in sql/source_state.sql,
	-- the newest succeeded run among the $2 newest, or the $2-th newest as
	-- unread if none of them succeeded.
	(SELECT CASE WHEN recent.status OPERATOR(pg_catalog.=) 'succeeded' THEN 'succeeded' ELSE 'unread' END,
		recent.id, recent.owner, recent.started_at, recent.lease_until, recent.status, recent.heartbeat_at, recent.finished_at, recent.error
	FROM (
		SELECT r.*, pg_catalog.row_number() OVER (ORDER BY r.started_at DESC) AS nth
		FROM %[1]s AS r
		WHERE l.status OPERATOR(pg_catalog.<>) 'succeeded' AND r.source OPERATOR(pg_catalog.=) l.source
		ORDER BY r.started_at DESC
		LIMIT $2
	) AS recent
	WHERE recent.status OPERATOR(pg_catalog.=) 'succeeded' OR recent.nth OPERATOR(pg_catalog.=) $2
	ORDER BY recent.started_at DESC
	LIMIT 1)
) AS pick
ORDER BY l.n

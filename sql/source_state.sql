-- The state of one source, for Check: its newest run, its newest finished
-- run and its newest succeeded run, each found by a walk down the history
-- index, (source, started_at DESC), from the newest run, that stops after
-- a bounded number of rows. The Go code fills in the runs table and the
-- body of the sources CTE (sql/source_state_one.sql). $2 is how many of a
-- source's newest runs are read at most to find its newest success.
-- SourceStates reads every source with sql/source_state_all.sql, which
-- sends the same rows.
WITH RECURSIVE sources(source, n) AS (%[2]s)
SELECT
	(SELECT pg_catalog.clock_timestamp()), -- once per statement: the database's time of the read
	s.source, pick.kind,
	pick.id, pick.owner, pick.started_at, pick.lease_until, pick.status, pick.heartbeat_at, pick.finished_at, pick.error
FROM sources AS s
LEFT JOIN LATERAL (
	-- The newest run: the running one, if any (a run starts only once the
	-- one before it has ended), else the last one to end.
	(SELECT 'latest' AS kind, r.id, r.owner, r.started_at, r.lease_until, r.status, r.heartbeat_at, r.finished_at, r.error
	FROM %[1]s AS r
	WHERE r.source OPERATOR(pg_catalog.=) s.source
	ORDER BY r.started_at DESC
	LIMIT 1)
	UNION ALL
	-- The newest run that has ended: the walk passes over at most one
	-- running run.
	(SELECT 'finished', r.id, r.owner, r.started_at, r.lease_until, r.status, r.heartbeat_at, r.finished_at, r.error
	FROM %[1]s AS r
	WHERE r.source OPERATOR(pg_catalog.=) s.source AND r.status OPERATOR(pg_catalog.<>) 'running'
	ORDER BY r.started_at DESC
	LIMIT 1)
	UNION ALL
	-- The newest succeeded run among the $2 newest; if none of them
	-- succeeded, the $2-th newest run, if there is one, as 'unread': the
	-- runs older than it were not read.
	(SELECT CASE WHEN recent.status OPERATOR(pg_catalog.=) 'succeeded' THEN 'succeeded' ELSE 'unread' END,
		recent.id, recent.owner, recent.started_at, recent.lease_until, recent.status, recent.heartbeat_at, recent.finished_at, recent.error
	FROM (
		SELECT r.*, pg_catalog.row_number() OVER (ORDER BY r.started_at DESC) AS nth
		FROM %[1]s AS r
		WHERE r.source OPERATOR(pg_catalog.=) s.source
		ORDER BY r.started_at DESC
		LIMIT $2
	) AS recent
	WHERE recent.status OPERATOR(pg_catalog.=) 'succeeded' OR recent.nth OPERATOR(pg_catalog.=) $2
	ORDER BY recent.started_at DESC
	LIMIT 1)
) AS pick ON true
WHERE s.source IS NOT NULL
ORDER BY s.source

-- Every source in the table, in order, at most $1 of them: a skip scan
-- down the history index, one probe per source, since Postgres has no
-- "loose" index scan of its own. It ends with a NULL source, or at the
-- $1-th source.
(SELECT r.source, 1 FROM %[1]s AS r ORDER BY r.source LIMIT 1)
UNION ALL
SELECT (SELECT r.source FROM %[1]s AS r WHERE r.source OPERATOR(pg_catalog.>) sources.source ORDER BY r.source LIMIT 1), sources.n OPERATOR(pg_catalog.+) 1
FROM sources
WHERE sources.source IS NOT NULL AND sources.n OPERATOR(pg_catalog.<) $1

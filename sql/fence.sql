-- Fence: one batch, one round trip, inside the caller's transaction (see
-- Fence in fence.go for what each lock lets through).

-- name: fence_lock
-- Locks run $1's row FOR KEY SHARE until the transaction ends. That mode
-- conflicts only with FOR UPDATE and with updates of a key: a claim's
-- expire (FOR UPDATE SKIP LOCKED) skips the row, a Release (FOR UPDATE)
-- waits, and Heartbeat and Finish, which update no key column, go on.
SELECT id FROM {{table}}
-- By id, source ($2), owner ($3) and started_at ($4), so that a
-- transaction on another database never locks a row there that happens
-- to bear the same id.
WHERE id OPERATOR(pg_catalog.=) $1 AND source OPERATOR(pg_catalog.=) $2 AND owner OPERATOR(pg_catalog.=) $3 AND started_at OPERATOR(pg_catalog.=) $4
  -- Only a running run whose lease has not ended, so that a Fence that
  -- fails seldom leaves a lock behind.
  AND status OPERATOR(pg_catalog.=) 'running' AND lease_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
FOR KEY SHARE

-- name: fence_savepoint
SAVEPOINT runclaim_fence

-- name: fence_check
-- Locks the row again, FOR SHARE, which conflicts with a heartbeat's or a
-- finish's update: it waits for one in flight and reads the row as that
-- update left it (READ COMMITTED), or fails with 40001 when the row
-- changed after the transaction's snapshot. By id alone, to tell a lost
-- run from a transaction on another database.
WITH r AS (
	SELECT source, owner, started_at, status, lease_until FROM {{table}} WHERE id OPERATOR(pg_catalog.=) $1 FOR SHARE
)
SELECT r.source, r.owner, r.started_at, r.status, r.lease_until, pg_catalog.clock_timestamp(),
	pg_catalog.current_setting('transaction_isolation'),
	-- Without a row: whether a newer run of the source exists (the run was
	-- pruned, long over).
	CASE WHEN r.source IS NULL THEN EXISTS (SELECT FROM {{table}} WHERE source OPERATOR(pg_catalog.=) $2 AND id OPERATOR(pg_catalog.>) $1) END
FROM (SELECT) AS one LEFT JOIN r ON true

-- name: fence_rollback
-- Drops the FOR SHARE lock again (it belonged to the savepoint), so that
-- heartbeats and finishes wait at most for the batch, never for the
-- caller's transaction.
ROLLBACK TO SAVEPOINT runclaim_fence

-- name: fence_release
RELEASE SAVEPOINT runclaim_fence

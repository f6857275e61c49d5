package runclaim_test

// The SQL of the first release (schema version 1), verbatim, as a fixture:
// the rolling-upgrade tests run it side by side with this release's code on
// one table, as old and new replicas do during a deploy. Do not edit it;
// it is what replicas of that release send.

// v1TableSQL created the runs table: %s are the table, the running index
// and the history index, quoted.
const v1TableSQL = `CREATE TABLE IF NOT EXISTS %s (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	source       text NOT NULL,
	status       text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'expired', 'released')),
	owner        text NOT NULL,
	started_at   timestamptz NOT NULL,
	lease_until  timestamptz NOT NULL,
	heartbeat_at timestamptz NOT NULL,
	finished_at  timestamptz,
	error        text
);
CREATE UNIQUE INDEX IF NOT EXISTS %s ON %s (source) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS %s ON %s (source, started_at DESC);
`

const v1LockSQL = `SELECT pg_catalog.set_config('runclaim.locked',
	CASE WHEN pg_catalog.current_setting('transaction_isolation') = 'read committed'
	     THEN pg_catalog.pg_try_advisory_xact_lock($1::bigint)::text
	     ELSE 'false' END, true)::bool,
	pg_catalog.current_setting('transaction_isolation')`

const v1ExpireSQL = `UPDATE %[1]s SET status = 'expired', finished_at = pg_catalog.clock_timestamp()
WHERE id IN (
	SELECT id FROM %[1]s
	WHERE source = $1 AND status = 'running' AND lease_until <= pg_catalog.clock_timestamp()
	  AND pg_catalog.current_setting('runclaim.locked')::bool
	FOR UPDATE SKIP LOCKED)`

const v1ClaimSQL = `WITH st AS MATERIALIZED (
	SELECT pg_catalog.current_setting('runclaim.locked')::bool AS locked, pg_catalog.clock_timestamp() AS now
), cur AS MATERIALIZED (
	SELECT id, owner, started_at, lease_until FROM %[1]s WHERE source = $1 AND status = 'running'
), last AS MATERIALIZED (
	SELECT started_at FROM %[1]s WHERE $4::bigint > 0 AND source = $1 ORDER BY started_at DESC LIMIT 1
), ins AS (
	INSERT INTO %[1]s (source, status, owner, started_at, lease_until, heartbeat_at)
	SELECT $1, 'running', $2, st.now, st.now + $3::bigint * interval '1 microsecond', st.now FROM st
	WHERE st.locked
	  AND NOT EXISTS (SELECT FROM cur)
	  AND NOT EXISTS (SELECT FROM last WHERE last.started_at + $4::bigint * interval '1 microsecond' > st.now)
	RETURNING id, started_at, lease_until
)
SELECT ins.id, ins.started_at, ins.lease_until,
	cur.id, cur.owner, cur.started_at, cur.lease_until,
	last.started_at + $4::bigint * interval '1 microsecond'
FROM st LEFT JOIN ins ON true LEFT JOIN cur ON true LEFT JOIN last ON true`

const v1HeartbeatSQL = `UPDATE %[1]s
SET lease_until = c.now + $2::bigint * interval '1 microsecond', heartbeat_at = c.now
FROM (SELECT pg_catalog.clock_timestamp() AS now) AS c
WHERE id = $1 AND status = 'running'
RETURNING lease_until`

const v1FinishSQL = `WITH old AS (
	SELECT status, error FROM %[1]s WHERE id = $1
), upd AS (
	UPDATE %[1]s SET status = $2, error = $3, finished_at = pg_catalog.clock_timestamp()
	WHERE id = $1 AND status = 'running'
	RETURNING 1
)
SELECT (SELECT count(*) FROM upd), old.status, old.error
FROM (SELECT) AS one LEFT JOIN old ON true`

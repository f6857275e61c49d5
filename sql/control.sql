-- Pauses and triggers (schema version 5; see sql/005_pauses.up.sql for the
-- table and the claim function that reads it). Each statement is one
-- implicit transaction and returns one row, whatever it changed. Every
-- time is clock_timestamp(), the database's clock.

-- name: pause
-- Pauses the source $1 until $2 (NULL: until Resume) with the note $3,
-- replacing a pause it has, unless $2 is not after the clock: then it
-- changes nothing. Its row: the clock, and whether it paused.
-- It first waits for the source's advisory lock, $4, which every claim
-- that may start a run holds from before it reads the pause until it
-- commits: so a claim in flight that read no pause has committed its run
-- before the pause is written, and once Pause returns, every claim reads
-- the pause. The lock is the transaction's, released at its commit.
WITH clock AS MATERIALIZED (
	SELECT pg_catalog.clock_timestamp() AS now
	FROM (SELECT pg_catalog.pg_advisory_xact_lock($4::bigint)) AS locked
), paused AS (
	INSERT INTO {{table_control}} AS k (source, paused_at, pause_until, pause_note)
	SELECT $1::pg_catalog.text, clock.now, $2::pg_catalog.timestamptz, $3::pg_catalog.text FROM clock
	WHERE $2::pg_catalog.timestamptz IS NULL OR $2::pg_catalog.timestamptz OPERATOR(pg_catalog.>) clock.now
	ON CONFLICT (source) DO UPDATE
	SET paused_at = excluded.paused_at, pause_until = excluded.pause_until, pause_note = excluded.pause_note
	RETURNING 1
)
SELECT clock.now, EXISTS (SELECT FROM paused) FROM clock

-- name: resume
-- Ends the pause of the source $1, if it has one; a pending trigger
-- stays. Its row: whether it had one.
WITH resumed AS (
	UPDATE {{table_control}} AS k SET paused_at = NULL, pause_until = NULL, pause_note = ''
	WHERE k.source OPERATOR(pg_catalog.=) $1::pg_catalog.text AND k.paused_at IS NOT NULL
	RETURNING 1
)
SELECT EXISTS (SELECT FROM resumed)

-- name: trigger
-- Leaves a trigger for the next claim of the source $1 that wins; one
-- that is pending already stays as it is. Its row: whether it made one.
WITH triggered AS (
	INSERT INTO {{table_control}} AS k (source, triggered_at) VALUES ($1::pg_catalog.text, pg_catalog.clock_timestamp())
	ON CONFLICT (source) DO UPDATE SET triggered_at = excluded.triggered_at
	WHERE k.triggered_at IS NULL
	RETURNING 1
)
SELECT EXISTS (SELECT FROM triggered)

-- name: controls
-- The sources that are paused now or have a pending trigger, of every
-- source or of $1 only, by source, with the clock. A pause whose end has
-- passed is over and not listed.
SELECT k.source, k.paused_at IS NOT NULL AND (k.pause_until IS NULL OR k.pause_until OPERATOR(pg_catalog.>) clock.now),
	k.paused_at, k.pause_until, k.pause_note, k.triggered_at, clock.now
FROM {{table_control}} AS k, (SELECT pg_catalog.clock_timestamp() AS now) AS clock
WHERE ($1::pg_catalog.text IS NULL OR k.source OPERATOR(pg_catalog.=) $1::pg_catalog.text)
  AND (k.paused_at IS NOT NULL AND (k.pause_until IS NULL OR k.pause_until OPERATOR(pg_catalog.>) clock.now) OR k.triggered_at IS NOT NULL)
ORDER BY k.source

-- name: operator_lock_timeout
-- Bounds the lock waits of an operator's call that waits for the claims
-- in flight (pause; a state's set and clear): such a claim holds the
-- source's advisory lock for milliseconds, so a wait longer than
-- {{operator_lock_wait_ms}} ms means a session holding it for good (stuck,
-- or any role that can connect: the key is no secret). The call then
-- fails with 55P03, having changed nothing, rather than hang and commit
-- after its caller gave up. Queued first, in the call's transaction.
SELECT pg_catalog.set_config('lock_timeout', '{{operator_lock_wait_ms}}', true)

-- The claim as one call of the claim function (schema version 3 on; see
-- sql/003_claim_function.up.sql for its body).

-- name: call
-- $1 the source's advisory key, $2 the source, $3 the owner, $4 the lease
-- and $5 the claimer's minimum interval in microseconds, $6 the bound on
-- the wait for a table lock in milliseconds. Its row: locked, isolation,
-- db_now, won, run_id, run_owner, run_started, run_lease, retry_after.
SELECT * FROM {{table_claim}}($1::bigint, $2::pg_catalog.text, $3::pg_catalog.text, $4::bigint, $5::bigint, $6::bigint)

-- name: call_tick
-- The claim function of schema version 4 (sql/004_ticks.up.sql): the
-- arguments of call, and $7 the tick, NULL for a plain claim. Its row:
-- call's, and done_tick, the latest tick served when it read it.
SELECT * FROM {{table_claim}}($1::bigint, $2::pg_catalog.text, $3::pg_catalog.text, $4::bigint, $5::bigint, $6::bigint, $7::pg_catalog.timestamptz)

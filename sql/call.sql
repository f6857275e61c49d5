-- The claim, on a table at the current schema version: one call of the
-- claim function (sql/claim.sql). On a table at the version before, the
-- store sends the same statements calling that version's function, which
-- takes the same arguments and returns the same row (prevStatement).

-- name: call
-- $1 the advisory key of the source, $2 the source, $3 the owner, $4 the
-- lease and $5 the minimum interval of the claimer in microseconds, $6
-- the bound on the wait for a table lock in milliseconds, $7 the tick
-- (NULL for a plain claim), $8 the keys, in the order the claim names
-- them, and $9 their advisory locks, ascending (both NULL for a claim
-- that names no key); a win returns the state. Its row: see sql/claim.sql.
SELECT * FROM {{table_claim_body}}($1::bigint, $2::pg_catalog.text, $3::pg_catalog.text, $4::bigint, $5::bigint, $6::bigint, $7::pg_catalog.timestamptz, $8::pg_catalog.text[], $9::bigint[], true, NULL, NULL)

-- name: call_replace
-- call for a claim with Replace (schema version 13 or later): the same
-- arguments, and $10 its token.
SELECT * FROM {{table_claim_body}}($1::bigint, $2::pg_catalog.text, $3::pg_catalog.text, $4::bigint, $5::bigint, $6::bigint, $7::pg_catalog.timestamptz, $8::pg_catalog.text[], $9::bigint[], true, NULL, NULL, $10::pg_catalog.text)

-- name: call_many
-- One call of the claim function (call) per element of the arrays, in their order, in one statement: one round
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
-- keys is call_many_keys.
SELECT s.ord, c.locked, c.isolation, c.db_now, c.won, c.run_id, c.run_owner, c.run_started, c.run_lease, c.retry_after, c.done_tick, c.limited_key, c.run_state
FROM ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::pg_catalog.text[]), pg_catalog.unnest($3::pg_catalog.text[]), pg_catalog.unnest($4::bigint[]), pg_catalog.unnest($5::bigint[]), pg_catalog.unnest($7::pg_catalog.timestamptz[]))
     WITH ORDINALITY AS s(key, source, owner, lease, min_interval, tick, ord)
-- LATERAL: the function is called once per element, after the previous
-- call has returned.
CROSS JOIN LATERAL {{table_claim_body}}(s.key, s.source, s.owner, s.lease, s.min_interval, $6::bigint, s.tick, NULL, NULL, true, NULL, NULL) AS c
ORDER BY s.ord

-- name: call_many_keys
-- call_many for sources that name keys: $8 and $9 each element's offset
-- and count in $10, the keys of every element one after the other. The
-- first call takes the locks of every key of the batch, $11, ascending,
-- before it reads anything: two batches whose keys overlap, in any order,
-- never wait on each other, and the later calls find their keys locked.
-- Every call also gets the keys of the batch, $12, each once, and how many
-- elements name each, $13: the first call that gets as far as the keys
-- finds out whether each has room for all of them. If so (a fast batch)
-- no call checks or records a key, and the statement records the starts
-- of every win, numbered, the next of each key, in the order of the
-- batch; otherwise each call checks and records its own, and the insert
-- finds them there and does nothing. $14: the key of each element that
-- names exactly one (NULL for the others), which it gets without cutting
-- it out of $10 (a slice of a text array walks the array from its start). Each key's newest number
-- is read once, by a function with a snapshot of its own, after every
-- call, so after the first took the locks of the batch's keys (the
-- statement's own snapshot is older than them). In a batch that is not
-- fast the calls recorded their starts and the insert does nothing.
WITH c AS MATERIALIZED (
	SELECT s.ord, s.koff, s.kn, s.k1, c.locked, c.isolation, c.db_now, c.won, c.run_id, c.run_owner, c.run_started, c.run_lease, c.retry_after, c.done_tick, c.limited_key, c.run_state
	FROM ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::pg_catalog.text[]), pg_catalog.unnest($3::pg_catalog.text[]), pg_catalog.unnest($4::bigint[]), pg_catalog.unnest($5::bigint[]), pg_catalog.unnest($7::pg_catalog.timestamptz[]), pg_catalog.unnest($8::int[]), pg_catalog.unnest($9::int[]), pg_catalog.unnest($14::pg_catalog.text[]))
	     WITH ORDINALITY AS s(key, source, owner, lease, min_interval, tick, koff, kn, k1, ord)
	CROSS JOIN LATERAL {{table_claim_body}}(s.key, s.source, s.owner, s.lease, s.min_interval, $6::bigint, s.tick,
		CASE WHEN s.kn OPERATOR(pg_catalog.=) 1 THEN ARRAY[s.k1] WHEN s.kn OPERATOR(pg_catalog.>) 1 THEN ($10::pg_catalog.text[])[s.koff OPERATOR(pg_catalog.+) 1 : s.koff OPERATOR(pg_catalog.+) s.kn] END,
		CASE WHEN s.ord OPERATOR(pg_catalog.=) 1 THEN $11::bigint[] END, true,
		$12::pg_catalog.text[], $13::int[]) AS c
), w AS MATERIALIZED (
	SELECT u.k, c.run_started, c.run_id, pg_catalog.row_number() OVER (PARTITION BY u.k ORDER BY c.ord) AS n
	  FROM c CROSS JOIN LATERAL pg_catalog.unnest(CASE WHEN c.kn OPERATOR(pg_catalog.=) 1 THEN ARRAY[c.k1] ELSE ($10::pg_catalog.text[])[c.koff OPERATOR(pg_catalog.+) 1 : c.koff OPERATOR(pg_catalog.+) c.kn] END) AS u(k)
	 WHERE c.won AND c.kn OPERATOR(pg_catalog.>) 0
), st AS (
	INSERT INTO {{table_starts}} (key, started_at, run_id, seq)
	SELECT w.k, w.run_started, w.run_id, t.top OPERATOR(pg_catalog.+) w.n
	  FROM w JOIN (SELECT d.k, {{table_top}}(d.k) AS top FROM (SELECT DISTINCT w.k FROM w) AS d) AS t ON t.k OPERATOR(pg_catalog.=) w.k
	ON CONFLICT DO NOTHING
)
SELECT c.ord, c.locked, c.isolation, c.db_now, c.won, c.run_id, c.run_owner, c.run_started, c.run_lease, c.retry_after, c.done_tick, c.limited_key, c.run_state
FROM c ORDER BY c.ord

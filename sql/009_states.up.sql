CREATE TABLE IF NOT EXISTS {{table_states}} (
	source text PRIMARY KEY,
	state bytea NOT NULL,
	run_id bigint,
	saved_at timestamptz NOT NULL
);
DO $q$
DECLARE
	r record;
	who text;
BEGIN
	FOR r IN
		SELECT DISTINCT a.grantee
		  FROM pg_catalog.pg_class AS c, LATERAL pg_catalog.aclexplode(c.relacl) AS a
		 WHERE c.oid = {{table_literal}}::regclass AND a.privilege_type = 'INSERT' AND a.grantee <> c.relowner
	LOOP
		who := CASE WHEN r.grantee = 0 THEN 'PUBLIC'
		            ELSE pg_catalog.quote_ident((SELECT o.rolname FROM pg_catalog.pg_roles AS o WHERE o.oid = r.grantee)) END;
		EXECUTE pg_catalog.format('GRANT SELECT, INSERT (source, state, run_id, saved_at), UPDATE (state, run_id, saved_at) ON %s TO %s', {{table_states_literal}}::text, who);
	END LOOP;
END
$q$;
CREATE OR REPLACE FUNCTION {{table_claim}}(
	p_key bigint, p_source pg_catalog.text, p_owner pg_catalog.text, p_lease bigint, p_min_interval bigint, p_lock_timeout bigint,
	p_tick pg_catalog.timestamptz, p_keys pg_catalog.text[], p_key_locks bigint[], p_state boolean,
	OUT locked boolean, OUT isolation pg_catalog.text, OUT db_now pg_catalog.timestamptz, OUT won boolean,
	OUT run_id bigint, OUT run_owner pg_catalog.text, OUT run_started pg_catalog.timestamptz, OUT run_lease pg_catalog.timestamptz,
	OUT retry_after pg_catalog.timestamptz, OUT done_tick pg_catalog.timestamptz, OUT limited_key pg_catalog.text,
	OUT run_state pg_catalog.bytea)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $q$
DECLARE
	c record;
BEGIN
	-- The claim as version 8 decides it: without keys, the overload with
	-- a tick, as a claim naming no key sends it; with keys, the overload
	-- with keys. Each call is a simple expression, which skips the
	-- executor.
	IF p_keys IS NULL THEN
		c := {{table_claim}}(p_key, p_source, p_owner, p_lease, p_min_interval, p_lock_timeout, p_tick);
	ELSE
		c := {{table_claim}}(p_key, p_source, p_owner, p_lease, p_min_interval, p_lock_timeout, p_tick, p_keys, p_key_locks, NULL, NULL);
		limited_key := c.limited_key;
	END IF;
	locked := c.locked;
	isolation := c.isolation;
	db_now := c.db_now;
	won := c.won;
	run_id := c.run_id;
	run_owner := c.run_owner;
	run_started := c.run_started;
	run_lease := c.run_lease;
	retry_after := c.retry_after;
	done_tick := c.done_tick;
	-- A win reads the source state in a statement of its own, so with a
	-- snapshot taken after the advisory lock and after the run it follows
	-- was finished or expired: every save of that run committed before.
	-- A save locks the run row FOR SHARE, so a claim cannot expire a run
	-- while its save is in flight, and a save after the expiry finds the
	-- run no longer running. A lost claim reads nothing more.
	IF won AND p_state THEN
		SELECT s.state INTO run_state FROM {{table_states}} AS s WHERE s.source OPERATOR(pg_catalog.=) p_source;
	END IF;
END
$q$;
COMMENT ON TABLE {{table}} IS 'runclaim schema version 9';

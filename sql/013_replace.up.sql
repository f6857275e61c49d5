-- Replace (ClaimOption Replace, StatusReplaced): a claim that asks the
-- running run of the source to stop, and wins once it has ended.
--   - the runs table gains the request: when it was made, and the token of
--     the claim that made it; the control table gains the reservation that
--     claim holds: its token, the run it asked to stop, and its lease (how
--     long it may go unheard after that run ends). Nullable columns without
--     a default: changes of the catalog only, which the release before
--     never names;
--   - the status may be replaced: the check of version 1 is dropped and
--     one that allows it added NOT VALID (every row holds the older, stricter
--     one; validating would scan the table under this step lock);
--   - an index of the ticks that replaced runs served, which the tick
--     check reads beside the index of version 4 (a replaced run serves its
--     tick), built empty in one scan of the table, as steps 4 and 8 built
--     theirs;
--   - the claim function of sql/claim.sql under the name of this version
--     (the table name with the suffix _claim13), whose last argument, the
--     token, defaults to NULL. That of version 12 stays for the release before,
--     which neither asks nor honours a request.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS stop_requested_at timestamptz, ADD COLUMN IF NOT EXISTS replaced_by text;
ALTER TABLE {{table_control}} ADD COLUMN IF NOT EXISTS reserved_for text, ADD COLUMN IF NOT EXISTS reserved_run bigint,
	ADD COLUMN IF NOT EXISTS reserved_us bigint;
DO $q$
DECLARE
	r record;
	name pg_catalog.text;
BEGIN
	FOR r IN SELECT c.conname FROM pg_catalog.pg_constraint AS c
	          WHERE c.conrelid OPERATOR(pg_catalog.=) {{table_literal}}::pg_catalog.regclass AND c.contype OPERATOR(pg_catalog.=) 'c'
	            AND pg_catalog.strpos(pg_catalog.pg_get_constraintdef(c.oid), 'status') OPERATOR(pg_catalog.>) 0
	            AND pg_catalog.strpos(pg_catalog.pg_get_constraintdef(c.oid), 'replaced') OPERATOR(pg_catalog.=) 0 LOOP
		name := r.conname;
		EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT %I', {{table_literal}}::pg_catalog.text, r.conname);
	END LOOP;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_constraint AS c
	                WHERE c.conrelid OPERATOR(pg_catalog.=) {{table_literal}}::pg_catalog.regclass AND c.contype OPERATOR(pg_catalog.=) 'c'
	                  AND pg_catalog.strpos(pg_catalog.pg_get_constraintdef(c.oid), 'replaced') OPERATOR(pg_catalog.>) 0) THEN
		EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (status IN (''running'', ''succeeded'', ''failed'', ''expired'', ''released'', ''replaced'')) NOT VALID',
			{{table_literal}}::pg_catalog.text, coalesce(name, 'runclaim_status'));
	END IF;
END
$q$;
CREATE INDEX IF NOT EXISTS {{table_replaced}} ON {{table}} (source, tick DESC) WHERE tick IS NOT NULL AND status = 'replaced';
-- The roles that may insert into the runs table (the claimers) may record
-- a reservation: a claim with Replace inserts or updates the control row,
-- and clears it when it wins.
DO $q$
DECLARE
	r record;
BEGIN
	FOR r IN
		SELECT DISTINCT a.grantee
		  FROM pg_catalog.pg_class AS c, LATERAL pg_catalog.aclexplode(c.relacl) AS a
		 WHERE c.oid OPERATOR(pg_catalog.=) {{table_literal}}::pg_catalog.regclass AND a.privilege_type OPERATOR(pg_catalog.=) 'INSERT'
		   AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
	LOOP
		EXECUTE pg_catalog.format('GRANT INSERT (source, reserved_for, reserved_run, reserved_us), UPDATE (reserved_for, reserved_run, reserved_us) ON %s TO %s',
			{{table_control_literal}}::pg_catalog.text,
			CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			     ELSE pg_catalog.quote_ident((SELECT o.rolname FROM pg_catalog.pg_roles AS o WHERE o.oid OPERATOR(pg_catalog.=) r.grantee)) END);
	END LOOP;
END
$q$;
{{claim_body}}
-- The roles that may call the function of version 12 may call this one:
-- the same grants of EXECUTE, and none to PUBLIC unless it had one there.
DO $q$
DECLARE
	old pg_catalog.oid := pg_catalog.to_regprocedure({{claim12_literal}});
	r record;
BEGIN
	IF old IS NULL OR (SELECT p.proacl IS NULL FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) old) THEN
		RETURN;
	END IF;
	EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', {{claim_body_literal}}::pg_catalog.text);
	FOR r IN SELECT a.grantee FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
	          WHERE p.oid OPERATOR(pg_catalog.=) old AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE' LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', {{claim_body_literal}}::pg_catalog.text,
			CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			     ELSE pg_catalog.quote_ident((SELECT o.rolname FROM pg_catalog.pg_roles AS o WHERE o.oid OPERATOR(pg_catalog.=) r.grantee)) END);
	END LOOP;
END
$q$;
COMMENT ON TABLE {{table}} IS 'runclaim schema version 13';

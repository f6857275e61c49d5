-- Paced starts (Limit.MinGap): the keys table gains the least time between
-- two starts of a key, in microseconds, 0 for none. A constant default
-- makes ADD COLUMN a change of the catalog only (no rewrite), and the
-- release before, which does not name the column, keeps any value an
-- operator of this release set. Then the claim function with the body of
-- sql/claim.sql that reads it, under the name of this version: the table
-- name with the suffix _claim12. The function of version 11 stays,
-- unchanged, for the replicas of the release before, which do not pace.
ALTER TABLE {{table_keys}} ADD COLUMN IF NOT EXISTS min_gap_us bigint NOT NULL DEFAULT 0;
{{claim_body_12}}
-- The roles that may call the function of version 11, which the release
-- before calls for every claim, may call this one: the same grants of
-- EXECUTE, and none to PUBLIC unless it had one there.
DO $q$
DECLARE
	old pg_catalog.oid := pg_catalog.to_regprocedure({{claim11_literal}});
	r record;
BEGIN
	IF old IS NULL OR (SELECT p.proacl IS NULL FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) old) THEN
		RETURN;
	END IF;
	EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', {{claim12_literal}}::pg_catalog.text);
	FOR r IN SELECT a.grantee FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
	          WHERE p.oid OPERATOR(pg_catalog.=) old AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE' LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', {{claim12_literal}}::pg_catalog.text,
			CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			     ELSE pg_catalog.quote_ident((SELECT o.rolname FROM pg_catalog.pg_roles AS o WHERE o.oid OPERATOR(pg_catalog.=) r.grantee)) END);
	END LOOP;
END
$q$;
COMMENT ON TABLE {{table}} IS 'runclaim schema version 12';

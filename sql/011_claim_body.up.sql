-- The claim function with the one body of sql/claim.sql, under the name of
-- this version: the table name with the suffix _claim11. The functions of
-- the versions before stay, unchanged, for the replicas of the release
-- before. Creating a function takes no lock on the runs table; only the
-- comment does, briefly.
{{claim_body_11}}
-- The roles that may call the overload of version 9, which the release
-- before calls for every claim, may call this one: the same grants of
-- EXECUTE, and none to PUBLIC unless it had one there.
DO $q$
DECLARE
	old pg_catalog.oid := pg_catalog.to_regprocedure({{claim_v9_literal}});
	r record;
BEGIN
	IF old IS NULL OR (SELECT p.proacl IS NULL FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) old) THEN
		RETURN;
	END IF;
	EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', {{claim11_literal}}::pg_catalog.text);
	FOR r IN SELECT a.grantee FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
	          WHERE p.oid OPERATOR(pg_catalog.=) old AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE' LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', {{claim11_literal}}::pg_catalog.text,
			CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			     ELSE pg_catalog.quote_ident((SELECT o.rolname FROM pg_catalog.pg_roles AS o WHERE o.oid OPERATOR(pg_catalog.=) r.grantee)) END);
	END LOOP;
END
$q$;
COMMENT ON TABLE {{table}} IS 'runclaim schema version 11';

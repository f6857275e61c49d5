-- The function of version 13; those of the versions before stay. The
-- columns, the relaxed check and the index stay too: a claim of version 13
-- in flight may still use them, rows may hold replaced, and the release
-- before reads none of them. Migrate adds what is missing only.
DROP FUNCTION IF EXISTS {{table_claim_body}}(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[], pg_catalog.text);
COMMENT ON TABLE {{table}} IS 'runclaim schema version 12';

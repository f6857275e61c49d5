-- The function of version 11; those of the versions before stay.
DROP FUNCTION IF EXISTS {{table_claim11}}(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[]);
COMMENT ON TABLE {{table}} IS 'runclaim schema version 10';

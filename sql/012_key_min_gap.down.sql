-- The function of version 12, and the column; those of the versions before stay.
DROP FUNCTION IF EXISTS {{table_claim_body}}(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[]);
ALTER TABLE {{table_keys}} DROP COLUMN IF EXISTS min_gap_us;
COMMENT ON TABLE {{table}} IS 'runclaim schema version 11';

DROP FUNCTION IF EXISTS {{table_claim}}(bigint, text, text, bigint, bigint, bigint, timestamptz);
DROP INDEX IF EXISTS {{schema_table_tick}};
ALTER TABLE {{table}} DROP COLUMN IF EXISTS tick;
COMMENT ON TABLE {{table}} IS 'runclaim schema version 3';

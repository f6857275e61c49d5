DROP FUNCTION IF EXISTS {{table_claim}}(bigint, text, text, bigint, bigint, bigint, timestamptz, text[], bigint[], text[], integer[]);
DROP TABLE IF EXISTS {{table_starts}};
DROP TABLE IF EXISTS {{table_keys}};
DROP INDEX IF EXISTS {{schema_table_keyed}};
DROP INDEX IF EXISTS {{schema_table_keyset}};
ALTER TABLE {{table}} DROP COLUMN IF EXISTS keys;
COMMENT ON TABLE {{table}} IS 'runclaim schema version 7';

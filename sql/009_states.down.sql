DROP FUNCTION IF EXISTS {{table_claim}}(bigint, text, text, bigint, bigint, bigint, timestamptz, text[], bigint[], boolean);
DROP TABLE IF EXISTS {{table_states}};
COMMENT ON TABLE {{table}} IS 'runclaim schema version 8';

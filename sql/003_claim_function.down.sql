DROP FUNCTION IF EXISTS {{table_claim}}(bigint, text, text, bigint, bigint, bigint);
COMMENT ON TABLE {{table}} IS 'runclaim schema version 2';

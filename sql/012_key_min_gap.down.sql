-- The function of version 12; those of the versions before stay. The
-- min_gap_us column stays too: a claim of version 12 in flight while this
-- commits may still read it (dropping it would fail that claim, where a
-- dropped function fails none), and the body of version 11 does not read
-- it. Migrate adds it only if it is missing.
DROP FUNCTION IF EXISTS {{table_claim12}}(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[]);
COMMENT ON TABLE {{table}} IS 'runclaim schema version 11';

-- The function of version 11; those of the versions before stay.
DROP FUNCTION IF EXISTS "public"."runclaim_runs_claim11"(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[]);
COMMENT ON TABLE "public"."runclaim_runs" IS 'runclaim schema version 10';

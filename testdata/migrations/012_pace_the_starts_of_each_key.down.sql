-- The function of version 12, and the column; those of the versions before stay.
DROP FUNCTION IF EXISTS "public"."runclaim_runs_claim12"(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[]);
ALTER TABLE "public"."runclaim_runs_keys" DROP COLUMN IF EXISTS min_gap_us;
COMMENT ON TABLE "public"."runclaim_runs" IS 'runclaim schema version 11';

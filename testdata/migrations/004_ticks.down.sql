DROP FUNCTION IF EXISTS "public"."runclaim_runs_claim"(bigint, text, text, bigint, bigint, bigint, timestamptz);
DROP INDEX IF EXISTS "public"."runclaim_runs_tick";
ALTER TABLE "public"."runclaim_runs" DROP COLUMN IF EXISTS tick;
COMMENT ON TABLE "public"."runclaim_runs" IS 'runclaim schema version 3';

DROP FUNCTION IF EXISTS "public"."runclaim_runs_claim"(bigint, text, text, bigint, bigint, bigint, timestamptz, text[], bigint[], text[], integer[]);
DROP TABLE IF EXISTS "public"."runclaim_runs_starts";
DROP TABLE IF EXISTS "public"."runclaim_runs_keys";
DROP INDEX IF EXISTS "public"."runclaim_runs_keyed";
DROP INDEX IF EXISTS "public"."runclaim_runs_keyset";
ALTER TABLE "public"."runclaim_runs" DROP COLUMN IF EXISTS keys;
COMMENT ON TABLE "public"."runclaim_runs" IS 'runclaim schema version 7';

DROP FUNCTION IF EXISTS "public"."runclaim_runs_claim"(bigint, text, text, bigint, bigint, bigint, timestamptz, text[], bigint[], boolean);
DROP TABLE IF EXISTS "public"."runclaim_runs_cursors";
COMMENT ON TABLE "public"."runclaim_runs" IS 'runclaim schema version 8';

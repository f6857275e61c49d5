DROP FUNCTION IF EXISTS "public"."runclaim_runs_claim"(bigint, text, text, bigint, bigint, bigint);
COMMENT ON TABLE "public"."runclaim_runs" IS 'runclaim schema version 2';

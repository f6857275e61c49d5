ALTER TABLE "public"."runclaim_runs" DROP COLUMN IF EXISTS min_interval;
COMMENT ON TABLE "public"."runclaim_runs" IS 'runclaim schema version 1';

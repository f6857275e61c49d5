ALTER TABLE "public"."runclaim_runs" ADD COLUMN IF NOT EXISTS min_interval interval NOT NULL DEFAULT '0';
COMMENT ON TABLE "public"."runclaim_runs" IS 'runclaim schema version 2';

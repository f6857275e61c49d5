DROP TABLE IF EXISTS "public"."runclaim_runs";

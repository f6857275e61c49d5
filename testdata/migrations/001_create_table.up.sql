CREATE TABLE IF NOT EXISTS "public"."runclaim_runs" (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	source       text NOT NULL,
	status       text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'expired', 'released')),
	owner        text NOT NULL,
	started_at   timestamptz NOT NULL,
	lease_until  timestamptz NOT NULL,
	heartbeat_at timestamptz NOT NULL,
	finished_at  timestamptz,
	error        text
);
CREATE UNIQUE INDEX IF NOT EXISTS "runclaim_runs_running" ON "public"."runclaim_runs" (source) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS "runclaim_runs_history" ON "public"."runclaim_runs" (source, started_at DESC);
COMMENT ON TABLE "public"."runclaim_runs" IS 'runclaim schema version 1';

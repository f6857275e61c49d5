CREATE TABLE IF NOT EXISTS {{table}} (
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
CREATE UNIQUE INDEX IF NOT EXISTS {{table_running}} ON {{table}} (source) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS {{table_history}} ON {{table}} (source, started_at DESC);
COMMENT ON TABLE {{table}} IS 'runclaim schema version 1';

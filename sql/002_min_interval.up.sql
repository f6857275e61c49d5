ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS min_interval interval NOT NULL DEFAULT '0';
COMMENT ON TABLE {{table}} IS 'runclaim schema version 2';

ALTER TABLE {{table}} DROP COLUMN IF EXISTS min_interval;
COMMENT ON TABLE {{table}} IS 'runclaim schema version 1';

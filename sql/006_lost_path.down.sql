CREATE OR REPLACE FUNCTION {{table_claim}}(
	p_key bigint, p_source text, p_owner text, p_lease bigint, p_min_interval bigint, p_lock_timeout bigint,
	p_tick timestamptz,
	OUT locked boolean, OUT isolation text, OUT db_now timestamptz, OUT won boolean,
	OUT run_id bigint, OUT run_owner text, OUT run_started timestamptz, OUT run_lease timestamptz,
	OUT retry_after timestamptz, OUT done_tick timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $q$
DECLARE
	ignored text;
	paused boolean;
	pause_end timestamptz;
	note text;
	triggered boolean;
	served_tick timestamptz := p_tick;
BEGIN
	locked := false;
	won := false;
	IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
		isolation := pg_catalog.current_setting('transaction_isolation');
		RETURN;
	END IF;
	IF pg_catalog.current_setting('lock_timeout') = '0'
	   OR pg_catalog.current_setting('lock_timeout')::interval >= p_lock_timeout * interval '1 millisecond' THEN
		ignored := pg_catalog.set_config('lock_timeout', p_lock_timeout::text, true);
	END IF;
	locked := pg_catalog.pg_try_advisory_xact_lock(p_key);
	SELECT c.id, c.owner, c.started_at, c.lease_until,
	       k.paused_at IS NOT NULL AND (k.pause_until IS NULL OR k.pause_until > pg_catalog.clock_timestamp()),
	       k.pause_until, k.pause_note, k.triggered_at IS NOT NULL
	  INTO run_id, run_owner, run_started, run_lease, paused, pause_end, note, triggered
	  FROM (SELECT) AS one
	  LEFT JOIN {{table}} AS c ON c.source = p_source AND c.status = 'running'
	  LEFT JOIN {{table_control}} AS k ON k.source = p_source;
	db_now := pg_catalog.clock_timestamp();
	IF paused THEN
		locked := false;
		run_id := NULL;
		run_owner := note;
		run_started := NULL;
		run_lease := NULL;
		retry_after := pause_end;
		RETURN;
	END IF;
	IF NOT locked OR run_lease > db_now THEN
		RETURN;
	END IF;
	IF p_tick IS NOT NULL THEN
		SELECT d.tick INTO done_tick
		  FROM {{table}} AS d
		 WHERE d.source = p_source AND d.tick IS NOT NULL AND d.status IN ('running', 'succeeded', 'failed')
		   AND d.id IS DISTINCT FROM run_id
		 ORDER BY d.tick DESC LIMIT 1;
		IF done_tick >= p_tick THEN
			IF triggered IS NOT TRUE THEN
				RETURN;
			END IF;
			served_tick := NULL;
		END IF;
	END IF;
	SELECT l.started_at + greatest(l.min_interval, p_min_interval * interval '1 microsecond') INTO retry_after
	  FROM {{table}} AS l WHERE l.source = p_source ORDER BY l.started_at DESC LIMIT 1;
	db_now := pg_catalog.clock_timestamp();
	IF retry_after > db_now AND triggered IS NOT TRUE THEN
		RETURN;
	END IF;
	IF run_id IS NOT NULL THEN
		UPDATE {{table}} AS e SET status = 'expired', finished_at = pg_catalog.clock_timestamp()
		WHERE e.id IN (
			SELECT x.id FROM {{table}} AS x
			WHERE x.source = p_source AND x.status = 'running' AND x.lease_until <= pg_catalog.clock_timestamp()
			FOR UPDATE SKIP LOCKED);
		IF NOT FOUND THEN
			SELECT c.id, c.owner, c.started_at, c.lease_until
			  INTO run_id, run_owner, run_started, run_lease
			  FROM {{table}} AS c WHERE c.source = p_source AND c.status = 'running';
			db_now := pg_catalog.clock_timestamp();
			IF run_id IS NOT NULL THEN
				RETURN;
			END IF;
		END IF;
	END IF;
	IF triggered THEN
		UPDATE {{table_control}} AS u SET triggered_at = NULL WHERE u.source = p_source AND u.triggered_at IS NOT NULL;
	END IF;
	db_now := pg_catalog.clock_timestamp();
	INSERT INTO {{table}} AS i (source, status, owner, started_at, lease_until, heartbeat_at, min_interval, tick)
	VALUES (p_source, 'running', p_owner, db_now, db_now + p_lease * interval '1 microsecond', db_now,
	        p_min_interval * interval '1 microsecond', served_tick)
	RETURNING i.id, i.started_at, i.lease_until INTO run_id, run_started, run_lease;
	run_owner := NULL;
	won := true;
END
$q$;
CREATE OR REPLACE FUNCTION {{table_claim}}(
	p_key bigint, p_source text, p_owner text, p_lease bigint, p_min_interval bigint, p_lock_timeout bigint,
	OUT locked boolean, OUT isolation text, OUT db_now timestamptz, OUT won boolean,
	OUT run_id bigint, OUT run_owner text, OUT run_started timestamptz, OUT run_lease timestamptz,
	OUT retry_after timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $q$
BEGIN
	SELECT c.locked, c.isolation, c.db_now, c.won, c.run_id, c.run_owner, c.run_started, c.run_lease, c.retry_after
	  INTO locked, isolation, db_now, won, run_id, run_owner, run_started, run_lease, retry_after
	  FROM {{table_claim}}(p_key, p_source, p_owner, p_lease, p_min_interval, p_lock_timeout, NULL::timestamptz) AS c;
END
$q$;
COMMENT ON TABLE {{table}} IS 'runclaim schema version 5';

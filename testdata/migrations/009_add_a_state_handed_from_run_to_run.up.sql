CREATE TABLE IF NOT EXISTS "public"."runclaim_runs_cursors" (
	source text PRIMARY KEY,
	state bytea NOT NULL,
	run_id bigint,
	saved_at timestamptz NOT NULL
);
DO $q$
DECLARE
	r record;
	who text;
BEGIN
	FOR r IN
		SELECT DISTINCT a.grantee
		  FROM pg_catalog.pg_class AS c, LATERAL pg_catalog.aclexplode(c.relacl) AS a
		 WHERE c.oid = $n$"public"."runclaim_runs"$n$::regclass AND a.privilege_type = 'INSERT' AND a.grantee <> c.relowner
	LOOP
		who := CASE WHEN r.grantee = 0 THEN 'PUBLIC'
		            ELSE pg_catalog.quote_ident((SELECT o.rolname FROM pg_catalog.pg_roles AS o WHERE o.oid = r.grantee)) END;
		EXECUTE pg_catalog.format('GRANT SELECT, INSERT (source, state, run_id, saved_at), UPDATE (state, run_id, saved_at) ON %s TO %s', $n$"public"."runclaim_runs_cursors"$n$::text, who);
	END LOOP;
END
$q$;
CREATE OR REPLACE FUNCTION "public"."runclaim_runs_claim"(
	p_key bigint, p_source pg_catalog.text, p_owner pg_catalog.text, p_lease bigint, p_min_interval bigint, p_lock_timeout bigint,
	p_tick pg_catalog.timestamptz, p_keys pg_catalog.text[], p_key_locks bigint[], p_state boolean,
	OUT locked boolean, OUT isolation pg_catalog.text, OUT db_now pg_catalog.timestamptz, OUT won boolean,
	OUT run_id bigint, OUT run_owner pg_catalog.text, OUT run_started pg_catalog.timestamptz, OUT run_lease pg_catalog.timestamptz,
	OUT retry_after pg_catalog.timestamptz, OUT done_tick pg_catalog.timestamptz, OUT limited_key pg_catalog.text,
	OUT run_state pg_catalog.bytea)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $q$
DECLARE
	kc record;
	ignored pg_catalog.text;
	paused boolean;
	pause_end pg_catalog.timestamptz;
	note pg_catalog.text;
	triggered boolean;
	served_tick pg_catalog.timestamptz := p_tick;
	trigger_at pg_catalog.timestamptz;
BEGIN
	-- A claim naming keys: the overload with keys decides (version 8),
	-- called as a simple expression, which skips the executor.
	IF p_keys IS NOT NULL THEN
		kc := "public"."runclaim_runs_claim"(p_key, p_source, p_owner, p_lease, p_min_interval, p_lock_timeout, p_tick, p_keys, p_key_locks, NULL, NULL);
		locked := kc.locked;
		isolation := kc.isolation;
		db_now := kc.db_now;
		won := kc.won;
		run_id := kc.run_id;
		run_owner := kc.run_owner;
		run_started := kc.run_started;
		run_lease := kc.run_lease;
		retry_after := kc.retry_after;
		done_tick := kc.done_tick;
		limited_key := kc.limited_key;
		IF won AND p_state THEN
			SELECT s.state INTO run_state FROM "public"."runclaim_runs_cursors" AS s WHERE s.source OPERATOR(pg_catalog.=) p_source;
		END IF;
		RETURN;
	END IF;
	-- A claim naming no key: the body of the overload with a tick, as
	-- version 7 wrote it, rather than a call of it, so that such a claim
	-- costs no second call frame, won or lost. Every skip returns from
	-- it; a win reads the source state at the end.
	locked := false;
	won := false;
	-- A server that cannot write (a standby, a read-only default) would
	-- answer a claim of a held source from what it read, which may be
	-- stale: refuse every claim there instead (version 7).
	IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
		RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction',
			MESSAGE = 'runclaim: cannot claim on a server that cannot write (a standby, or default_transaction_read_only): its answer could come from stale data';
	END IF;
	IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
		isolation := pg_catalog.current_setting('transaction_isolation');
		RETURN;
	END IF;
	IF pg_catalog.current_setting('lock_timeout') OPERATOR(pg_catalog.=) '0'
	   OR pg_catalog.current_setting('lock_timeout')::interval OPERATOR(pg_catalog.>=) (p_lock_timeout OPERATOR(pg_catalog.*) interval '1 millisecond') THEN
		ignored := pg_catalog.set_config('lock_timeout', p_lock_timeout::pg_catalog.text, true);
	END IF;
	-- The source's running run and its pause, read before the advisory
	-- lock: a pause or a live holder is the answer as of this statement's
	-- snapshot, and takes no lock. Anything else is read again under it.
	SELECT c.id, c.owner, c.started_at, c.lease_until,
	       k.paused_at IS NOT NULL AND (k.pause_until IS NULL OR k.pause_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()),
	       k.pause_until, k.pause_note, k.triggered_at IS NOT NULL, k.triggered_at
	  INTO run_id, run_owner, run_started, run_lease, paused, pause_end, note, triggered, trigger_at
	  FROM (SELECT) AS one
	  LEFT JOIN "public"."runclaim_runs" AS c ON c.source OPERATOR(pg_catalog.=) p_source AND c.status OPERATOR(pg_catalog.=) 'running'
	  LEFT JOIN "public"."runclaim_runs_control" AS k ON k.source OPERATOR(pg_catalog.=) p_source;
	db_now := pg_catalog.clock_timestamp();
	IF NOT paused AND run_lease OPERATOR(pg_catalog.>) db_now THEN
		RETURN;
	END IF;
	IF NOT paused THEN
		locked := pg_catalog.pg_try_advisory_xact_lock(p_key);
		IF NOT locked THEN
			RETURN;
		END IF;
		SELECT c.id, c.owner, c.started_at, c.lease_until,
		       k.paused_at IS NOT NULL AND (k.pause_until IS NULL OR k.pause_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()),
		       k.pause_until, k.pause_note, k.triggered_at IS NOT NULL, k.triggered_at
		  INTO run_id, run_owner, run_started, run_lease, paused, pause_end, note, triggered, trigger_at
		  FROM (SELECT) AS one
		  LEFT JOIN "public"."runclaim_runs" AS c ON c.source OPERATOR(pg_catalog.=) p_source AND c.status OPERATOR(pg_catalog.=) 'running'
		  LEFT JOIN "public"."runclaim_runs_control" AS k ON k.source OPERATOR(pg_catalog.=) p_source;
		db_now := pg_catalog.clock_timestamp();
	END IF;
	IF paused THEN
		locked := false;
		run_id := NULL;
		run_owner := note;
		run_started := NULL;
		run_lease := NULL;
		retry_after := pause_end;
		RETURN;
	END IF;
	IF run_lease OPERATOR(pg_catalog.>) db_now THEN
		RETURN;
	END IF;
	IF p_tick IS NOT NULL THEN
		SELECT d.tick INTO done_tick
		  FROM "public"."runclaim_runs" AS d
		 WHERE d.source OPERATOR(pg_catalog.=) p_source AND d.tick IS NOT NULL
		   AND (d.status OPERATOR(pg_catalog.=) 'running' OR d.status OPERATOR(pg_catalog.=) 'succeeded' OR d.status OPERATOR(pg_catalog.=) 'failed')
		   AND (run_id IS NULL OR d.id OPERATOR(pg_catalog.<>) run_id)
		 ORDER BY d.tick DESC LIMIT 1;
		IF done_tick OPERATOR(pg_catalog.>=) p_tick THEN
			IF triggered IS NOT TRUE THEN
				RETURN;
			END IF;
			served_tick := NULL;
		END IF;
	END IF;
	SELECT l.started_at OPERATOR(pg_catalog.+) greatest(l.min_interval, p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond') INTO retry_after
	  FROM "public"."runclaim_runs" AS l WHERE l.source OPERATOR(pg_catalog.=) p_source ORDER BY l.started_at DESC LIMIT 1;
	db_now := pg_catalog.clock_timestamp();
	IF retry_after OPERATOR(pg_catalog.>) db_now AND triggered IS NOT TRUE THEN
		RETURN;
	END IF;
	IF run_id IS NOT NULL THEN
		UPDATE "public"."runclaim_runs" AS e SET status = 'expired', finished_at = pg_catalog.clock_timestamp()
		WHERE e.id OPERATOR(pg_catalog.=) ANY (
			SELECT x.id FROM "public"."runclaim_runs" AS x
			WHERE x.source OPERATOR(pg_catalog.=) p_source AND x.status OPERATOR(pg_catalog.=) 'running'
			  AND x.lease_until OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
			FOR UPDATE SKIP LOCKED);
		IF NOT FOUND THEN
			SELECT c.id, c.owner, c.started_at, c.lease_until
			  INTO run_id, run_owner, run_started, run_lease
			  FROM "public"."runclaim_runs" AS c WHERE c.source OPERATOR(pg_catalog.=) p_source AND c.status OPERATOR(pg_catalog.=) 'running';
			db_now := pg_catalog.clock_timestamp();
			IF run_id IS NOT NULL THEN
				RETURN;
			END IF;
			-- The lapsed run was not expired here but ended meanwhile: its
			-- holder, whose Finish read the clock within the lease,
			-- committed between the expiry and this read. A run it
			-- recorded succeeded or failed serves its tick, which the
			-- check above left out: check the tick again (version 7).
			IF served_tick IS NOT NULL THEN
				SELECT d.tick INTO done_tick
				  FROM "public"."runclaim_runs" AS d
				 WHERE d.source OPERATOR(pg_catalog.=) p_source AND d.tick IS NOT NULL
				   AND (d.status OPERATOR(pg_catalog.=) 'running' OR d.status OPERATOR(pg_catalog.=) 'succeeded' OR d.status OPERATOR(pg_catalog.=) 'failed')
				 ORDER BY d.tick DESC LIMIT 1;
				IF done_tick OPERATOR(pg_catalog.>=) p_tick THEN
					IF triggered IS NOT TRUE THEN
						RETURN;
					END IF;
					served_tick := NULL;
				END IF;
			END IF;
		END IF;
	END IF;
	IF triggered THEN
		UPDATE "public"."runclaim_runs_control" AS u SET triggered_at = NULL
		 WHERE u.source OPERATOR(pg_catalog.=) p_source AND u.triggered_at IS NOT NULL;
	END IF;
	db_now := pg_catalog.clock_timestamp();
	INSERT INTO "public"."runclaim_runs" AS i (source, status, owner, started_at, lease_until, heartbeat_at, min_interval, tick)
	VALUES (p_source, 'running', p_owner, db_now,
	        db_now OPERATOR(pg_catalog.+) (p_lease OPERATOR(pg_catalog.*) interval '1 microsecond'), db_now,
	        p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond', served_tick)
	RETURNING i.id, i.started_at, i.lease_until INTO run_id, run_started, run_lease;
	-- A win says whether it used a trigger, and the time of it, so
	-- that a caller that gave up on the claim can give the trigger back
	-- when it deletes the run (version 7): run_owner 'trigger' and
	-- retry_after the time. Releases before read neither on a win.
	run_owner := NULL;
	retry_after := NULL;
	IF triggered THEN
		run_owner := 'trigger';
		retry_after := trigger_at;
	END IF;
	won := true;
	-- A win reads the source state in a statement of its own, so with a
	-- snapshot taken after the advisory lock and after the run it follows
	-- was finished or expired: every save of that run committed before.
	-- A save locks the run row FOR SHARE, so a claim cannot expire a run
	-- while its save is in flight, and a save after the expiry finds the
	-- run no longer running. A lost claim reads nothing more.
	IF p_state THEN
		SELECT s.state INTO run_state FROM "public"."runclaim_runs_cursors" AS s WHERE s.source OPERATOR(pg_catalog.=) p_source;
	END IF;
END
$q$;
COMMENT ON TABLE "public"."runclaim_runs" IS 'runclaim schema version 9';

-- Replace (ClaimOption Replace, StatusReplaced): a claim that asks the
-- running run of the source to stop, and wins once it has ended.
--   - the runs table gains the request: when it was made, and the token of
--     the claim that made it; the control table gains the reservation that
--     claim holds: its token, the run it asked to stop, and its lease (how
--     long it may go unheard after that run ends). Nullable columns without
--     a default: changes of the catalog only, which the release before
--     never names;
--   - the status may be replaced: the check of version 1 is dropped and
--     one that allows it added NOT VALID (every row holds the older, stricter
--     one; validating would scan the table under this step lock);
--   - an index of the ticks that replaced runs served, which the tick
--     check reads beside the index of version 4 (a replaced run serves its
--     tick), built empty in one scan of the table, as steps 4 and 8 built
--     theirs;
--   - the claim function of sql/claim.sql under the name of this version
--     (the table name with the suffix _claim13), whose last argument, the
--     token, defaults to NULL. That of version 12 stays for the release before,
--     which neither asks nor honours a request.
ALTER TABLE "public"."runclaim_runs" ADD COLUMN IF NOT EXISTS stop_requested_at timestamptz, ADD COLUMN IF NOT EXISTS replaced_by text;
ALTER TABLE "public"."runclaim_runs_control" ADD COLUMN IF NOT EXISTS reserved_for text, ADD COLUMN IF NOT EXISTS reserved_run bigint,
	ADD COLUMN IF NOT EXISTS reserved_us bigint;
DO $q$
DECLARE
	r record;
	name pg_catalog.text;
BEGIN
	FOR r IN SELECT c.conname FROM pg_catalog.pg_constraint AS c
	          WHERE c.conrelid OPERATOR(pg_catalog.=) $n$"public"."runclaim_runs"$n$::pg_catalog.regclass AND c.contype OPERATOR(pg_catalog.=) 'c'
	            AND pg_catalog.strpos(pg_catalog.pg_get_constraintdef(c.oid), 'status') OPERATOR(pg_catalog.>) 0
	            AND pg_catalog.strpos(pg_catalog.pg_get_constraintdef(c.oid), 'replaced') OPERATOR(pg_catalog.=) 0 LOOP
		name := r.conname;
		EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT %I', $n$"public"."runclaim_runs"$n$::pg_catalog.text, r.conname);
	END LOOP;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_constraint AS c
	                WHERE c.conrelid OPERATOR(pg_catalog.=) $n$"public"."runclaim_runs"$n$::pg_catalog.regclass AND c.contype OPERATOR(pg_catalog.=) 'c'
	                  AND pg_catalog.strpos(pg_catalog.pg_get_constraintdef(c.oid), 'replaced') OPERATOR(pg_catalog.>) 0) THEN
		EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (status IN (''running'', ''succeeded'', ''failed'', ''expired'', ''released'', ''replaced'')) NOT VALID',
			$n$"public"."runclaim_runs"$n$::pg_catalog.text, coalesce(name, 'runclaim_status'));
	END IF;
END
$q$;
CREATE INDEX IF NOT EXISTS "runclaim_runs_replcd" ON "public"."runclaim_runs" (source, tick DESC) WHERE tick IS NOT NULL AND status = 'replaced';
-- The roles that may insert into the runs table (the claimers) may record
-- a reservation: a claim with Replace inserts or updates the control row,
-- and clears it when it wins.
DO $q$
DECLARE
	r record;
BEGIN
	FOR r IN
		SELECT DISTINCT a.grantee
		  FROM pg_catalog.pg_class AS c, LATERAL pg_catalog.aclexplode(c.relacl) AS a
		 WHERE c.oid OPERATOR(pg_catalog.=) $n$"public"."runclaim_runs"$n$::pg_catalog.regclass AND a.privilege_type OPERATOR(pg_catalog.=) 'INSERT'
		   AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
	LOOP
		EXECUTE pg_catalog.format('GRANT INSERT (source, reserved_for, reserved_run, reserved_us), UPDATE (reserved_for, reserved_run, reserved_us) ON %s TO %s',
			$n$"public"."runclaim_runs_control"$n$::pg_catalog.text,
			CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			     ELSE pg_catalog.quote_ident((SELECT o.rolname FROM pg_catalog.pg_roles AS o WHERE o.oid OPERATOR(pg_catalog.=) r.grantee)) END);
	END LOOP;
END
$q$;
-- The claim: the one body of the claim function, which every claim calls
-- (a single claim once, a ClaimMany once per source), read top to bottom.
-- It is not a schema step: Migrate creates it, after the steps, under a
-- name that carries the schema version that introduced this body (the
-- table name with the suffix claimBodySuffix),
-- and a new body is a new version with a new name, so that the replicas
-- of the release before keep calling theirs. The released body of each
-- version is frozen: TestMigrationsGolden holds this file to its copy in
-- testdata/migrations while the version is the current one. See
-- CONTRIBUTING.md.
--
-- The decision, in order. Every answer before the insert has written
-- nothing:
--   1. a server that cannot write: an error; an isolation level other
--      than READ COMMITTED: no lock, nothing read, the level reported (the
--      store sends the call again inside BEGIN ISOLATION LEVEL READ
--      COMMITTED ... COMMIT);
--   2. the locks of the keys, if any, waiting, ascending (only the first
--      call of a ClaimMany takes those of the whole batch);
--   3. the advisory lock of the source, tried, never waited for; then one
--      read of the source: its running run, its pause, trigger and
--      reservation, and the next start the minimum interval allows (from
--      its latest start). A pause answers first, then a live holder (a
--      claim with Replace first asks it to stop, version 13, unless the
--      tick is served or the interval has not passed), then a busy lock
--      (another claim in flight), then a reservation for another claim
--      with Replace;
--   4. a tick served (only for a claim that names a tick), then too soon
--      by the interval; a pending trigger overrides both;
--   5. the keys (only for a claim that names keys): a cooldown, then
--      MaxRunning, then MaxStarts, then MinGap (version 12);
--   6. the lapsed holder expired, or, if another transaction holds it,
--      reported;
--   7. the trigger and the reservation used up, the run inserted (with
--      the starts of its keys), and the state of the source read (only
--      when asked).
-- So a claim that names no key, serves no tick and wants no state pays
-- for none of them: one lock, one read, one insert.
--
-- Arguments: the advisory key of the source, the source, the owner, the lease
-- and the minimum interval of the claimer in microseconds, the bound on a
-- table lock wait in milliseconds, the tick (NULL for a plain claim), the
-- keys in the order named and their advisory locks ascending (NULL for
-- none; a ClaimMany sends the locks of all its keys to its first call
-- only), whether to return the state of a win, and, for a ClaimMany that
-- names keys, the keys of the whole batch, each once, and how many of its
-- sources name each; and, for a claim with Replace, its token (version 13;
-- NULL by default, so that the arguments of the version before call this
-- function too).
--
-- Results: locked, whether it took the advisory lock of the source; isolation,
-- the level it refused to claim under (else NULL); db_now, the database
-- clock when it decided; won; run_*, the run it inserted (without the
-- owner, which the caller knows), or else the running run of the source, if
-- any; retry_after, the next start the interval allows when that was the
-- answer. A win that used up a trigger returns run_owner trigger and
-- retry_after its time. A pause returns locked false, no run, its note as
-- run_owner and its end as retry_after. A key with no room returns
-- limited_key, retry_after when it has room, and the note of a cooldown as
-- run_owner. done_tick is the latest tick served, when a tick claim read
-- it; run_state the state of a win, when asked, NULL if none.
CREATE OR REPLACE FUNCTION "public"."runclaim_runs_claim13"(
	p_key bigint, p_source pg_catalog.text, p_owner pg_catalog.text, p_lease bigint, p_min_interval bigint, p_lock_timeout bigint,
	p_tick pg_catalog.timestamptz, p_keys pg_catalog.text[], p_key_locks bigint[], p_state boolean,
	p_batch_keys pg_catalog.text[], p_batch_counts integer[], p_replace pg_catalog.text DEFAULT NULL,
	OUT locked boolean, OUT isolation pg_catalog.text, OUT db_now pg_catalog.timestamptz, OUT won boolean,
	OUT run_id bigint, OUT run_owner pg_catalog.text, OUT run_started pg_catalog.timestamptz, OUT run_lease pg_catalog.timestamptz,
	OUT retry_after pg_catalog.timestamptz, OUT done_tick pg_catalog.timestamptz, OUT limited_key pg_catalog.text,
	OUT run_state pg_catalog.bytea)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $q$
DECLARE
	ignored pg_catalog.text;
	paused boolean;
	pause_end pg_catalog.timestamptz;
	note pg_catalog.text;
	triggered boolean;
	served_tick pg_catalog.timestamptz := p_tick;
	trigger_at pg_catalog.timestamptz;
	k pg_catalog.text;
	lk bigint;
	cool_until pg_catalog.timestamptz;
	cool_note pg_catalog.text;
	running_now bigint;
	first_end pg_catalog.timestamptz;
	key_retry pg_catalog.timestamptz;
	lim_running integer;
	nth_start pg_catalog.timestamptz;
	lim_starts integer;
	per_us bigint;
	gap_us bigint;
	last_start pg_catalog.timestamptz;
	room_running integer;
	room_starts integer;
	guc pg_catalog.text;
	cached pg_catalog.text;
	tag pg_catalog.text;
	fast boolean := false;
	pre_state pg_catalog.bytea;
	state_read boolean := false;
	i integer;
	holder_by pg_catalog.text;
	holder_interval pg_catalog.interval;
	res_for pg_catalog.text;
	res_us bigint;
	res_end pg_catalog.timestamptz;
BEGIN
	locked := false;
	won := false;
	-- 1. A server that cannot write (a standby, a read-only default) would
	-- answer a claim of a held source from what it read, which may be
	-- stale: refuse every claim there instead.
	IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
		RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction',
			MESSAGE = 'runclaim: cannot claim on a server that cannot write (a standby, or default_transaction_read_only): its answer could come from stale data';
	END IF;
	-- Under another isolation level the snapshot of the read would
	-- predate the lock.
	IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
		isolation := pg_catalog.current_setting('transaction_isolation');
		RETURN;
	END IF;
	-- The bound on a wait for a lock on the table (DDL, VACUUM FULL), or
	-- that of the session if it is shorter, before anything touches it.
	IF pg_catalog.current_setting('lock_timeout') OPERATOR(pg_catalog.=) '0'
	   OR pg_catalog.current_setting('lock_timeout')::interval OPERATOR(pg_catalog.>=) (p_lock_timeout OPERATOR(pg_catalog.*) interval '1 millisecond') THEN
		ignored := pg_catalog.set_config('lock_timeout', p_lock_timeout::pg_catalog.text, true);
	END IF;
	-- 2. The locks of the keys, before anything is read, ascending (two
	-- claims never wait on each other), each wait bounded by lock_timeout.
	-- A claim that finds a key busy waits for the claim that holds it to
	-- commit, then counts what it committed: never more than the limit
	-- wins, and a claim that finds room wins. The locks are advisory, so a
	-- claim skipped writes nothing, not even a row lock.
	IF p_key_locks IS NOT NULL THEN
		FOREACH lk IN ARRAY p_key_locks LOOP
			ignored := pg_catalog.pg_advisory_xact_lock(lk)::pg_catalog.text;
		END LOOP;
		-- The first call of a ClaimMany with keys: whether the batch is
		-- fast is not known yet (see 5).
		IF p_batch_keys IS NOT NULL THEN
			ignored := pg_catalog.set_config('runclaim.batch', '', true);
		END IF;
	END IF;
	-- 3. The lock of the source, tried, then one read of the source, whose
	-- snapshot (that of the statement, under READ COMMITTED) is taken after
	-- the lock: it sees every run committed before the lock was taken. A
	-- claim wins only on what it read under the lock. Without a live
	-- holder, the same statement reads the next start the interval allows
	-- and, when asked, the state of the source (a CASE evaluates its
	-- subquery only then, so a loss to a live holder does not pay for
	-- them). The state read here is the one the win returns unless the
	-- claim expires a lapsed run below: every save of a run committed
	-- before its row stopped running, as a save holds the row FOR SHARE
	-- and a finish or an expiry updates it.
	locked := pg_catalog.pg_try_advisory_xact_lock(p_key);
	SELECT c.id, c.owner, c.started_at, c.lease_until,
	       k.paused_at IS NOT NULL AND (k.pause_until IS NULL OR k.pause_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()),
	       k.pause_until, k.pause_note, k.triggered_at IS NOT NULL, k.triggered_at,
	       CASE WHEN c.id IS NULL OR c.lease_until OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() THEN
	           (SELECT l.started_at OPERATOR(pg_catalog.+) greatest(l.min_interval, p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond')
	             FROM "public"."runclaim_runs" AS l WHERE l.source OPERATOR(pg_catalog.=) p_source ORDER BY l.started_at DESC LIMIT 1) END,
	       CASE WHEN p_state AND c.id IS NULL THEN
	           (SELECT s.state FROM "public"."runclaim_runs_cursors" AS s WHERE s.source OPERATOR(pg_catalog.=) p_source) END,
	       p_state AND c.id IS NULL,
	       c.replaced_by, c.min_interval, k.reserved_for, k.reserved_us,
	       -- The run of a reservation, if it is still the latest of the source, and
	       -- when it ended; only where there is a reservation and no live
	       -- holder, so that no other claim pays for it.
	       CASE WHEN k.reserved_for IS NOT NULL AND (c.id IS NULL OR c.lease_until OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()) THEN
	           (SELECT CASE WHEN l.id OPERATOR(pg_catalog.=) k.reserved_run THEN
	                       CASE WHEN l.status OPERATOR(pg_catalog.=) 'running' OR l.status OPERATOR(pg_catalog.=) 'expired' THEN l.lease_until ELSE l.finished_at END END
	             FROM "public"."runclaim_runs" AS l WHERE l.source OPERATOR(pg_catalog.=) p_source ORDER BY l.started_at DESC LIMIT 1) END
	  INTO run_id, run_owner, run_started, run_lease, paused, pause_end, note, triggered, trigger_at, retry_after, pre_state, state_read,
	       holder_by, holder_interval, res_for, res_us, res_end
	  FROM (SELECT) AS one
	  LEFT JOIN "public"."runclaim_runs" AS c ON c.source OPERATOR(pg_catalog.=) p_source AND c.status OPERATOR(pg_catalog.=) 'running'
	  LEFT JOIN "public"."runclaim_runs_control" AS k ON k.source OPERATOR(pg_catalog.=) p_source;
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
	IF run_lease OPERATOR(pg_catalog.>) db_now OR NOT locked THEN
		-- A live holder, or another claim in flight. The holder, if any,
		-- is the answer; the interval is not.
		retry_after := NULL;
		-- A claim with Replace (version 13) asks a live holder that no
		-- other claim has asked yet to stop, under the source lock, and
		-- reserves the source for itself: it wins once the holder has
		-- ended. A served tick and the interval skip it at once, as they
		-- would skip it without a holder; it asks nothing then.
		IF p_replace IS NOT NULL AND locked AND run_lease OPERATOR(pg_catalog.>) db_now AND holder_by IS NULL THEN
			IF p_tick IS NOT NULL THEN
				SELECT pg_catalog.max(x.tick) INTO done_tick FROM (
					(SELECT d.tick FROM "public"."runclaim_runs" AS d
					  WHERE d.source OPERATOR(pg_catalog.=) p_source AND d.tick IS NOT NULL
					    AND (d.status OPERATOR(pg_catalog.=) 'running' OR d.status OPERATOR(pg_catalog.=) 'succeeded' OR d.status OPERATOR(pg_catalog.=) 'failed')
					  ORDER BY d.tick DESC LIMIT 1)
					UNION ALL
					(SELECT d.tick FROM "public"."runclaim_runs" AS d
					  WHERE d.source OPERATOR(pg_catalog.=) p_source AND d.tick IS NOT NULL AND d.status OPERATOR(pg_catalog.=) 'replaced'
					  ORDER BY d.tick DESC LIMIT 1)) AS x;
				IF done_tick OPERATOR(pg_catalog.>=) p_tick AND triggered IS NOT TRUE THEN
					run_id := NULL;
					run_owner := NULL;
					run_started := NULL;
					run_lease := NULL;
					RETURN;
				END IF;
			END IF;
			IF run_started OPERATOR(pg_catalog.+) greatest(holder_interval, p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond') OPERATOR(pg_catalog.>) db_now
			   AND triggered IS NOT TRUE THEN
				retry_after := run_started OPERATOR(pg_catalog.+) greatest(holder_interval, p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond');
				run_id := NULL;
				run_owner := NULL;
				run_started := NULL;
				run_lease := NULL;
				RETURN;
			END IF;
			UPDATE "public"."runclaim_runs" AS q SET stop_requested_at = db_now, replaced_by = p_replace
			 WHERE q.id OPERATOR(pg_catalog.=) run_id AND q.status OPERATOR(pg_catalog.=) 'running' AND q.replaced_by IS NULL;
			INSERT INTO "public"."runclaim_runs_control" AS u (source, reserved_for, reserved_run, reserved_us) VALUES (p_source, p_replace, run_id, p_lease)
			ON CONFLICT (source) DO UPDATE SET reserved_for = EXCLUDED.reserved_for, reserved_run = EXCLUDED.reserved_run, reserved_us = EXCLUDED.reserved_us;
		END IF;
		RETURN;
	END IF;
	-- Reserved for another claim with Replace (version 13): while the run
	-- it asked to stop is the latest of the source, until its end (its
	-- finish, or its lease end) and the replacing lease after it, so
	-- that a replacer that never comes back holds the source no longer. A
	-- run started since ends the reservation.
	IF res_for IS NOT NULL AND (p_replace IS NULL OR res_for OPERATOR(pg_catalog.<>) p_replace)
	   AND res_end OPERATOR(pg_catalog.+) (res_us OPERATOR(pg_catalog.*) interval '1 microsecond') OPERATOR(pg_catalog.>) db_now THEN
		locked := false;
		retry_after := res_end OPERATOR(pg_catalog.+) (res_us OPERATOR(pg_catalog.*) interval '1 microsecond');
		run_id := NULL;
		run_owner := NULL;
		run_started := NULL;
		run_lease := NULL;
		RETURN;
	END IF;
	-- 4. A tick served: the latest tick of a run that serves one, leaving
	-- out the running run of the source, which has lapsed by now.
	IF p_tick IS NOT NULL THEN
		-- A replaced run serves its tick too (version 13): its own index.
		SELECT pg_catalog.max(x.tick) INTO done_tick FROM (
			(SELECT d.tick FROM "public"."runclaim_runs" AS d
			  WHERE d.source OPERATOR(pg_catalog.=) p_source AND d.tick IS NOT NULL
			    AND (d.status OPERATOR(pg_catalog.=) 'running' OR d.status OPERATOR(pg_catalog.=) 'succeeded' OR d.status OPERATOR(pg_catalog.=) 'failed')
			    AND (run_id IS NULL OR d.id OPERATOR(pg_catalog.<>) run_id)
			  ORDER BY d.tick DESC LIMIT 1)
			UNION ALL
			(SELECT d.tick FROM "public"."runclaim_runs" AS d
			  WHERE d.source OPERATOR(pg_catalog.=) p_source AND d.tick IS NOT NULL AND d.status OPERATOR(pg_catalog.=) 'replaced'
			  ORDER BY d.tick DESC LIMIT 1)) AS x;
		IF done_tick OPERATOR(pg_catalog.>=) p_tick THEN
			IF triggered IS NOT TRUE THEN
				retry_after := NULL;
				RETURN;
			END IF;
			served_tick := NULL;
		END IF;
	END IF;
	-- Too soon by the interval (that of the claimer, or the one the latest run
	-- recorded, whichever is longer).
	IF retry_after OPERATOR(pg_catalog.>) db_now AND triggered IS NOT TRUE THEN
		RETURN;
	END IF;
	retry_after := NULL;
	-- 5. The keys, in the order named, after every other reason to skip,
	-- each read in statements after its lock: a cooldown in force, then
	-- MaxRunning live runs naming the key, then MaxStarts starts in the
	-- window, then a start within MinGap (min_gap_us). A skip answers limited_key, retry_after and, for a
	-- cooldown, its note as run_owner, and has written nothing.
	-- A ClaimMany with keys: every call has the keys of the whole batch,
	-- each once, with the number of its sources that name it, and the
	-- batch holds their locks from its first call to its commit, so only
	-- its own wins add to their runs and starts meanwhile. The first call
	-- that gets this far checks whether every key has room for all of them
	-- (no cooldown in force; the live runs, and the starts in the window,
	-- plus that number within each bound), one query per key. If so the
	-- batch is fast: no call looks at a key again (a paced key is
	-- fast only for one source of the batch, its newest start MinGap
	-- old), and the statement of
	-- the batch records the starts of its wins in one insert. Otherwise
	-- each call checks its keys as a single claim does. The answer is kept
	-- in a setting that lasts for the transaction only, which the first
	-- call of the batch cleared.
	IF p_batch_keys IS NOT NULL THEN
		cached := pg_catalog.current_setting('runclaim.batch', true);
		IF cached IS NULL OR cached OPERATOR(pg_catalog.=) '' THEN
			fast := true;
			db_now := pg_catalog.clock_timestamp();
			FOR i IN 1 .. pg_catalog.array_length(p_batch_keys, 1) LOOP
				k := p_batch_keys[i];
				SELECT (l.cooling_until IS NULL OR l.cooling_until OPERATOR(pg_catalog.<=) db_now)
				       AND (l.max_running OPERATOR(pg_catalog.<=) 0 OR p_batch_counts[i] OPERATOR(pg_catalog.+) (
				           SELECT pg_catalog.count(*) FROM (
				               SELECT FROM "public"."runclaim_runs" AS r
				                WHERE r.status OPERATOR(pg_catalog.=) 'running' AND pg_catalog.cardinality(r.keys) OPERATOR(pg_catalog.=) 1
				                  AND r.keys OPERATOR(pg_catalog.=) ARRAY[k] AND r.lease_until OPERATOR(pg_catalog.>) db_now
				               UNION ALL
				               SELECT FROM "public"."runclaim_runs" AS r
				                WHERE r.status OPERATOR(pg_catalog.=) 'running' AND pg_catalog.cardinality(r.keys) OPERATOR(pg_catalog.>) 1
				                  AND r.keys OPERATOR(pg_catalog.@>) ARRAY[k] AND r.lease_until OPERATOR(pg_catalog.>) db_now) AS x
				           ) OPERATOR(pg_catalog.<=) l.max_running)
				       AND (l.max_starts OPERATOR(pg_catalog.<=) 0 OR p_batch_counts[i] OPERATOR(pg_catalog.<=) l.max_starts AND NOT EXISTS (
				           -- Room for n more: the start max_starts - n back
				           -- from the newest, by its number, is not in the window.
				           SELECT FROM "public"."runclaim_runs_starts" AS s
				            WHERE s.key OPERATOR(pg_catalog.=) k
				              AND s.seq OPERATOR(pg_catalog.=) ((SELECT m.seq FROM "public"."runclaim_runs_starts" AS m WHERE m.key OPERATOR(pg_catalog.=) k ORDER BY m.seq DESC LIMIT 1)
				                  OPERATOR(pg_catalog.-) (l.max_starts OPERATOR(pg_catalog.-) p_batch_counts[i]))
				              AND s.started_at OPERATOR(pg_catalog.>) (db_now OPERATOR(pg_catalog.-) (l.per_us OPERATOR(pg_catalog.*) interval '1 microsecond'))))
				       AND (l.min_gap_us OPERATOR(pg_catalog.<=) 0 OR p_batch_counts[i] OPERATOR(pg_catalog.<=) 1 AND NOT EXISTS (
				           SELECT FROM (SELECT m.started_at FROM "public"."runclaim_runs_starts" AS m WHERE m.key OPERATOR(pg_catalog.=) k ORDER BY m.seq DESC LIMIT 1) AS m
				            WHERE m.started_at OPERATOR(pg_catalog.>) (db_now OPERATOR(pg_catalog.-) (l.min_gap_us OPERATOR(pg_catalog.*) interval '1 microsecond'))))
				  INTO fast
				  FROM "public"."runclaim_runs_keys" AS l WHERE l.key OPERATOR(pg_catalog.=) k;
				IF NOT FOUND THEN
					fast := true; -- a key with no row constrains nothing
				END IF;
				EXIT WHEN NOT fast;
			END LOOP;
			ignored := pg_catalog.set_config('runclaim.batch', CASE WHEN fast THEN 'fast' ELSE 'slow' END, true);
			IF fast THEN
				-- What the insert of a win below does for its keys, once
				-- for those of the batch: the starts older than the
				-- longest window go.
				FOREACH k IN ARRAY p_batch_keys LOOP
					DELETE FROM "public"."runclaim_runs_starts" AS o
					 WHERE o.key OPERATOR(pg_catalog.=) k AND o.started_at OPERATOR(pg_catalog.<) (db_now OPERATOR(pg_catalog.-) interval '31 days');
				END LOOP;
			END IF;
		ELSE
			fast := cached OPERATOR(pg_catalog.=) 'fast';
		END IF;
	END IF;
	IF p_keys IS NOT NULL AND NOT fast THEN
		FOREACH k IN ARRAY p_keys LOOP
			-- In a batch that is not fast, what an earlier call of this
			-- transaction learnt of the key (its first call holds the lock
			-- of every key to the end, so only its own wins add to the runs
			-- and starts of the key meanwhile): the room left under each
			-- bound, -1 for none. A key with room left is not read again;
			-- one with none left is, so that its skip says when there is
			-- room. A single claim, alone in its transaction, keeps nothing.
			IF p_batch_keys IS NOT NULL THEN
				guc := 'runclaim.key_' OPERATOR(pg_catalog.||) pg_catalog.translate(pg_catalog.hashtextextended(k, 0)::pg_catalog.text, '-', 'm');
				-- The setting lasts for the transaction only (is_local), and
				-- says so too: its value ends with the start of the
				-- transaction and the key, so that neither another
				-- transaction nor another key whose name hashes alike reads it.
				tag := ';' OPERATOR(pg_catalog.||) pg_catalog.now()::pg_catalog.text OPERATOR(pg_catalog.||) ';' OPERATOR(pg_catalog.||) k;
				cached := pg_catalog.current_setting(guc, true);
			END IF;
			IF p_batch_keys IS NOT NULL AND pg_catalog.strpos(cached, ';') OPERATOR(pg_catalog.>) 0 AND pg_catalog.substr(cached, pg_catalog.strpos(cached, ';')) OPERATOR(pg_catalog.=) tag THEN
				-- A key an earlier call found with no room under a
				-- limit (version 10): this call is skipped for it too,
				-- with the same time, without counting again.
				IF pg_catalog.left(cached, 1) OPERATOR(pg_catalog.=) '!' THEN
					limited_key := k;
					run_id := NULL;
					run_owner := NULL;
					run_started := NULL;
					run_lease := NULL;
					retry_after := pg_catalog.split_part(pg_catalog.substr(cached, 2), ';', 1)::pg_catalog.timestamptz;
					RETURN;
				END IF;
				room_running := pg_catalog.split_part(cached, ',', 1)::integer;
				room_starts := pg_catalog.split_part(pg_catalog.split_part(cached, ';', 1), ',', 2)::integer;
				IF room_running OPERATOR(pg_catalog.<>) 0 AND room_starts OPERATOR(pg_catalog.<>) 0 THEN
					ignored := pg_catalog.set_config(guc, (CASE WHEN room_running OPERATOR(pg_catalog.<) 0 THEN -1 ELSE room_running OPERATOR(pg_catalog.-) 1 END)::pg_catalog.text
						OPERATOR(pg_catalog.||) ',' OPERATOR(pg_catalog.||) (CASE WHEN room_starts OPERATOR(pg_catalog.<) 0 THEN -1 ELSE room_starts OPERATOR(pg_catalog.-) 1 END)::pg_catalog.text
						OPERATOR(pg_catalog.||) tag, true);
					CONTINUE;
				END IF;
			END IF;
			-- One query per key: its row, and only what its limit needs
			-- counted, each against the same clock reading: the live
			-- runs naming the key, its starts in the window (at most
			-- max_starts of them), and its newest start when it is paced,
			-- by its number (one probe of the same index), with, for a
			-- bound reached, when it has room again.
			SELECT CASE WHEN l.cooling_until OPERATOR(pg_catalog.>) c.now THEN l.cooling_until END,
			       CASE WHEN l.cooling_until OPERATOR(pg_catalog.>) c.now THEN l.cooling_note END,
			       rr.n, rr.first_end, l.max_running,
			       CASE WHEN l.max_starts OPERATOR(pg_catalog.>) 0 THEN (
			           SELECT s.started_at FROM "public"."runclaim_runs_starts" AS s
			            WHERE s.key OPERATOR(pg_catalog.=) k
			              AND s.seq OPERATOR(pg_catalog.=) ((SELECT m.seq FROM "public"."runclaim_runs_starts" AS m WHERE m.key OPERATOR(pg_catalog.=) k ORDER BY m.seq DESC LIMIT 1)
			                  OPERATOR(pg_catalog.-) (l.max_starts OPERATOR(pg_catalog.-) 1))
			            LIMIT 1) END,
			       l.max_starts, l.per_us, c.now, l.min_gap_us,
			       CASE WHEN l.min_gap_us OPERATOR(pg_catalog.>) 0 THEN (
			           SELECT m.started_at FROM "public"."runclaim_runs_starts" AS m WHERE m.key OPERATOR(pg_catalog.=) k ORDER BY m.seq DESC LIMIT 1) END
			  INTO cool_until, cool_note, running_now, first_end, lim_running, nth_start, lim_starts, per_us, db_now, gap_us, last_start
			  FROM (SELECT pg_catalog.clock_timestamp() AS now) AS c
			  JOIN "public"."runclaim_runs_keys" AS l ON l.key OPERATOR(pg_catalog.=) k
			  LEFT JOIN LATERAL (
			       SELECT pg_catalog.count(*) AS n, pg_catalog.min(x.lease_until) AS first_end
			         FROM (SELECT r.lease_until FROM "public"."runclaim_runs" AS r
			                WHERE l.max_running OPERATOR(pg_catalog.>) 0
			                  AND r.status OPERATOR(pg_catalog.=) 'running' AND pg_catalog.cardinality(r.keys) OPERATOR(pg_catalog.=) 1
			                  AND r.keys OPERATOR(pg_catalog.=) ARRAY[k] AND r.lease_until OPERATOR(pg_catalog.>) c.now
			               UNION ALL
			               SELECT r.lease_until FROM "public"."runclaim_runs" AS r
			                WHERE l.max_running OPERATOR(pg_catalog.>) 0
			                  AND r.status OPERATOR(pg_catalog.=) 'running' AND pg_catalog.cardinality(r.keys) OPERATOR(pg_catalog.>) 1
			                  AND r.keys OPERATOR(pg_catalog.@>) ARRAY[k] AND r.lease_until OPERATOR(pg_catalog.>) c.now) AS x
			       ) AS rr ON true;
			key_retry := NULL;
			room_running := -1;
			room_starts := -1;
			IF NOT FOUND THEN
				cool_note := NULL;
			ELSIF cool_until IS NOT NULL THEN
				key_retry := cool_until;
			ELSE
				IF lim_running OPERATOR(pg_catalog.>) 0 THEN
					room_running := lim_running OPERATOR(pg_catalog.-) running_now;
					IF room_running OPERATOR(pg_catalog.<=) 0 THEN
						key_retry := first_end;
					END IF;
				END IF;
				IF key_retry IS NULL AND lim_starts OPERATOR(pg_catalog.>) 0 THEN
					-- The max_starts-th newest start, found by its number
					-- (version 10): the key is full while it is in the
					-- window, and has room once it has left. The room
					-- kept for the next call of a batch is none, so that the
					-- next call looks again, at the numbers this one adds.
					room_starts := 1;
					IF nth_start OPERATOR(pg_catalog.>) (db_now OPERATOR(pg_catalog.-) (per_us OPERATOR(pg_catalog.*) interval '1 microsecond')) THEN
						key_retry := nth_start OPERATOR(pg_catalog.+) (per_us OPERATOR(pg_catalog.*) interval '1 microsecond');
					END IF;
				END IF;
				IF key_retry IS NULL AND gap_us OPERATOR(pg_catalog.>) 0 THEN
					-- Paced (version 12): no start within MinGap of the
					-- newest. After a win there is no room until MinGap
					-- has passed, so the next call of a batch looks again.
					room_starts := 1;
					IF last_start OPERATOR(pg_catalog.>) (db_now OPERATOR(pg_catalog.-) (gap_us OPERATOR(pg_catalog.*) interval '1 microsecond')) THEN
						key_retry := last_start OPERATOR(pg_catalog.+) (gap_us OPERATOR(pg_catalog.*) interval '1 microsecond');
					END IF;
				END IF;
			END IF;
			IF key_retry IS NOT NULL THEN
				IF p_batch_keys IS NOT NULL AND cool_until IS NULL THEN
					ignored := pg_catalog.set_config(guc, '!' OPERATOR(pg_catalog.||) key_retry::pg_catalog.text OPERATOR(pg_catalog.||) tag, true);
				END IF;
				limited_key := k;
				run_id := NULL;
				run_owner := cool_note;
				run_started := NULL;
				run_lease := NULL;
				retry_after := key_retry;
				RETURN;
			END IF;
			-- The room left after the win of this claim, which comes next
			-- unless a holder found below skips it: then one less than
			-- there is, which only makes a later call count again.
			IF p_batch_keys IS NOT NULL THEN
				ignored := pg_catalog.set_config(guc, (CASE WHEN room_running OPERATOR(pg_catalog.<) 0 THEN -1 ELSE room_running OPERATOR(pg_catalog.-) 1 END)::pg_catalog.text
					OPERATOR(pg_catalog.||) ',' OPERATOR(pg_catalog.||) (CASE WHEN room_starts OPERATOR(pg_catalog.<) 0 THEN -1 ELSE room_starts OPERATOR(pg_catalog.-) 1 END)::pg_catalog.text
					OPERATOR(pg_catalog.||) tag, true);
			END IF;
		END LOOP;
	END IF;
	-- 6. A lapsed holder, expired; a row another transaction holds (a late
	-- finish, a release, a fence) is left alone, and reported.
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
				SELECT pg_catalog.max(x.tick) INTO done_tick FROM (
					(SELECT d.tick FROM "public"."runclaim_runs" AS d
					  WHERE d.source OPERATOR(pg_catalog.=) p_source AND d.tick IS NOT NULL
					    AND (d.status OPERATOR(pg_catalog.=) 'running' OR d.status OPERATOR(pg_catalog.=) 'succeeded' OR d.status OPERATOR(pg_catalog.=) 'failed')
					  ORDER BY d.tick DESC LIMIT 1)
					UNION ALL
					(SELECT d.tick FROM "public"."runclaim_runs" AS d
					  WHERE d.source OPERATOR(pg_catalog.=) p_source AND d.tick IS NOT NULL AND d.status OPERATOR(pg_catalog.=) 'replaced'
					  ORDER BY d.tick DESC LIMIT 1)) AS x;
				IF done_tick OPERATOR(pg_catalog.>=) p_tick THEN
					IF triggered IS NOT TRUE THEN
						RETURN;
					END IF;
					served_tick := NULL;
				END IF;
			END IF;
		END IF;
	END IF;
	-- 7. The trigger used up, and the reservation of a claim with Replace
	-- (version 13), its own; the run, the state.
	IF triggered THEN
		UPDATE "public"."runclaim_runs_control" AS u SET triggered_at = NULL
		 WHERE u.source OPERATOR(pg_catalog.=) p_source AND u.triggered_at IS NOT NULL;
	END IF;
	IF p_replace IS NOT NULL AND res_for OPERATOR(pg_catalog.=) p_replace THEN
		UPDATE "public"."runclaim_runs_control" AS u SET reserved_for = NULL, reserved_run = NULL, reserved_us = NULL
		 WHERE u.source OPERATOR(pg_catalog.=) p_source AND u.reserved_for OPERATOR(pg_catalog.=) p_replace;
	END IF;
	db_now := pg_catalog.clock_timestamp();
	-- The run, and the start of each key, whether or not the key has a limit
	-- now, so that a limit set later counts it, in one statement. Without
	-- keys, or in a fast batch, the run only: the statement of a fast batch
	-- records the starts of all its wins, and the call that found the batch
	-- fast deleted the old ones.
	IF p_keys IS NULL OR fast THEN
		INSERT INTO "public"."runclaim_runs" AS i (source, status, owner, started_at, lease_until, heartbeat_at, min_interval, tick, keys)
		VALUES (p_source, 'running', p_owner, db_now,
		        db_now OPERATOR(pg_catalog.+) (p_lease OPERATOR(pg_catalog.*) interval '1 microsecond'), db_now,
		        p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond', served_tick, p_keys)
		RETURNING i.id, i.started_at, i.lease_until INTO run_id, run_started, run_lease;
	ELSE
		WITH ins AS (
			INSERT INTO "public"."runclaim_runs" AS i (source, status, owner, started_at, lease_until, heartbeat_at, min_interval, tick, keys)
			VALUES (p_source, 'running', p_owner, db_now,
			        db_now OPERATOR(pg_catalog.+) (p_lease OPERATOR(pg_catalog.*) interval '1 microsecond'), db_now,
			        p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond', served_tick, p_keys)
			RETURNING i.id, i.started_at, i.lease_until
		), st AS (
			-- Each start numbered here, the next of its key (version
			-- 10): this statement began after the locks of the keys.
			INSERT INTO "public"."runclaim_runs_starts" (key, started_at, run_id, seq)
			SELECT u.k, ins.started_at, ins.id,
			       coalesce((SELECT m.seq FROM "public"."runclaim_runs_starts" AS m WHERE m.key OPERATOR(pg_catalog.=) u.k ORDER BY m.seq DESC LIMIT 1), 0) OPERATOR(pg_catalog.+) 1
			  FROM ins, pg_catalog.unnest(p_keys) AS u(k)
		)
		SELECT ins.id, ins.started_at, ins.lease_until INTO run_id, run_started, run_lease FROM ins;
		-- One win in 64 also deletes the starts of its keys older than
		-- the longest window, which bounds the table. Doing it at every
		-- win cost a quarter of what keys add to a win.
		IF run_id OPERATOR(pg_catalog.%) 64 OPERATOR(pg_catalog.=) 0 THEN
			DELETE FROM "public"."runclaim_runs_starts" AS o
			 WHERE o.key OPERATOR(pg_catalog.=) ANY (p_keys) AND o.started_at OPERATOR(pg_catalog.<) (db_now OPERATOR(pg_catalog.-) interval '31 days');
		END IF;
	END IF;
	-- A win says whether it used a trigger, and the time of it, so
	-- that a caller that gave up on the claim can give the trigger back
	-- when it deletes the run (version 7): run_owner trigger and
	-- retry_after the time. Releases before read neither on a win.
	run_owner := NULL;
	retry_after := NULL;
	IF triggered THEN
		run_owner := 'trigger';
		retry_after := trigger_at;
	END IF;
	won := true;
	-- The state of a win: read in 3, or, after the claim expired a lapsed
	-- run, in a statement of its own, whose snapshot is taken after the
	-- expiry. A save locks the row of the run FOR SHARE, so a claim cannot
	-- expire a run while its save is in flight, and a save after the
	-- expiry finds the run no longer running.
	IF state_read THEN
		run_state := pre_state;
	ELSIF p_state THEN
		SELECT s.state INTO run_state FROM "public"."runclaim_runs_cursors" AS s WHERE s.source OPERATOR(pg_catalog.=) p_source;
	END IF;
END
$q$;
-- The roles that may call the function of version 12 may call this one:
-- the same grants of EXECUTE, and none to PUBLIC unless it had one there.
DO $q$
DECLARE
	old pg_catalog.oid := pg_catalog.to_regprocedure($n$"public"."runclaim_runs_claim12"(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[])$n$);
	r record;
BEGIN
	IF old IS NULL OR (SELECT p.proacl IS NULL FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) old) THEN
		RETURN;
	END IF;
	EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', $n$"public"."runclaim_runs_claim13"(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[], pg_catalog.text)$n$::pg_catalog.text);
	FOR r IN SELECT a.grantee FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
	          WHERE p.oid OPERATOR(pg_catalog.=) old AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE' LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', $n$"public"."runclaim_runs_claim13"(bigint, pg_catalog.text, pg_catalog.text, bigint, bigint, bigint, pg_catalog.timestamptz, pg_catalog.text[], bigint[], boolean, pg_catalog.text[], integer[], pg_catalog.text)$n$::pg_catalog.text,
			CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			     ELSE pg_catalog.quote_ident((SELECT o.rolname FROM pg_catalog.pg_roles AS o WHERE o.oid OPERATOR(pg_catalog.=) r.grantee)) END);
	END LOOP;
END
$q$;
COMMENT ON TABLE "public"."runclaim_runs" IS 'runclaim schema version 13';

-- The starts of each key numbered without gaps, under the lock of the key,
-- so that a claim finds the MaxStarts-th newest start of a key with one
-- probe of an index, whatever the number of starts in its window.
ALTER TABLE {{table_starts}} ADD COLUMN IF NOT EXISTS seq bigint;
UPDATE {{table_starts}} AS s SET seq = n.seq
  FROM (SELECT o.key, o.started_at, o.run_id,
               pg_catalog.row_number() OVER (PARTITION BY o.key ORDER BY o.started_at, o.run_id) AS seq
          FROM {{table_starts}} AS o) AS n
 WHERE s.key OPERATOR(pg_catalog.=) n.key AND s.started_at OPERATOR(pg_catalog.=) n.started_at AND s.run_id OPERATOR(pg_catalog.=) n.run_id
   AND s.seq IS DISTINCT FROM n.seq;
CREATE INDEX IF NOT EXISTS {{table_nth}} ON {{table_starts}} (key, seq);
-- The lock of a key on the table, as TableKeyLock derives it in Go
-- (FNV-64a of runclaim.key, a NUL byte, the name of the table, a NUL byte
-- and the key), for the renumbering below, which a deleting transaction
-- of any release runs.
CREATE OR REPLACE FUNCTION {{table_keylock}}(p_key pg_catalog.text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT SECURITY INVOKER
AS $q$
DECLARE
	b pg_catalog.bytea := pg_catalog.convert_to('runclaim.key', 'UTF8') OPERATOR(pg_catalog.||) pg_catalog.decode('00', 'hex')
		OPERATOR(pg_catalog.||) pg_catalog.convert_to({{table_literal}}, 'UTF8') OPERATOR(pg_catalog.||) pg_catalog.decode('00', 'hex')
		OPERATOR(pg_catalog.||) pg_catalog.convert_to(p_key, 'UTF8');
	h pg_catalog.numeric := 14695981039346656037;
	lo integer;
BEGIN
	FOR i IN 0 .. pg_catalog.length(b) OPERATOR(pg_catalog.-) 1 LOOP
		lo := pg_catalog.mod(h, 256)::integer;
		h := h OPERATOR(pg_catalog.-) lo OPERATOR(pg_catalog.+) (lo OPERATOR(pg_catalog.#) pg_catalog.get_byte(b, i));
		h := pg_catalog.mod(h OPERATOR(pg_catalog.*) 1099511628211, 18446744073709551616);
	END LOOP;
	IF h OPERATOR(pg_catalog.>=) 9223372036854775808 THEN
		h := h OPERATOR(pg_catalog.-) 18446744073709551616;
	END IF;
	RETURN h::bigint;
END
$q$;
-- A start inserted without a number (by the statement of a batch, or by a
-- claim function) gets the next of its key: under the lock of the key, which
-- every claim holds when it records its starts.
CREATE OR REPLACE FUNCTION {{table_number}}() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $q$
BEGIN
	NEW.seq := coalesce((SELECT s.seq FROM {{table_starts}} AS s WHERE s.key OPERATOR(pg_catalog.=) NEW.key ORDER BY s.seq DESC LIMIT 1), 0) OPERATOR(pg_catalog.+) 1;
	RETURN NEW;
END
$q$;
-- The number of the newest start of a key, 0 for none, read with a
-- snapshot of its own: for the statement of a batch, which numbers the
-- starts of its wins after its calls took the locks of their keys.
CREATE OR REPLACE FUNCTION {{table_top}}(p_key pg_catalog.text) RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT SECURITY INVOKER
AS $q$
BEGIN
	RETURN coalesce((SELECT s.seq FROM {{table_starts}} AS s WHERE s.key OPERATOR(pg_catalog.=) p_key ORDER BY s.seq DESC LIMIT 1), 0);
END
$q$;
-- Starts deleted from inside the numbers of a key (an Unclaim, a claim
-- given up) close the gap: under the lock of the key, the starts above
-- move down by the number deleted below them. Starts deleted from the bottom (the old
-- ones a claim clears) leave no gap and move nothing.
CREATE OR REPLACE FUNCTION {{table_renum}}() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $q$
DECLARE
	r record;
	ignored pg_catalog.text;
BEGIN
	FOR r IN
		SELECT g.key, pg_catalog.min(g.seq) AS low, pg_catalog.max(g.seq) AS high, {{table_keylock}}(g.key) AS lk
		  FROM gone AS g WHERE g.seq IS NOT NULL GROUP BY g.key ORDER BY 4
	LOOP
		IF EXISTS (SELECT FROM {{table_starts}} AS s WHERE s.key OPERATOR(pg_catalog.=) r.key AND s.seq OPERATOR(pg_catalog.<) r.high) THEN
			ignored := pg_catalog.pg_advisory_xact_lock(r.lk)::pg_catalog.text;
			UPDATE {{table_starts}} AS s
			   SET seq = s.seq OPERATOR(pg_catalog.-) (SELECT pg_catalog.count(*) FROM gone AS g
			                                            WHERE g.key OPERATOR(pg_catalog.=) r.key AND g.seq OPERATOR(pg_catalog.<) s.seq)
			 WHERE s.key OPERATOR(pg_catalog.=) r.key AND s.seq OPERATOR(pg_catalog.>) r.low;
		END IF;
	END LOOP;
	RETURN NULL;
END
$q$;
DROP TRIGGER IF EXISTS runclaim_number ON {{table_starts}};
CREATE TRIGGER runclaim_number BEFORE INSERT ON {{table_starts}} FOR EACH ROW WHEN (NEW.seq IS NULL) EXECUTE FUNCTION {{table_number}}();
ALTER TABLE {{table_starts}} ALTER COLUMN seq SET NOT NULL;
DROP TRIGGER IF EXISTS runclaim_renum ON {{table_starts}};
CREATE TRIGGER runclaim_renum AFTER DELETE ON {{table_starts}} REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION {{table_renum}}();
DO $q$
DECLARE
	r record;
	who text;
BEGIN
	FOR r IN
		SELECT DISTINCT a.grantee
		  FROM pg_catalog.pg_class AS c, LATERAL pg_catalog.aclexplode(c.relacl) AS a
		 WHERE c.oid = {{table_literal}}::regclass AND a.privilege_type = 'INSERT' AND a.grantee <> c.relowner
	LOOP
		who := CASE WHEN r.grantee = 0 THEN 'PUBLIC'
		            ELSE pg_catalog.quote_ident((SELECT o.rolname FROM pg_catalog.pg_roles AS o WHERE o.oid = r.grantee)) END;
		EXECUTE pg_catalog.format('GRANT UPDATE (seq) ON %s TO %s', {{table_starts_literal}}::text, who);
	END LOOP;
END
$q$;
CREATE OR REPLACE FUNCTION {{table_claim}}(
	p_key bigint, p_source pg_catalog.text, p_owner pg_catalog.text, p_lease bigint, p_min_interval bigint, p_lock_timeout bigint,
	p_tick pg_catalog.timestamptz, p_keys pg_catalog.text[], p_key_locks bigint[],
	p_batch_keys pg_catalog.text[], p_batch_counts integer[],
	OUT locked boolean, OUT isolation pg_catalog.text, OUT db_now pg_catalog.timestamptz, OUT won boolean,
	OUT run_id bigint, OUT run_owner pg_catalog.text, OUT run_started pg_catalog.timestamptz, OUT run_lease pg_catalog.timestamptz,
	OUT retry_after pg_catalog.timestamptz, OUT done_tick pg_catalog.timestamptz, OUT limited_key pg_catalog.text)
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
	room_running integer;
	room_starts integer;
	guc pg_catalog.text;
	cached pg_catalog.text;
	tag pg_catalog.text;
	fast boolean := false;
	i integer;
BEGIN
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
	-- The locks of the keys, before anything is read, in the order given
	-- (ascending: two claims never wait on each other), each wait bounded
	-- by lock_timeout. A claim that finds a key busy waits for the claim
	-- that holds it to commit, then counts what it committed: never more
	-- than the limit wins, and a claim that finds room wins. The locks are
	-- advisory, so a claim skipped writes nothing, not even a row lock.
	IF p_key_locks IS NOT NULL THEN
		FOREACH lk IN ARRAY p_key_locks LOOP
			ignored := pg_catalog.pg_advisory_xact_lock(lk)::pg_catalog.text;
		END LOOP;
	END IF;
	-- The first call of a ClaimMany with keys: whether the batch is fast
	-- is not known yet (see below).
	IF p_key_locks IS NOT NULL AND p_batch_keys IS NOT NULL THEN
		ignored := pg_catalog.set_config('runclaim.batch', '', true);
	END IF;
	-- The source's running run and its pause, read before the advisory
	-- lock: a pause or a live holder is the answer as of this statement's
	-- snapshot, and takes no lock. Anything else is read again under it.
	SELECT c.id, c.owner, c.started_at, c.lease_until,
	       k.paused_at IS NOT NULL AND (k.pause_until IS NULL OR k.pause_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()),
	       k.pause_until, k.pause_note, k.triggered_at IS NOT NULL, k.triggered_at
	  INTO run_id, run_owner, run_started, run_lease, paused, pause_end, note, triggered, trigger_at
	  FROM (SELECT) AS one
	  LEFT JOIN {{table}} AS c ON c.source OPERATOR(pg_catalog.=) p_source AND c.status OPERATOR(pg_catalog.=) 'running'
	  LEFT JOIN {{table_control}} AS k ON k.source OPERATOR(pg_catalog.=) p_source;
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
		  LEFT JOIN {{table}} AS c ON c.source OPERATOR(pg_catalog.=) p_source AND c.status OPERATOR(pg_catalog.=) 'running'
		  LEFT JOIN {{table_control}} AS k ON k.source OPERATOR(pg_catalog.=) p_source;
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
		  FROM {{table}} AS d
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
	  FROM {{table}} AS l WHERE l.source OPERATOR(pg_catalog.=) p_source ORDER BY l.started_at DESC LIMIT 1;
	db_now := pg_catalog.clock_timestamp();
	IF retry_after OPERATOR(pg_catalog.>) db_now AND triggered IS NOT TRUE THEN
		RETURN;
	END IF;
	-- The keys, in the order named, after every other reason to skip,
	-- each read in statements after its lock: a cooldown in force, then
	-- MaxRunning live runs naming the key, then MaxStarts starts in the
	-- window. A skip answers limited_key, retry_after and, for a
	-- cooldown, its note as run_owner, and has written nothing.
	-- A ClaimMany with keys: every call has the keys of the whole batch,
	-- each once, with the number of its sources that name it, and the
	-- batch holds their locks from its first call to its commit, so only
	-- its own wins add to their runs and starts meanwhile. The first call
	-- that gets this far checks whether every key has room for all of them
	-- (no cooldown in force; the live runs, and the starts in the window,
	-- plus that number within each bound), one query per key. If so the
	-- batch is fast: no call looks at a key again, and the statement of
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
				               SELECT FROM {{table}} AS r
				                WHERE r.status OPERATOR(pg_catalog.=) 'running' AND pg_catalog.cardinality(r.keys) OPERATOR(pg_catalog.=) 1
				                  AND r.keys OPERATOR(pg_catalog.=) ARRAY[k] AND r.lease_until OPERATOR(pg_catalog.>) db_now
				               UNION ALL
				               SELECT FROM {{table}} AS r
				                WHERE r.status OPERATOR(pg_catalog.=) 'running' AND pg_catalog.cardinality(r.keys) OPERATOR(pg_catalog.>) 1
				                  AND r.keys OPERATOR(pg_catalog.@>) ARRAY[k] AND r.lease_until OPERATOR(pg_catalog.>) db_now) AS x
				           ) OPERATOR(pg_catalog.<=) l.max_running)
				       AND (l.max_starts OPERATOR(pg_catalog.<=) 0 OR p_batch_counts[i] OPERATOR(pg_catalog.<=) l.max_starts AND NOT EXISTS (
				           -- Room for n more: the start max_starts - n back
				           -- from the newest, by its number, is not in the window.
				           SELECT FROM {{table_starts}} AS s
				            WHERE s.key OPERATOR(pg_catalog.=) k
				              AND s.seq OPERATOR(pg_catalog.=) ((SELECT m.seq FROM {{table_starts}} AS m WHERE m.key OPERATOR(pg_catalog.=) k ORDER BY m.seq DESC LIMIT 1)
				                  OPERATOR(pg_catalog.-) (l.max_starts OPERATOR(pg_catalog.-) p_batch_counts[i]))
				              AND s.started_at OPERATOR(pg_catalog.>) (db_now OPERATOR(pg_catalog.-) (l.per_us OPERATOR(pg_catalog.*) interval '1 microsecond'))))
				  INTO fast
				  FROM {{table_keys}} AS l WHERE l.key OPERATOR(pg_catalog.=) k;
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
					DELETE FROM {{table_starts}} AS o
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
			-- runs naming the key, and its starts in the window (at most
			-- max_starts of them), with, for a bound reached, when it has
			-- room again.
			SELECT CASE WHEN l.cooling_until OPERATOR(pg_catalog.>) c.now THEN l.cooling_until END,
			       CASE WHEN l.cooling_until OPERATOR(pg_catalog.>) c.now THEN l.cooling_note END,
			       rr.n, rr.first_end, l.max_running,
			       CASE WHEN l.max_starts OPERATOR(pg_catalog.>) 0 THEN (
			           SELECT s.started_at FROM {{table_starts}} AS s
			            WHERE s.key OPERATOR(pg_catalog.=) k
			              AND s.seq OPERATOR(pg_catalog.=) ((SELECT m.seq FROM {{table_starts}} AS m WHERE m.key OPERATOR(pg_catalog.=) k ORDER BY m.seq DESC LIMIT 1)
			                  OPERATOR(pg_catalog.-) (l.max_starts OPERATOR(pg_catalog.-) 1))
			            LIMIT 1) END,
			       l.max_starts, l.per_us, c.now
			  INTO cool_until, cool_note, running_now, first_end, lim_running, nth_start, lim_starts, per_us, db_now
			  FROM (SELECT pg_catalog.clock_timestamp() AS now) AS c
			  JOIN {{table_keys}} AS l ON l.key OPERATOR(pg_catalog.=) k
			  LEFT JOIN LATERAL (
			       SELECT pg_catalog.count(*) AS n, pg_catalog.min(x.lease_until) AS first_end
			         FROM (SELECT r.lease_until FROM {{table}} AS r
			                WHERE l.max_running OPERATOR(pg_catalog.>) 0
			                  AND r.status OPERATOR(pg_catalog.=) 'running' AND pg_catalog.cardinality(r.keys) OPERATOR(pg_catalog.=) 1
			                  AND r.keys OPERATOR(pg_catalog.=) ARRAY[k] AND r.lease_until OPERATOR(pg_catalog.>) c.now
			               UNION ALL
			               SELECT r.lease_until FROM {{table}} AS r
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
	IF run_id IS NOT NULL THEN
		UPDATE {{table}} AS e SET status = 'expired', finished_at = pg_catalog.clock_timestamp()
		WHERE e.id OPERATOR(pg_catalog.=) ANY (
			SELECT x.id FROM {{table}} AS x
			WHERE x.source OPERATOR(pg_catalog.=) p_source AND x.status OPERATOR(pg_catalog.=) 'running'
			  AND x.lease_until OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
			FOR UPDATE SKIP LOCKED);
		IF NOT FOUND THEN
			SELECT c.id, c.owner, c.started_at, c.lease_until
			  INTO run_id, run_owner, run_started, run_lease
			  FROM {{table}} AS c WHERE c.source OPERATOR(pg_catalog.=) p_source AND c.status OPERATOR(pg_catalog.=) 'running';
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
				  FROM {{table}} AS d
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
		UPDATE {{table_control}} AS u SET triggered_at = NULL
		 WHERE u.source OPERATOR(pg_catalog.=) p_source AND u.triggered_at IS NOT NULL;
	END IF;
	db_now := pg_catalog.clock_timestamp();
	-- The run, and the start of each key, whether or not the key has a limit
	-- now, so that a limit set later counts it, in one statement. In a
	-- fast batch the run only: the statement of the batch records the
	-- starts of all its wins, and the call that found the batch fast
	-- deleted the old ones.
	IF fast THEN
		INSERT INTO {{table}} AS i (source, status, owner, started_at, lease_until, heartbeat_at, min_interval, tick, keys)
		VALUES (p_source, 'running', p_owner, db_now,
		        db_now OPERATOR(pg_catalog.+) (p_lease OPERATOR(pg_catalog.*) interval '1 microsecond'), db_now,
		        p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond', served_tick, p_keys)
		RETURNING i.id, i.started_at, i.lease_until INTO run_id, run_started, run_lease;
	ELSE
		WITH ins AS (
			INSERT INTO {{table}} AS i (source, status, owner, started_at, lease_until, heartbeat_at, min_interval, tick, keys)
			VALUES (p_source, 'running', p_owner, db_now,
			        db_now OPERATOR(pg_catalog.+) (p_lease OPERATOR(pg_catalog.*) interval '1 microsecond'), db_now,
			        p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond', served_tick, p_keys)
			RETURNING i.id, i.started_at, i.lease_until
		), st AS (
			-- Each start numbered here, the next of its key (version
			-- 10): this statement began after the locks of the keys.
			INSERT INTO {{table_starts}} (key, started_at, run_id, seq)
			SELECT u.k, ins.started_at, ins.id,
			       coalesce((SELECT m.seq FROM {{table_starts}} AS m WHERE m.key OPERATOR(pg_catalog.=) u.k ORDER BY m.seq DESC LIMIT 1), 0) OPERATOR(pg_catalog.+) 1
			  FROM ins, pg_catalog.unnest(p_keys) AS u(k)
		)
		SELECT ins.id, ins.started_at, ins.lease_until INTO run_id, run_started, run_lease FROM ins;
		-- One win in 64 also deletes the starts of its keys older than
		-- the longest window, which bounds the table. Doing it at every
		-- win cost a quarter of what keys add to a win.
		IF run_id OPERATOR(pg_catalog.%) 64 OPERATOR(pg_catalog.=) 0 THEN
			DELETE FROM {{table_starts}} AS o
			 WHERE o.key OPERATOR(pg_catalog.=) ANY (p_keys) AND o.started_at OPERATOR(pg_catalog.<) (db_now OPERATOR(pg_catalog.-) interval '31 days');
		END IF;
	END IF;
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
END
$q$;
CREATE OR REPLACE FUNCTION {{table_claim}}(
	p_key bigint, p_source pg_catalog.text, p_owner pg_catalog.text, p_lease bigint, p_min_interval bigint, p_lock_timeout bigint,
	p_tick pg_catalog.timestamptz, p_keys pg_catalog.text[], p_key_locks bigint[], p_state boolean,
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
	room_running integer;
	room_starts integer;
	key_limited pg_catalog.text;
	key_until pg_catalog.timestamptz;
	key_note pg_catalog.text;
	earlier boolean;
	pre_retry pg_catalog.timestamptz;
BEGIN
	-- The body of the overload with keys (version 8), for a single claim
	-- (a ClaimMany calls that overload), rather than a call of it or of
	-- the overload with a tick: a claim pays no second call frame, which
	-- cost a win 1.06x what it cost on a version 8 table. Without keys it
	-- decides as version 7 does.
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
	-- The locks of the keys, before anything is read, in the order given
	-- (ascending: two claims never wait on each other), each wait bounded
	-- by lock_timeout. A claim that finds a key busy waits for the claim
	-- that holds it to commit, then counts what it committed: never more
	-- than the limit wins, and a claim that finds room wins. The locks are
	-- advisory, so a claim skipped writes nothing, not even a row lock.
	IF p_key_locks IS NOT NULL THEN
		FOREACH lk IN ARRAY p_key_locks LOOP
			ignored := pg_catalog.pg_advisory_xact_lock(lk)::pg_catalog.text;
		END LOOP;
	END IF;
	-- The source's running run and its pause, read before the advisory
	-- lock: a pause or a live holder is the answer as of this statement's
	-- snapshot, and takes no lock. Anything else is read again under it.
	IF p_keys IS NULL THEN
		SELECT c.id, c.owner, c.started_at, c.lease_until,
		       k.paused_at IS NOT NULL AND (k.pause_until IS NULL OR k.pause_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()),
		       k.pause_until, k.pause_note, k.triggered_at IS NOT NULL, k.triggered_at
		  INTO run_id, run_owner, run_started, run_lease, paused, pause_end, note, triggered, trigger_at
		  FROM (SELECT) AS one
		  LEFT JOIN {{table}} AS c ON c.source OPERATOR(pg_catalog.=) p_source AND c.status OPERATOR(pg_catalog.=) 'running'
		  LEFT JOIN {{table_control}} AS k ON k.source OPERATOR(pg_catalog.=) p_source;
	ELSE
		SELECT c.id, c.owner, c.started_at, c.lease_until,
		       k.paused_at IS NOT NULL AND (k.pause_until IS NULL OR k.pause_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()),
		       k.pause_until, k.pause_note, k.triggered_at IS NOT NULL, k.triggered_at,
		       (SELECT l.started_at OPERATOR(pg_catalog.+) greatest(l.min_interval, p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond')
		         FROM {{table}} AS l WHERE l.source OPERATOR(pg_catalog.=) p_source ORDER BY l.started_at DESC LIMIT 1)
		  INTO run_id, run_owner, run_started, run_lease, paused, pause_end, note, triggered, trigger_at, pre_retry
		  FROM (SELECT) AS one
		  LEFT JOIN {{table}} AS c ON c.source OPERATOR(pg_catalog.=) p_source AND c.status OPERATOR(pg_catalog.=) 'running'
		  LEFT JOIN {{table_control}} AS k ON k.source OPERATOR(pg_catalog.=) p_source;
	END IF;
	db_now := pg_catalog.clock_timestamp();
	IF NOT paused AND run_lease OPERATOR(pg_catalog.>) db_now THEN
		RETURN;
	END IF;
	-- The keys, in the order named, before the lock of the source (version
	-- 10): their locks, held since the start, keep what is read of
	-- them true to the end, but for room that time or a finished run
	-- makes. A skip for a key then needs the reasons reported before
	-- it ruled out: without the lock of the source, as a live holder and a
	-- pause are, the tick and the interval are read here; if either
	-- holds, the claim goes on to the lock and decides under it,
	-- and a key with no room is its answer after every other reason.
	-- So a skip for a key takes no lock of the source.
	-- Each key is read in statements after its lock: a cooldown in
	-- force, then MaxRunning live runs naming the key, then MaxStarts
	-- starts in the window. A skip answers limited_key, retry_after
	-- and, for a cooldown, its note as run_owner, and has written
	-- nothing.
	IF NOT paused AND p_keys IS NOT NULL THEN
		FOREACH k IN ARRAY p_keys LOOP
			-- One query per key: its row and its MaxStarts-th newest
			-- start, against one clock reading; then, for a MaxRunning
			-- limit, its live runs against the same reading.
			SELECT CASE WHEN l.cooling_until OPERATOR(pg_catalog.>) c.now THEN l.cooling_until END,
			       CASE WHEN l.cooling_until OPERATOR(pg_catalog.>) c.now THEN l.cooling_note END,
			       l.max_running,
			       CASE WHEN l.max_starts OPERATOR(pg_catalog.>) 0 THEN (
			           SELECT s.started_at FROM {{table_starts}} AS s
			            WHERE s.key OPERATOR(pg_catalog.=) k
			              AND s.seq OPERATOR(pg_catalog.=) ((SELECT m.seq FROM {{table_starts}} AS m WHERE m.key OPERATOR(pg_catalog.=) k ORDER BY m.seq DESC LIMIT 1)
			                  OPERATOR(pg_catalog.-) (l.max_starts OPERATOR(pg_catalog.-) 1))
			            LIMIT 1) END,
			       l.max_starts, l.per_us, c.now
			  INTO cool_until, cool_note, lim_running, nth_start, lim_starts, per_us, db_now
			  FROM (SELECT pg_catalog.clock_timestamp() AS now) AS c
			  JOIN {{table_keys}} AS l ON l.key OPERATOR(pg_catalog.=) k;
			key_retry := NULL;
			room_running := -1;
			room_starts := -1;
			IF NOT FOUND THEN
				cool_note := NULL;
			ELSIF cool_until IS NOT NULL THEN
				key_retry := cool_until;
			ELSE
				IF lim_running OPERATOR(pg_catalog.>) 0 THEN
					-- The live runs naming the key, against the same clock
					-- reading: those naming it alone, and with others.
					SELECT pg_catalog.count(*), pg_catalog.min(x.lease_until) INTO running_now, first_end
					  FROM (SELECT r.lease_until FROM {{table}} AS r
					         WHERE r.status OPERATOR(pg_catalog.=) 'running' AND pg_catalog.cardinality(r.keys) OPERATOR(pg_catalog.=) 1
					           AND r.keys OPERATOR(pg_catalog.=) ARRAY[k] AND r.lease_until OPERATOR(pg_catalog.>) db_now
					        UNION ALL
					        SELECT r.lease_until FROM {{table}} AS r
					         WHERE r.status OPERATOR(pg_catalog.=) 'running' AND pg_catalog.cardinality(r.keys) OPERATOR(pg_catalog.>) 1
					           AND r.keys OPERATOR(pg_catalog.@>) ARRAY[k] AND r.lease_until OPERATOR(pg_catalog.>) db_now) AS x;
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
			END IF;
			IF key_retry IS NOT NULL THEN
				key_limited := k;
				key_until := key_retry;
				key_note := cool_note;
				EXIT;
			END IF;
		END LOOP;
		IF key_limited IS NOT NULL THEN
			earlier := false;
			IF p_tick IS NOT NULL THEN
				SELECT d.tick INTO done_tick
				  FROM {{table}} AS d
				 WHERE d.source OPERATOR(pg_catalog.=) p_source AND d.tick IS NOT NULL
				   AND (d.status OPERATOR(pg_catalog.=) 'running' OR d.status OPERATOR(pg_catalog.=) 'succeeded' OR d.status OPERATOR(pg_catalog.=) 'failed')
				   AND (run_id IS NULL OR d.id OPERATOR(pg_catalog.<>) run_id)
				 ORDER BY d.tick DESC LIMIT 1;
				earlier := done_tick OPERATOR(pg_catalog.>=) p_tick AND triggered IS NOT TRUE;
			END IF;
			IF earlier IS NOT TRUE THEN
				earlier := pre_retry OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() AND triggered IS NOT TRUE;
			END IF;
			IF earlier IS NOT TRUE THEN
				limited_key := key_limited;
				run_id := NULL;
				run_owner := key_note;
				run_started := NULL;
				run_lease := NULL;
				retry_after := key_until;
				RETURN;
			END IF;
			done_tick := NULL;
			retry_after := NULL;
		END IF;
	END IF;
	IF NOT paused THEN
		locked := pg_catalog.pg_try_advisory_xact_lock(p_key);
		IF NOT locked THEN
			RETURN;
		END IF;
		SELECT c.id, c.owner, c.started_at, c.lease_until,
		       k.paused_at IS NOT NULL AND (k.pause_until IS NULL OR k.pause_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()),
		       k.pause_until, k.pause_note, k.triggered_at IS NOT NULL, k.triggered_at,
		       (SELECT l.started_at OPERATOR(pg_catalog.+) greatest(l.min_interval, p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond')
		         FROM {{table}} AS l WHERE l.source OPERATOR(pg_catalog.=) p_source ORDER BY l.started_at DESC LIMIT 1)
		  INTO run_id, run_owner, run_started, run_lease, paused, pause_end, note, triggered, trigger_at, retry_after
		  FROM (SELECT) AS one
		  LEFT JOIN {{table}} AS c ON c.source OPERATOR(pg_catalog.=) p_source AND c.status OPERATOR(pg_catalog.=) 'running'
		  LEFT JOIN {{table_control}} AS k ON k.source OPERATOR(pg_catalog.=) p_source;
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
		  FROM {{table}} AS d
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
	-- The interval: the latest start, read with the running run under
	-- the lock (version 10).
	db_now := pg_catalog.clock_timestamp();
	IF retry_after OPERATOR(pg_catalog.>) db_now AND triggered IS NOT TRUE THEN
		RETURN;
	END IF;
	-- A key with no room, found before the lock of the source (see there):
	-- every earlier reason turned out not to hold under the lock either.
	IF key_limited IS NOT NULL THEN
		limited_key := key_limited;
		run_id := NULL;
		run_owner := key_note;
		run_started := NULL;
		run_lease := NULL;
		retry_after := key_until;
		RETURN;
	END IF;
	IF run_id IS NOT NULL THEN
		UPDATE {{table}} AS e SET status = 'expired', finished_at = pg_catalog.clock_timestamp()
		WHERE e.id OPERATOR(pg_catalog.=) ANY (
			SELECT x.id FROM {{table}} AS x
			WHERE x.source OPERATOR(pg_catalog.=) p_source AND x.status OPERATOR(pg_catalog.=) 'running'
			  AND x.lease_until OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
			FOR UPDATE SKIP LOCKED);
		IF NOT FOUND THEN
			SELECT c.id, c.owner, c.started_at, c.lease_until
			  INTO run_id, run_owner, run_started, run_lease
			  FROM {{table}} AS c WHERE c.source OPERATOR(pg_catalog.=) p_source AND c.status OPERATOR(pg_catalog.=) 'running';
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
				  FROM {{table}} AS d
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
		UPDATE {{table_control}} AS u SET triggered_at = NULL
		 WHERE u.source OPERATOR(pg_catalog.=) p_source AND u.triggered_at IS NOT NULL;
	END IF;
	db_now := pg_catalog.clock_timestamp();
	-- The run; with keys, and the start of each key, whether or not the
	-- key has a limit now, so that a limit set later counts it, in one
	-- statement.
	IF p_keys IS NULL THEN
		INSERT INTO {{table}} AS i (source, status, owner, started_at, lease_until, heartbeat_at, min_interval, tick, keys)
		VALUES (p_source, 'running', p_owner, db_now,
		        db_now OPERATOR(pg_catalog.+) (p_lease OPERATOR(pg_catalog.*) interval '1 microsecond'), db_now,
		        p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond', served_tick, p_keys)
		RETURNING i.id, i.started_at, i.lease_until INTO run_id, run_started, run_lease;
	ELSE
		WITH ins AS (
			INSERT INTO {{table}} AS i (source, status, owner, started_at, lease_until, heartbeat_at, min_interval, tick, keys)
			VALUES (p_source, 'running', p_owner, db_now,
			        db_now OPERATOR(pg_catalog.+) (p_lease OPERATOR(pg_catalog.*) interval '1 microsecond'), db_now,
			        p_min_interval OPERATOR(pg_catalog.*) interval '1 microsecond', served_tick, p_keys)
			RETURNING i.id, i.started_at, i.lease_until
		), st AS (
			-- Each start numbered here, the next of its key (version
			-- 10): this statement began after the locks of the keys.
			INSERT INTO {{table_starts}} (key, started_at, run_id, seq)
			SELECT u.k, ins.started_at, ins.id,
			       coalesce((SELECT m.seq FROM {{table_starts}} AS m WHERE m.key OPERATOR(pg_catalog.=) u.k ORDER BY m.seq DESC LIMIT 1), 0) OPERATOR(pg_catalog.+) 1
			  FROM ins, pg_catalog.unnest(p_keys) AS u(k)
		)
		SELECT ins.id, ins.started_at, ins.lease_until INTO run_id, run_started, run_lease FROM ins;
		-- One win in 64 also deletes the starts of its keys older than
		-- the longest window, which bounds the table. Doing it at every
		-- win cost a quarter of what keys add to a win.
		IF run_id OPERATOR(pg_catalog.%) 64 OPERATOR(pg_catalog.=) 0 THEN
			DELETE FROM {{table_starts}} AS o
			 WHERE o.key OPERATOR(pg_catalog.=) ANY (p_keys) AND o.started_at OPERATOR(pg_catalog.<) (db_now OPERATOR(pg_catalog.-) interval '31 days');
		END IF;
	END IF;
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
		SELECT s.state INTO run_state FROM {{table_states}} AS s WHERE s.source OPERATOR(pg_catalog.=) p_source;
	END IF;
END
$q$;
COMMENT ON TABLE {{table}} IS 'runclaim schema version 10';

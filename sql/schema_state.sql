-- name: schema_state
-- What Migrate, SchemaVersion and a claim's recheck know of the schema,
-- from the catalogs only: no lock on the runs table. $1 and $2 are the
-- schema's and the table's names; $3 and $4 the indexes' and $5 the claim
-- function's signature, quoted and qualified; $6 the index of ticks served
-- and $7 the signature of the claim function's overload with a tick; $8
-- the control table (version 5), quoted and qualified, and $9 the claim
-- function's name, quoted and qualified.
-- Version 6's bodies of both functions have no SET clause (proconfig is
-- NULL), and the one with a tick names its operators qualified. $10 is a
-- text that version 7's body of the one with a tick holds. $11 and $12
-- are version 8's tables of keys and of starts, $13 its index of running
-- runs' keys, $14 the signature of its overload with keys. $15 is
-- version 9s table of states, $16 the signature of its overload with a
-- state. $17 is version 8s index of running runs naming more than one
-- key ($13 is that of the runs naming one). $18 is version 10's index of
-- starts by number, $19 a text that its bodies of the overloads with keys
-- and with a state hold; its triggers are on $12. $20 is the signature of
-- version 11s claim function, $21 that of version 12s, which adds the
-- min_gap_us column of $11, and $22 that of version 13s, which adds the
-- replaced_by column of the runs table, the reserved_for column of $8 and
-- the index of replaced runs' ticks, $23.
-- The table's comment is read from pg_description, not with
-- obj_description: on PostgreSQL 13 that is an SQL function whose body
-- names = without pg_catalog, so the caller's search_path would pick it.
SELECT n.oid IS NOT NULL, c.oid IS NOT NULL, coalesce((SELECT d.description FROM pg_catalog.pg_description AS d
	WHERE d.objoid OPERATOR(pg_catalog.=) c.oid AND d.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
	  AND d.objsubid OPERATOR(pg_catalog.=) 0), ''),
	-- Version 1's indexes, version 2's column, version 3's function,
	-- version 4's column, index and function, version 5's table and the
	-- bodies of both functions that read it: the one with a tick names the
	-- table, the other calls the one with a tick.
	pg_catalog.to_regclass($3) IS NOT NULL AND pg_catalog.to_regclass($4) IS NOT NULL,
	EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attname OPERATOR(pg_catalog.=) 'min_interval' AND NOT a.attisdropped),
	pg_catalog.to_regprocedure($5) IS NOT NULL,
	EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attname OPERATOR(pg_catalog.=) 'tick' AND NOT a.attisdropped)
	AND pg_catalog.to_regclass($6) IS NOT NULL AND pg_catalog.to_regprocedure($7) IS NOT NULL,
	pg_catalog.to_regclass($8) IS NOT NULL
	AND EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure($7) AND pg_catalog.strpos(p.prosrc, $8) OPERATOR(pg_catalog.>) 0)
	AND EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure($5) AND pg_catalog.strpos(p.prosrc, $9) OPERATOR(pg_catalog.>) 0),
	EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure($7) AND p.proconfig IS NULL
	        AND pg_catalog.strpos(p.prosrc, 'OPERATOR(pg_catalog.=)') OPERATOR(pg_catalog.>) 0)
	AND EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure($5) AND p.proconfig IS NULL),
	EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure($7) AND p.proconfig IS NULL
	        AND pg_catalog.strpos(p.prosrc, $10) OPERATOR(pg_catalog.>) 0),
	EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attname OPERATOR(pg_catalog.=) 'keys' AND NOT a.attisdropped)
	AND pg_catalog.to_regclass($11) IS NOT NULL AND pg_catalog.to_regclass($12) IS NOT NULL
	AND pg_catalog.to_regclass($13) IS NOT NULL AND pg_catalog.to_regclass($17) IS NOT NULL AND pg_catalog.to_regprocedure($14) IS NOT NULL,
	pg_catalog.to_regclass($15) IS NOT NULL AND pg_catalog.to_regprocedure($16) IS NOT NULL,
	pg_catalog.to_regclass($18) IS NOT NULL
	AND EXISTS (SELECT FROM pg_catalog.pg_trigger AS t WHERE t.tgrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($12) AND t.tgname OPERATOR(pg_catalog.=) 'runclaim_number')
	AND EXISTS (SELECT FROM pg_catalog.pg_trigger AS t WHERE t.tgrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($12) AND t.tgname OPERATOR(pg_catalog.=) 'runclaim_renum')
	AND EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure($14) AND pg_catalog.strpos(p.prosrc, $19) OPERATOR(pg_catalog.>) 0)
	AND EXISTS (SELECT FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure($16) AND pg_catalog.strpos(p.prosrc, $19) OPERATOR(pg_catalog.>) 0),
	pg_catalog.to_regprocedure($20) IS NOT NULL,
	EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($11) AND a.attname OPERATOR(pg_catalog.=) 'min_gap_us' AND NOT a.attisdropped)
	AND pg_catalog.to_regprocedure($21) IS NOT NULL,
	EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attname OPERATOR(pg_catalog.=) 'replaced_by' AND NOT a.attisdropped)
	AND EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($8) AND a.attname OPERATOR(pg_catalog.=) 'reserved_for' AND NOT a.attisdropped)
	AND pg_catalog.to_regclass($23) IS NOT NULL AND pg_catalog.to_regprocedure($22) IS NOT NULL
FROM (SELECT) AS one
LEFT JOIN pg_catalog.pg_namespace AS n ON n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name
LEFT JOIN pg_catalog.pg_class AS c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) $2::pg_catalog.name
	AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p}'::pg_catalog."char"[])

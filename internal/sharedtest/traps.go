package sharedtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TrapSearchPath lists the schema PlantTraps fills before pg_catalog: a
// session with this search_path resolves every operator, function,
// aggregate and type name that is not schema-qualified to a trap.
const TrapSearchPath = "runclaim_trap, pg_catalog, public"

// trapSchema is the schema of the traps, the first of TrapSearchPath.
const trapSchema = "runclaim_trap"

// trapTypes are the type names a statement might write without a schema
// that are not SQL keywords (bigint, integer, boolean, interval and
// timestamp are, and always name pg_catalog's): each gets a domain in the
// trap schema whose check records its use.
var trapTypes = []string{"text", "timestamptz", "bytea", "int8", "int4", "int2", "bool", "float8", "numeric", "oid",
	"regclass", "regprocedure", "regproc", "regtype", "regnamespace", "regrole", "name", "json", "jsonb", "uuid", "xid", "xid8", "tid"}

// Traps are the objects PlantTraps made in a database, and what has fired.
type Traps struct {
	pool *pgxpool.Pool
	// Made counts what was planted: operators, functions, aggregates and
	// types.
	Operators, Functions, Aggregates, Types int
}

// PlantTraps creates, in the schema runclaim_trap of pool's database, a copy
// of every operator and function of pg_catalog that an SQL function can
// stand in for, with the same name and argument types (polymorphic ones
// included), a stand-in for every aggregate, and a domain for each common
// type name. Each copy records its call, then does what pg_catalog's does
// (an aggregate's stand-in returns its first value). A session whose
// search_path is TrapSearchPath reaches a copy through any operator,
// function or type name not qualified with pg_catalog: an exact copy
// listed earlier in the path wins over pg_catalog's, and for the inexact
// matches an attacker would plant in public (an operator that takes
// bigint where pg_catalog's takes float8) the pg_catalog candidate the
// statement would resolve to has its copy earlier. Every role may call the
// traps and record a call. Fired reports what was called.
func PlantTraps(t testing.TB, pool *pgxpool.Pool) *Traps {
	t.Helper()
	ctx := context.Background()
	setup := fmt.Sprintf(`
CREATE SCHEMA %[1]s;
GRANT USAGE ON SCHEMA %[1]s TO PUBLIC;
CREATE TABLE %[1]s.fired (what pg_catalog.text NOT NULL);
GRANT INSERT ON %[1]s.fired TO PUBLIC;
CREATE SEQUENCE %[1]s.hits;
GRANT USAGE, UPDATE ON SEQUENCE %[1]s.hits TO PUBLIC;
CREATE TABLE %[1]s.made (kind pg_catalog.text NOT NULL);
`, trapSchema)
	if _, err := pool.Exec(ctx, setup); err != nil {
		t.Fatalf("plant traps: %v", err)
	}
	// Generated on the server: a loop over pg_catalog's objects. Each
	// stand-in first takes a number of the sequence (which no rollback
	// gives back, so that a call in a statement that fails or a
	// savepoint that is rolled back still counts), then records its name
	// (lost with such a rollback, there for the report), then forwards.
	// Objects an SQL function cannot copy (internal, cstring, "any"
	// arguments; OUT parameters; variadic ones) are left out.
	const gen = `
DO $gen$
DECLARE
	p record;
	o record;
	n pg_catalog.int8 := 0;
	args pg_catalog.text;
	fwd pg_catalog.text;
	ret pg_catalog.text;
	tag pg_catalog.text;
	log pg_catalog.text;
BEGIN
	FOR p IN
		SELECT f.oid, f.proname, f.proretset, f.prokind, f.pronargs, f.proargtypes, f.prorettype,
			pg_catalog.pg_get_function_identity_arguments(f.oid) AS ident
		FROM pg_catalog.pg_proc AS f
		WHERE f.pronamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
		  AND f.prokind OPERATOR(pg_catalog.=) ANY (ARRAY['f', 'a']::pg_catalog."char"[])
		  AND f.proallargtypes IS NULL AND f.provariadic OPERATOR(pg_catalog.=) 0
		  AND NOT EXISTS (SELECT FROM pg_catalog.unnest(f.proargtypes::pg_catalog.oid[] OPERATOR(pg_catalog.||) f.prorettype) AS a(t)
			JOIN pg_catalog.pg_type AS ty ON ty.oid OPERATOR(pg_catalog.=) a.t
			WHERE ty.typtype OPERATOR(pg_catalog.=) 'p' AND NOT ty.typname OPERATOR(pg_catalog.~) '^any(array|element|nonarray|enum|range|multirange|compatible.*)$')
	LOOP
		n := n OPERATOR(pg_catalog.+) 1;
		tag := pg_catalog.format('%s(%s)', p.proname, p.ident);
		log := pg_catalog.format('SELECT pg_catalog.nextval(%L); INSERT INTO runclaim_trap.fired VALUES (%L);',
			'runclaim_trap.hits', tag);
		SELECT pg_catalog.string_agg(pg_catalog.format('%s', pg_catalog.format_type(a.t, NULL)), ', ' ORDER BY a.i),
			pg_catalog.string_agg(pg_catalog.format('$%s', a.i), ', ' ORDER BY a.i)
		INTO args, fwd
		FROM pg_catalog.unnest(p.proargtypes::pg_catalog.oid[]) WITH ORDINALITY AS a(t, i);
		args := coalesce(args, '');
		fwd := coalesce(fwd, '');
		ret := pg_catalog.format_type(p.prorettype, NULL);
		BEGIN
			IF p.prokind OPERATOR(pg_catalog.=) 'a' THEN
				IF p.pronargs OPERATOR(pg_catalog.=) 0 THEN
					-- count(*)
					EXECUTE pg_catalog.format('CREATE FUNCTION runclaim_trap.agg_%s(%s) RETURNS %s LANGUAGE sql AS %L',
						n, ret, ret, log OPERATOR(pg_catalog.||) ' SELECT $1');
					EXECUTE pg_catalog.format('CREATE AGGREGATE runclaim_trap.%I(*) (SFUNC = runclaim_trap.agg_%s, STYPE = %s)',
						p.proname, n, ret);
				ELSE
					EXECUTE pg_catalog.format('CREATE FUNCTION runclaim_trap.agg_%s(%s, %s) RETURNS %s LANGUAGE sql AS %L',
						n, ret, args, ret, log OPERATOR(pg_catalog.||) ' SELECT $1');
					EXECUTE pg_catalog.format('CREATE AGGREGATE runclaim_trap.%I(%s) (SFUNC = runclaim_trap.agg_%s, STYPE = %s)',
						p.proname, args, n, ret);
				END IF;
				INSERT INTO runclaim_trap.made VALUES ('aggregate');
			ELSE
				EXECUTE pg_catalog.format('CREATE FUNCTION runclaim_trap.%I(%s) RETURNS %s%s LANGUAGE sql AS %L',
					p.proname, args, CASE WHEN p.proretset THEN 'SETOF ' ELSE '' END, ret,
					log OPERATOR(pg_catalog.||) CASE WHEN p.proretset
						THEN pg_catalog.format(' SELECT * FROM pg_catalog.%I(%s)', p.proname, fwd)
						ELSE pg_catalog.format(' SELECT pg_catalog.%I(%s)', p.proname, fwd) END);
				INSERT INTO runclaim_trap.made VALUES ('function');
			END IF;
		EXCEPTION WHEN OTHERS THEN
			NULL; -- one that an SQL function cannot copy
		END;
	END LOOP;

	FOR o IN
		SELECT op.oprname, op.oprleft, op.oprright, op.oprresult, op.oprcode::pg_catalog.oid AS code,
			(SELECT f.proname FROM pg_catalog.pg_proc AS f WHERE f.oid OPERATOR(pg_catalog.=) op.oprcode::pg_catalog.oid) AS fname
		FROM pg_catalog.pg_operator AS op
		WHERE op.oprnamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
		  AND op.oprcode::pg_catalog.oid OPERATOR(pg_catalog.<>) 0
	LOOP
		n := n OPERATOR(pg_catalog.+) 1;
		tag := pg_catalog.format('operator %s(%s, %s)', o.oprname,
			CASE WHEN o.oprleft OPERATOR(pg_catalog.=) 0 THEN 'NONE' ELSE pg_catalog.format_type(o.oprleft, NULL) END,
			pg_catalog.format_type(o.oprright, NULL));
		log := pg_catalog.format('SELECT pg_catalog.nextval(%L); INSERT INTO runclaim_trap.fired VALUES (%L);',
			'runclaim_trap.hits', tag);
		BEGIN
			IF o.oprleft OPERATOR(pg_catalog.=) 0 THEN
				EXECUTE pg_catalog.format('CREATE FUNCTION runclaim_trap.op_%s(%s) RETURNS %s LANGUAGE sql AS %L',
					n, pg_catalog.format_type(o.oprright, NULL), pg_catalog.format_type(o.oprresult, NULL),
					log OPERATOR(pg_catalog.||) pg_catalog.format(' SELECT pg_catalog.%I($1)', o.fname));
				EXECUTE pg_catalog.format('CREATE OPERATOR runclaim_trap.%s (RIGHTARG = %s, FUNCTION = runclaim_trap.op_%s)',
					o.oprname, pg_catalog.format_type(o.oprright, NULL), n);
			ELSE
				EXECUTE pg_catalog.format('CREATE FUNCTION runclaim_trap.op_%s(%s, %s) RETURNS %s LANGUAGE sql AS %L',
					n, pg_catalog.format_type(o.oprleft, NULL), pg_catalog.format_type(o.oprright, NULL),
					pg_catalog.format_type(o.oprresult, NULL),
					log OPERATOR(pg_catalog.||) pg_catalog.format(' SELECT pg_catalog.%I($1, $2)', o.fname));
				EXECUTE pg_catalog.format('CREATE OPERATOR runclaim_trap.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = runclaim_trap.op_%s)',
					o.oprname, pg_catalog.format_type(o.oprleft, NULL), pg_catalog.format_type(o.oprright, NULL), n);
			END IF;
			INSERT INTO runclaim_trap.made VALUES ('operator');
		EXCEPTION WHEN OTHERS THEN
			NULL;
		END;
	END LOOP;
END
$gen$`
	if _, err := pool.Exec(ctx, gen); err != nil {
		t.Fatalf("plant traps: %v", err)
	}
	// The exact-type stand-ins an attacker planted in the security review,
	// for which pg_catalog has no exact match.
	extra := []string{
		`CREATE FUNCTION runclaim_trap.x_mul1(pg_catalog.int8, pg_catalog.interval) RETURNS pg_catalog.interval LANGUAGE sql AS $$SELECT pg_catalog.nextval('runclaim_trap.hits'); INSERT INTO runclaim_trap.fired VALUES ('operator *(bigint, interval)'); SELECT $1::pg_catalog.float8 OPERATOR(pg_catalog.*) $2$$`,
		`CREATE OPERATOR runclaim_trap.* (LEFTARG = pg_catalog.int8, RIGHTARG = pg_catalog.interval, FUNCTION = runclaim_trap.x_mul1)`,
		`CREATE FUNCTION runclaim_trap.x_mul2(pg_catalog.interval, pg_catalog.int8) RETURNS pg_catalog.interval LANGUAGE sql AS $$SELECT pg_catalog.nextval('runclaim_trap.hits'); INSERT INTO runclaim_trap.fired VALUES ('operator *(interval, bigint)'); SELECT $1 OPERATOR(pg_catalog.*) $2::pg_catalog.float8$$`,
		`CREATE OPERATOR runclaim_trap.* (LEFTARG = pg_catalog.interval, RIGHTARG = pg_catalog.int8, FUNCTION = runclaim_trap.x_mul2)`,
		`CREATE FUNCTION runclaim_trap.x_eqc(pg_catalog.oid, pg_catalog.regclass) RETURNS pg_catalog.bool LANGUAGE sql AS $$SELECT pg_catalog.nextval('runclaim_trap.hits'); INSERT INTO runclaim_trap.fired VALUES ('operator =(oid, regclass)'); SELECT $1 OPERATOR(pg_catalog.=) $2::pg_catalog.oid$$`,
		`CREATE OPERATOR runclaim_trap.= (LEFTARG = pg_catalog.oid, RIGHTARG = pg_catalog.regclass, FUNCTION = runclaim_trap.x_eqc)`,
		`CREATE FUNCTION runclaim_trap.x_eqp(pg_catalog.oid, pg_catalog.regprocedure) RETURNS pg_catalog.bool LANGUAGE sql AS $$SELECT pg_catalog.nextval('runclaim_trap.hits'); INSERT INTO runclaim_trap.fired VALUES ('operator =(oid, regprocedure)'); SELECT $1 OPERATOR(pg_catalog.=) $2::pg_catalog.oid$$`,
		`CREATE OPERATOR runclaim_trap.= (LEFTARG = pg_catalog.oid, RIGHTARG = pg_catalog.regprocedure, FUNCTION = runclaim_trap.x_eqp)`,
		`CREATE FUNCTION runclaim_trap.unnest(pg_catalog.text[]) RETURNS SETOF pg_catalog.text LANGUAGE sql AS $$SELECT pg_catalog.nextval('runclaim_trap.hits'); INSERT INTO runclaim_trap.fired VALUES ('unnest(text[])'); SELECT * FROM pg_catalog.unnest($1)$$`,
		`CREATE FUNCTION runclaim_trap.x_contains(pg_catalog.text[], pg_catalog.text[]) RETURNS pg_catalog.bool LANGUAGE sql AS $$SELECT pg_catalog.nextval('runclaim_trap.hits'); INSERT INTO runclaim_trap.fired VALUES ('operator @>(text[], text[])'); SELECT pg_catalog.arraycontains($1, $2)$$`,
		`CREATE OPERATOR runclaim_trap.@> (LEFTARG = pg_catalog.text[], RIGHTARG = pg_catalog.text[], FUNCTION = runclaim_trap.x_contains)`,
		`CREATE FUNCTION runclaim_trap.x_overlap(pg_catalog.text[], pg_catalog.text[]) RETURNS pg_catalog.bool LANGUAGE sql AS $$SELECT pg_catalog.nextval('runclaim_trap.hits'); INSERT INTO runclaim_trap.fired VALUES ('operator &&(text[], text[])'); SELECT pg_catalog.arrayoverlap($1, $2)$$`,
		`CREATE OPERATOR runclaim_trap.&& (LEFTARG = pg_catalog.text[], RIGHTARG = pg_catalog.text[], FUNCTION = runclaim_trap.x_overlap)`,
	}
	for _, q := range extra {
		if _, err := pool.Exec(ctx, q); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("plant traps: %s: %v", q, err)
		}
	}
	// The types: a domain over pg_catalog's type whose check records a
	// cast to it.
	for _, typ := range trapTypes {
		q := fmt.Sprintf(`CREATE FUNCTION runclaim_trap.type_%[1]s() RETURNS pg_catalog.bool LANGUAGE sql AS $$SELECT pg_catalog.nextval('runclaim_trap.hits'); INSERT INTO runclaim_trap.fired VALUES ('type %[1]s'); SELECT true$$;
CREATE DOMAIN runclaim_trap.%[1]s AS pg_catalog.%[1]s CHECK (runclaim_trap.type_%[1]s())`, typ)
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("plant traps: type %s: %v", typ, err)
		}
	}
	tr := &Traps{pool: pool, Types: len(trapTypes)}
	err := pool.QueryRow(ctx, `SELECT
	pg_catalog.count(*) FILTER (WHERE kind OPERATOR(pg_catalog.=) 'operator'),
	pg_catalog.count(*) FILTER (WHERE kind OPERATOR(pg_catalog.=) 'function'),
	pg_catalog.count(*) FILTER (WHERE kind OPERATOR(pg_catalog.=) 'aggregate')
	FROM runclaim_trap.made`).Scan(&tr.Operators, &tr.Functions, &tr.Aggregates)
	if err != nil {
		t.Fatalf("plant traps: %v", err)
	}
	return tr
}

// Fired returns the number of trap calls and the names of those whose
// record was kept (a call in a statement that was rolled back counts but
// leaves no name).
func (tr *Traps) Fired(t testing.TB) (calls int64, names []string) {
	t.Helper()
	ctx := context.Background()
	if err := tr.pool.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM runclaim_trap.hits`).Scan(&calls); err != nil {
		t.Fatalf("read traps: %v", err)
	}
	rows, err := tr.pool.Query(ctx, `SELECT what, pg_catalog.count(*) FROM runclaim_trap.fired GROUP BY what ORDER BY what`)
	if err != nil {
		t.Fatalf("read traps: %v", err)
	}
	for rows.Next() {
		var what string
		var n int64
		if err := rows.Scan(&what, &n); err != nil {
			t.Fatal(err)
		}
		names = append(names, fmt.Sprintf("%s ×%d", what, n))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return calls, names
}

// Reset forgets the calls so far.
func (tr *Traps) Reset(t testing.TB) {
	t.Helper()
	if _, err := tr.pool.Exec(context.Background(), `SELECT pg_catalog.setval('runclaim_trap.hits', 1, false); DELETE FROM runclaim_trap.fired`); err != nil {
		t.Fatal(err)
	}
}

// TrapDSN returns dsn with its search_path set to TrapSearchPath.
func TrapDSN(t testing.TB, dsn string) string {
	t.Helper()
	if _, err := pgx.ParseConfig(dsn); err != nil {
		t.Fatal(err)
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + strings.ReplaceAll(TrapSearchPath, " ", "")
}

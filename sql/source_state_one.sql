-- The one source $1 asks for.
SELECT $1::pg_catalog.text, 1

-- The one source $1 asks for.
SELECT $1::text, 1

-- The rows a table (or view) holds: what a publish reports, and an export's manifest.
SELECT count(*) FROM {{ identifier(table) }};

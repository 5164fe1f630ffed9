-- The CREATE TABLE statements of a DuckLake, one per table of $tables (in that order), from
-- the schema staged in catalog $db: ENUM columns become VARCHAR and keys are dropped (DuckLake
-- has neither; sql/steps/checks.sql checks the keys), NOT NULL is kept. Names are quoted.
SELECT 'CREATE TABLE IF NOT EXISTS "' || replace(table_name, '"', '""') || '" ('
       || string_agg('"' || replace(column_name, '"', '""') || '" '
                     || CASE WHEN data_type LIKE 'ENUM(%' THEN 'VARCHAR' ELSE data_type END
                     || CASE WHEN is_nullable THEN '' ELSE ' NOT NULL' END,
                     ', ' ORDER BY column_index)
       || ')' AS statement
FROM duckdb_columns()
WHERE database_name = $db AND schema_name = 'main' AND list_contains($tables::VARCHAR[], table_name)
GROUP BY table_name
ORDER BY list_position($tables::VARCHAR[], table_name);

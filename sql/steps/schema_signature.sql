-- Every column of every table of catalog $db with its type and nullability (an ENUM's type
-- lists its codes), in a fixed order: two catalogues with equal signatures have the same
-- schema, so the store copies the published file instead of rebuilding it.
SELECT table_name, column_index, column_name, data_type, is_nullable
FROM duckdb_columns()
WHERE database_name = $db AND schema_name = 'main'
  AND table_name IN (SELECT table_name FROM duckdb_tables() WHERE database_name = $db AND schema_name = 'main')
ORDER BY table_name, column_index;

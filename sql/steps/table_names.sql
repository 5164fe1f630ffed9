-- The tables catalog $db holds (a lake holds the catalogue's once a publish created them).
SELECT table_name FROM duckdb_tables() WHERE database_name = $db AND schema_name = 'main'
ORDER BY table_name;

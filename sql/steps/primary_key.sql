-- The columns of a table's primary key in a catalog, in their order (empty: it declares none).
SELECT constraint_column_names FROM duckdb_constraints()
WHERE database_name = $catalog AND table_name = $table AND constraint_type = 'PRIMARY KEY';

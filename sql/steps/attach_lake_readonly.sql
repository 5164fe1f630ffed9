-- Attach a DuckLake for reading as `catalog` (a read-only attach creates no lake).
ATTACH {{ literal(lake) }} AS {{ identifier(catalog) }} (DATA_PATH {{ literal(data_path) }}, READ_ONLY);

-- Attach a DuckLake for writing as `catalog`. Rows go to Parquet files under the data path,
-- not into the catalog database, so a writer holds the catalog only while it commits.
ATTACH {{ literal(lake) }} AS {{ identifier(catalog) }} (DATA_PATH {{ literal(data_path) }}, DATA_INLINING_ROW_LIMIT 0);

-- `speccat export`: a table or view with a setting_id, as Parquet files partitioned by it
-- (FOLDER/setting_id=ID/data_0.parquet).
COPY (SELECT * FROM {{ identifier(table) }}) TO {{ literal(path) }} (FORMAT parquet, PARTITION_BY (setting_id));

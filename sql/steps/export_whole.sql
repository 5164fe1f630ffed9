-- `speccat export`: a small table as one Parquet file.
COPY (SELECT * FROM {{ identifier(table) }}) TO {{ literal(path) }} (FORMAT parquet);

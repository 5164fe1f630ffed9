"""The store room: the DuckDB file and the DuckLake, what a night hands them, export and presentation."""

-- Load a DuckDB extension from its file (shipped by a PyPI package): no download, no network.
LOAD {{ literal(path) }};

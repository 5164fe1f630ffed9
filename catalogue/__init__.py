"""catalogue: op records, pricing and the DuckDB store (no Prefect, no Hub, no torch)."""

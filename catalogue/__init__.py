"""catalogue: the shared root (the vocabulary, the refusal type, the data-file reader and what
the census and the pricing both read), the pricing room (records/) and the DuckDB store
(store/); no Prefect, no Hub, no torch (docs/architecture.md)."""

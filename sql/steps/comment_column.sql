-- A view column's description (its header's meaning and unit), as a DuckDB column comment.
COMMENT ON COLUMN {{ identifier(view) }}.{{ identifier(column) }} IS {{ literal(text) }};

-- A fresh in-memory catalog: `incoming` (tonight's rows, staged) or `fresh` (the current
-- schema, to compare a published catalogue's against).
ATTACH ':memory:' AS {{ identifier(catalog) }};

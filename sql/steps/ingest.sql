-- Append an Arrow table registered on the connection (its name: `rows`) to a table of the
-- default catalog, matching columns by name. Types, ENUM codes and keys are enforced here.
INSERT INTO {{ identifier(table) }} BY NAME SELECT * FROM {{ identifier(rows) }};

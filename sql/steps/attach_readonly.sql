-- The published catalogue file, attached read-only to carry its rows into a new schema.
ATTACH {{ literal(path) }} AS {{ identifier(catalog) }} (READ_ONLY);

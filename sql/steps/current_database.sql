-- The connection's default catalog, to return to after USE of another.
SELECT current_database();

-- (SQLite) Switch a lake's SQLite catalog to WAL mode: readers then never block the committing
-- writer (in the default rollback journal, one writer's open read fails another's commit).
PRAGMA journal_mode=WAL;

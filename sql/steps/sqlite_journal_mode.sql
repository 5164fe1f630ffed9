-- (SQLite) The journal mode of a lake's SQLite catalog: 'wal' once the store has switched it.
PRAGMA journal_mode;

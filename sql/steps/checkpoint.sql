-- Write everything into the database file (and empty its WAL) before it is published.
CHECKPOINT;

-- A reference table replaced by tonight's rows, row by row under its primary key `key` (read
-- from the staged table's constraints by catalogue/store/file.py): a stored row whose key has
-- another row tonight, or none, is deleted, and tonight's rows not stored are inserted. A run
-- that stages none (a failed night) leaves the stored rows as they are.
DELETE FROM {{ identifier(table) }}
WHERE EXISTS (SELECT 1 FROM {{ identifier(source) }}.{{ identifier(table) }})
  AND ({{ identifiers(key) }}) IN (SELECT ({{ identifiers(key) }}) FROM (
        SELECT * FROM {{ identifier(table) }} EXCEPT SELECT * FROM {{ identifier(source) }}.{{ identifier(table) }}));
INSERT INTO {{ identifier(table) }} BY NAME
SELECT * FROM (SELECT * FROM {{ identifier(source) }}.{{ identifier(table) }} EXCEPT SELECT * FROM {{ identifier(table) }})
ORDER BY {{ identifiers(key) }};

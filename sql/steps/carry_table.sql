-- Copy every row of a table of the published catalogue (attached as `source`) into the same
-- table of a rebuilt one, column by column name: the columns the old table has.
INSERT INTO {{ identifier(table) }} ({{ identifiers(columns) }})
SELECT {{ identifiers(columns) }} FROM {{ identifier(source) }}.{{ identifier(table) }};

-- `speccat export`: one partition of a readable table (parameters first, second).
SELECT * FROM {{ identifier(table) }} WHERE {{ identifier(first) }} = $first AND {{ identifier(second) }} = $second;

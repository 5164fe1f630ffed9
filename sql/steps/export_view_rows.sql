-- `speccat export`: every row of a readable table small enough to be split into its partitions in memory.
SELECT * FROM {{ identifier(table) }};

-- `speccat export`: the distinct values of a readable table's two partition columns.
SELECT DISTINCT {{ identifier(first) }}, {{ identifier(second) }} FROM {{ identifier(table) }} ORDER BY ALL;

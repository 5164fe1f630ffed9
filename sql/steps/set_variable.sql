-- Set a query parameter as a DuckDB variable (`speccat query -p NAME=VALUE`, `speccat show`):
-- the queries read it with getvariable('NAME'). The value is bound, never SQL text.
SET VARIABLE {{ identifier(name) }} = $value;

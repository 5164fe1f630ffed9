-- Stored specs at $census, all of them ($hashes NULL) or those whose config_hash is in the list
-- $hashes: the flow prices them again under new records or a new grid without a census.
SELECT config_hash, spec::VARCHAR AS spec FROM specs
WHERE census_version = $census AND ($hashes IS NULL OR list_contains($hashes::VARCHAR[], config_hash))
ORDER BY config_hash;

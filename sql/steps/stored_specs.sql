-- Stored specs at $census measured by transformers $transformers and torch $torch (NULL: any
-- library), all of them ($hashes NULL) or those whose config_hash is in the list $hashes: the
-- flow prices them again under new records or a new grid without a census. Where a config has
-- specs of several libraries and no library is named, the last by the versions' text wins.
SELECT config_hash, spec::VARCHAR AS spec FROM specs
WHERE census_version = $census AND ($hashes IS NULL OR list_contains($hashes::VARCHAR[], config_hash))
  AND ($transformers IS NULL OR transformers_version = $transformers) AND ($torch IS NULL OR torch_version = $torch)
ORDER BY config_hash, transformers_version, torch_version;

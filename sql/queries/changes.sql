-- What changed between the two latest good nights: repos added, removed, with a new config or
-- sha, repriced under new versions (and why), the repos still failing (where and why), and per
-- repo and kind the measured and priced bytes per token that changed under the same config
-- (`bytes`: a new transformers or torch, or a new census or records), with both nights' libraries.
SELECT change, repo_id, kind, old_sha, new_sha, old_config_hash, new_config_hash,
       old_downloads, new_downloads, repriced_because, failed_stage, failed_reason,
       old_transformers_version, new_transformers_version, old_torch_version, new_torch_version,
       old_measured_per_token, new_measured_per_token, measured_change_pct,
       old_priced_per_token, new_priced_per_token, priced_change_pct
FROM changes
ORDER BY change, repo_id, kind NULLS FIRST;

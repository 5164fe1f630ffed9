-- What changed between the two latest good nights: repos added, removed, with a new config or
-- sha, repriced under new versions (and why), and the repos still failing (where and why).
SELECT change, repo_id, old_sha, new_sha, old_config_hash, new_config_hash,
       old_downloads, new_downloads, repriced_because, failed_stage, failed_reason
FROM changes
ORDER BY change, repo_id;

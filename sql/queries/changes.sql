-- What changed since the previous run: repos added, removed, or with a new config or sha,
-- and why a repo that failed tonight failed.
SELECT change, repo_id, old_sha, new_sha, old_config_hash, new_config_hash,
       old_downloads, new_downloads, failed_stage, failed_reason
FROM changes
ORDER BY change, repo_id;

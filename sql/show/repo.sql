-- `speccat show`: one repo's metadata and latest spec (one row). Parameter: repo_id.
SELECT * FROM latest_specs WHERE repo_id = getvariable('repo_id');

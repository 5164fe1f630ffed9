-- Table failures: one row per repo a night could not store, with the stage and the reason
-- (the vocabulary's codes) and a one-line message. Key: (run_id, repo_id).
CREATE TABLE IF NOT EXISTS failures (
    run_id  VARCHAR NOT NULL,
    repo_id VARCHAR NOT NULL,
    stage   stage NOT NULL,
    reason  reason NOT NULL,
    message VARCHAR NOT NULL,
    PRIMARY KEY (run_id, repo_id)
);

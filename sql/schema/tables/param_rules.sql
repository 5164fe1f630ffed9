-- Table param_rules: catalogue/hub_params.yaml's rules as rows, the latest night's (the store
-- replaces it at every publish): how the view repo_params states why a repo's census parameter
-- count and the Hub's differ. The rules are tried by position; the first whose every test holds
-- gives the cause. A NULL test holds. Key: position.
CREATE TABLE IF NOT EXISTS param_rules (
    position                 INTEGER PRIMARY KEY,  -- the rule's place in the file, 0 first
    cause                    param_cause NOT NULL,
    tied                     BOOLEAN,              -- the spec's head is (true) or is not tied to its embedding
    config_counts            VARCHAR[],            -- language-config counts; the rule holds when their sum is above 0
    config_parts             VARCHAR[],            -- words, one of which a part of the repo's config names (split at "_")
    hub_dtypes               VARCHAR[],            -- dtypes, one of which the Hub counts parameters of
    difference               VARCHAR,              -- 'equals', 'at_most', 'positive' or 'negative'
    expected_embedding       DOUBLE NOT NULL,      -- the expected difference's factor of params.embedding
    expected_largest_layer   DOUBLE NOT NULL,      -- ... of one layer of the kind with the most parameters
    expected_hidden_squared  DOUBLE NOT NULL,      -- ... of hidden_size²
    tolerance                DOUBLE NOT NULL       -- the share of the census count within which a difference is met
);

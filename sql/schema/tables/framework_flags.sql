-- Table framework_flags: catalogue/records/flags.yaml as rows, the latest night's (the store
-- replaces it when a night states them): per training framework and flag, its version and
-- source, the stack whose prices it describes, and what it gives: the switches whose saves it
-- drops (mask: their switch set), full recompute (mask -1), or, with mask NULL, why no switch
-- set is what it does (beyond). Key: (framework, flag).
CREATE TABLE IF NOT EXISTS framework_flags (
    framework  VARCHAR NOT NULL,
    version    VARCHAR NOT NULL,   -- the framework's version the flag is read from
    source     VARCHAR NOT NULL,   -- where in the framework the flag's meaning is stated
    stack      VARCHAR NOT NULL,   -- the stack (settings) whose prices it describes
    flag       VARCHAR NOT NULL,
    switches   VARCHAR[] NOT NULL, -- the switches whose saves it drops (empty for full recompute or beyond)
    mask       SMALLINT,           -- their switch set; -1 for full recompute; NULL when beyond
    command    VARCHAR,            -- how it is written on its own
    beyond     VARCHAR,            -- why no switch set is what it does
    recomputes VARCHAR,            -- what it recomputes, in the framework's words
    checked    VARCHAR,            -- the test that holds the mapping to a source outside the records
    PRIMARY KEY (framework, flag)
);

-- Table crawls: one row per `--scope all` Hub night: where its listing began and ended and what
-- it leaves the next night (docs/refresh.md "The whole Hub"). Key: run_id (a row of runs).
-- `since` is the lastModified the listing went down to (NULL: every repo, a full listing);
-- `next_since` the one the next night lists down to: the newest lastModified listed when every
-- listed repo was fetched or refused, else the oldest lastModified still owed a fetch, else
-- `since` again when the listing itself was cut off. Only a completed or partial night's row is
-- read back (the newest such night's); the requests columns are what the night spent.
CREATE TABLE IF NOT EXISTS crawls (
    run_id             VARCHAR PRIMARY KEY,
    listing            VARCHAR NOT NULL,     -- 'full' or 'changes'
    tier               VARCHAR NOT NULL,     -- the plan whose quotas it spent (flows/hub_limits.yaml)
    since              TIMESTAMPTZ,
    next_since         TIMESTAMPTZ,
    listing_complete   BOOLEAN NOT NULL,     -- the listing reached `since` (or its end)
    n_listed           INTEGER NOT NULL,     -- repos listed
    n_fetched          INTEGER NOT NULL,     -- configs fetched (a new or changed sha)
    n_unchanged        INTEGER NOT NULL,     -- listed at a sha whose config the catalogue holds
    n_pending          INTEGER NOT NULL,     -- listed, left for the next night by the budget
    n_gone             INTEGER NOT NULL,     -- stored Hub repos a complete full listing no longer lists
    api_requests       INTEGER NOT NULL,
    resolver_requests  INTEGER NOT NULL,
    windows            INTEGER NOT NULL,     -- rate-limit windows the night spanned
    waited_s           DOUBLE NOT NULL,      -- seconds spent waiting for a window
    stopped            VARCHAR               -- the bucket whose budget ended the night; NULL when it ran out of work
);

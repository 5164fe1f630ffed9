-- The crawl state a `--scope all` night starts from (flows/crawl.py): the newest crawl of a
-- completed or partial night (its next_since is where tonight's listing stops), and how many
-- such crawls followed the newest complete full listing (a full listing is due every
-- full_listing_every nights, flows/hub_limits.yaml). No row: no crawl yet.
WITH good AS (
    SELECT c.*, r.started FROM crawls AS c JOIN runs AS r USING (run_id)
    WHERE r.status IN ('completed', 'partial')
),
last_full AS (
    SELECT max(started) AS started FROM good WHERE listing = 'full' AND listing_complete
)
SELECT g.next_since, g.listing,
       (SELECT count(*) FROM good WHERE started > coalesce((SELECT started FROM last_full), '-infinity'::TIMESTAMPTZ))
           AS since_full,
       (SELECT started FROM last_full) IS NOT NULL AS listed_in_full
FROM good AS g
ORDER BY g.started DESC, g.run_id DESC LIMIT 1;

"""The `--scope all` Hub night's crawl: what to list, what to fetch, and what it leaves the next night.

The catalogue holds the crawl state (docs/refresh.md "The whole Hub"): the table `crawls` (one
row per scope-all night: where its listing stopped, `next_since`, and the budget it spent) and
the Hub repos of `repos` with the sha each was last listed at (sql/steps/crawl_repos.sql). A
night reads them before it lists (`read_state`), and hands its own row to the publish with
everything else it found, so a night that is not published (a failed listing, a crash) changes
nothing, and the next night starts where the last published one left off.

- The listing (`HubSource.crawl`) is the Hub's, newest change first (`sort="last_modified"`),
  stopped once past `since`; every `full_listing_every` nights (flows/hub_limits.yaml), and on
  the first, it lists everything, and a stored Hub repo it no longer lists is counted gone.
- A listed repo is fetched only at a new, changed or unsettled sha (`to_fetch`); the others keep
  the config the catalogue holds for their sha.
- When the budget (flows/hub_budget.py) stops the night, the repos not fetched are left out of
  tonight's rows (`pending`) and `next_since` stays at or below the oldest of them, so the next
  night lists and fetches them; fetches that failed in a way another try may mend (`RETRIED`)
  hold it down alike.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import datetime

from speccat.flows.hub import FETCH_FAILED, RATE_LIMITED, Listing

# Failures another night may mend at the same sha: their repos are fetched again, and they keep
# the next listing from passing them.
RETRIED = (FETCH_FAILED, RATE_LIMITED)
FULL, CHANGES = "full", "changes"


@dataclass(frozen=True)
class CrawlState:
    """What the catalogue says a scope-all night starts from."""

    since: datetime | None  # the last crawl's next_since (None: no crawl yet)
    full_due: bool  # tonight lists every repo
    settled: dict[str, str]  # repo_id -> the sha whose config is stored or refused for good
    hub_repos: frozenset[str]  # every Hub repo the catalogue holds
    hashes: dict[str, str] = field(default_factory=dict)  # repo_id -> the config_hash of its settled sha

    @property
    def listing(self) -> str:
        return FULL if self.full_due else CHANGES

    @property
    def listing_since(self) -> datetime | None:
        """Where tonight's listing stops: nowhere on a full listing."""
        return None if self.full_due else self.since


def read_state(con, full_listing_every: int) -> CrawlState:
    """The crawl state in an open catalogue (None: no catalogue yet, nothing crawled)."""
    import duckdb

    from speccat import sql

    if con is None:
        return CrawlState(None, True, {}, frozenset())
    try:
        last = con.execute(sql.load("steps/crawl_last")).fetchone()
        repos = con.execute(sql.load("steps/crawl_repos"), {"retried": list(RETRIED)}).fetchall()
    except duckdb.CatalogException:  # a catalogue from before the crawls table: nothing crawled
        return CrawlState(None, True, {}, frozenset())
    settled = {repo_id: sha for repo_id, sha, _, done in repos if done and sha is not None}
    hashes = {repo_id: h for repo_id, _, h, done in repos if done and h is not None}
    hub = frozenset(repo_id for repo_id, *_ in repos)
    if last is None:
        return CrawlState(None, True, settled, hub, hashes)
    next_since, _, since_full, listed_in_full = last
    full_due = next_since is None or not listed_in_full or since_full >= full_listing_every - 1
    return CrawlState(next_since, full_due, settled, hub, hashes)


def state_of(target, full_listing_every: int) -> CrawlState:
    """`read_state` of the published catalogue (file or lake); nothing crawled when there is none."""
    from speccat.catalogue.store.night import StoreError

    try:
        with target.open_readonly() as con:
            return read_state(con, full_listing_every)
    except StoreError as err:
        if err.reason != "no_catalogue":
            raise
        return read_state(None, full_listing_every)


def to_fetch(listings: list[Listing], state: CrawlState, current: frozenset[str] | None = None) -> tuple[list[Listing], list[Listing]]:
    """(to fetch, unchanged): a repo is fetched unless it is listed at its settled sha and its
    config is among `current` (specced and priced at tonight's versions and grid; None: any).
    A config tonight's versions have not measured is fetched again, which for a sha already in
    the Hugging Face cache costs no request, so that the plan stage censuses it anew and an
    upgrade never leaves an unchanged repo without a spec. Those to fetch come oldest change first."""

    def unchanged(l: Listing) -> bool:
        if l.sha is None or state.settled.get(l.repo_id) != l.sha:
            return False
        known = state.hashes.get(l.repo_id)
        return known is None or current is None or known in current

    fetch = sorted((l for l in listings if not unchanged(l)), key=lambda l: (l.last_modified or "", l.repo_id))
    return fetch, [l for l in listings if unchanged(l)]


def next_since(listings: list[Listing], since: datetime | None, complete: bool, owed: list[Listing]) -> datetime | None:
    """Where the next night's listing stops (module docstring): `since` (the last crawl's) again
    when tonight's listing was cut off; else the oldest change of a repo tonight still owes a
    fetch; else the newest change listed."""
    if not complete:
        return since
    dates = [_when(l) for l in owed if l.last_modified]
    if dates:
        return min(dates)
    listed = [_when(l) for l in listings if l.last_modified]
    return max(listed) if listed else since


def _when(listing: Listing) -> datetime:
    return datetime.fromisoformat(listing.last_modified)


def crawl_row(
    state: CrawlState, tier: str, listings: list[Listing], complete: bool, fetched: int, unchanged: int,
    pending: list[Listing], retried: list[Listing], budget: dict,
) -> dict:
    """The night's row of `crawls` (sql/schema/tables/crawls.sql)."""
    gone = len(state.hub_repos - {l.repo_id for l in listings}) if state.full_due and complete else 0
    return {
        "listing": state.listing,
        "tier": tier,
        "since": state.listing_since,
        "next_since": next_since(listings, state.since, complete, pending + retried),
        "listing_complete": complete,
        "n_listed": len(listings),
        "n_fetched": fetched,
        "n_unchanged": unchanged,
        "n_pending": len(pending),
        "n_gone": gone,
        "api_requests": budget["requests"].get("api", 0),
        "resolver_requests": budget["requests"].get("resolvers", 0),
        "windows": budget["windows"],
        "waited_s": budget["waited_s"],
        "stopped": budget["stopped"],
    }

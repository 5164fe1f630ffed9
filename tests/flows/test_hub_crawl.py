"""The whole Hub, incrementally, within its rate limits (`--scope all`: flows/crawl.py,
flows/hub_budget.py), against the stand-in Hub serving a synthetic Hub (tests/support/synthetic_hub.py).

Fast tests: the budget on its own clock (counting, waiting for the next window, stopping before
the night's end, the Hub's RateLimit headers); the real huggingface_hub client through the budget
against the stand-in (a listing that stops at `since` asks for no further page, a file in LFS
storage costs one resolver request and reaches the CDN without the token, a 429 after another
client spent the window is huggingface_hub's to wait out and retry); where the next listing stops.

Flow nights (slow), one catalogue: a first night lists everything; a second lists only what
changed (a changed config, a new commit at the same config, a new repo; a deleted repo and a
gated one); a third is cut off by the resolver budget and the fourth resumes where it stopped;
a fifth is a full listing and counts the deleted repo gone. The stand-in's own request log
checks what each night asked for.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import datetime, timezone

import httpx2
import pytest
from conftest import SNAPSHOT
from support.hubstandin import Repo, StandinHub, point_huggingface_hub_at
from support.refresh_runs import rows, run_refresh
from support.synthetic_hub import START, change, synthetic_repos, variant, when

from speccat.census import config_hash
from speccat.flows import hub_budget
from speccat.flows.crawl import CrawlState, next_since, to_fetch
from speccat.flows.hub import HubSource, Listing
from speccat.flows.hub_budget import Budget, BudgetSpent, load_limits


class Clock:
    """A clock the budget waits on without sleeping."""

    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def budget(quotas, window_s=300.0, night_s=3600.0) -> tuple[Budget, Clock]:
    clock = Clock()
    return Budget(quotas, window_s, night_s, clock=clock, sleep=clock.sleep), clock


# -- the budget ------------------------------------------------------------------------------


def test_the_data_file_holds_the_hubs_published_quotas():
    limits = load_limits()
    assert limits.window_s == 300
    assert limits.tiers["free"] == {"api": 1000, "resolvers": 5000, "pages": 200}
    assert limits.tiers["anonymous"] == {"api": 500, "resolvers": 3000, "pages": 100}
    assert limits.quotas("pro") == {b: int(q * limits.share) for b, q in limits.tiers["pro"].items()}


def test_an_unknown_tier_is_one_clear_refusal():
    from speccat.catalogue.errors import InputError

    with pytest.raises(InputError, match="unknown Hub tier 'gold'") as err:
        load_limits().quotas("gold")
    assert err.value.reason == "bad_argument"


def test_a_spent_window_waits_for_the_next_and_counts_every_request():
    spend, clock = budget({"api": 2, "resolvers": 3})
    for _ in range(3):
        spend.acquire("resolvers")
    spend.acquire("api")
    assert clock.slept == []
    spend.acquire("resolvers")  # the fourth waits for the next window
    assert clock.slept == [300.0]
    assert spend.report()["requests"] == {"api": 1, "resolvers": 4}
    assert spend.report()["windows"] == 2 and spend.report()["waited_s"] == 300.0


def test_a_wait_past_the_nights_end_stops_the_night_before_the_request():
    spend, clock = budget({"api": 1, "resolvers": 1}, night_s=100.0)
    spend.acquire("resolvers")
    with pytest.raises(BudgetSpent, match="resolvers"):
        spend.acquire("resolvers")
    with pytest.raises(BudgetSpent):  # once spent, every bucket stops at once
        spend.acquire("api")
    assert clock.slept == [] and spend.report()["requests"] == {"api": 0, "resolvers": 1}
    assert spend.report()["stopped"] == "resolvers"


def test_the_hubs_ratelimit_headers_are_honoured():
    spend, clock = budget({"api": 100, "resolvers": 100})
    # Nothing left in the Hub's window (another client spent it): wait its 40 s.
    spend.observe("resolvers", {"RateLimit": '"resolvers";r=0;t=40'})
    spend.acquire("resolvers")
    assert clock.slept == [40.0]
    # A policy lower than the table's quota wins, at the table's share, over our window.
    spend.observe("api", {"RateLimit": '"api";r=9;t=100', "RateLimit-Policy": '"fixed window";"api";q=10;w=300'})
    assert spend.quotas["api"] == int(10 * hub_budget.LIMITS.share)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["refresh", "--scope", "all"], "needs --source hub and no --limit"),
        (["refresh", "--source", "hub", "--scope", "all", "--limit", "5"], "needs --source hub and no --limit"),
        (["refresh", "--source", "hub", "--scope", "all", "--hub-tier", "gold"], "unknown Hub tier 'gold'"),
    ],
)
def test_a_bad_scope_or_tier_is_refused_in_one_line_before_the_night(argv, says, capsys):
    from speccat.flows.cli import main

    assert main(argv + ["--db", "/nonexistent/never-written.duckdb"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad_argument" in err and says in err


# -- huggingface_hub through the budget, against the stand-in --------------------------------


@pytest.fixture
def small_hub(tmp_path, monkeypatch):
    repos, _ = synthetic_repos(20, 5, gated_every=7, lfs_every=4)
    with StandinHub(repos, page_size=3, limits={"resolvers": 6}, window_s=2) as hub:
        monkeypatch.setenv("HF_TOKEN", "hf_crawl_token")
        point_huggingface_hub_at(monkeypatch, hub.url, str(tmp_path / "cache"))
        yield hub


def listing_pages(hub) -> list:
    return [r for r in hub.requests if r.path == "/api/models"]


def test_a_listing_since_a_time_asks_for_no_page_past_it(small_hub):
    spend, _ = budget({"api": 50, "resolvers": 50})
    since = datetime.fromisoformat(when(15).replace("Z", "+00:00"))
    with spend.installed():
        listed = list(HubSource().crawl(since))
    # Repos 19..15 changed at or after minute 15, newest first; with 3 a page, the second page
    # shows repo 14 (older): no third page is asked for.
    assert [l.repo_id.rsplit("-ft", 1)[1] for l in listed] == ["19", "18", "17", "16", "15"]
    assert len(listing_pages(small_hub)) == 2
    assert listed[0].safetensors == tuple(small_hub.repos[listed[0].repo_id].safetensors.items())
    assert spend.report()["requests"]["api"] == len([r for r in small_hub.requests if r.path.startswith("/api/")])


def test_a_file_in_lfs_storage_costs_one_resolver_request_and_reaches_the_cdn_without_the_token(small_hub):
    spend, _ = budget({"api": 50, "resolvers": 50})
    lfs = small_hub.repos["org19/Qwen1.5-MoE-A2.7B-Chat-ft19"]
    plain = small_hub.repos["org18/MiniMax-M1-80k-ft18"]
    assert lfs.lfs and not plain.lfs
    with spend.installed():
        for repo in (lfs, plain):
            path = HubSource().fetch(Listing(repo.repo_id, "hub", sha=repo.sha))
            assert path.read_bytes() == repo.files["config.json"]
    cdn = [r for r in small_hub.requests if r.path.startswith("/cdn/")]
    assert [(r.method, r.authorization) for r in cdn] == [("GET", None)]
    # The LFS file: a HEAD answered 302 (not followed off the Hub); the plain one: HEAD and GET.
    assert spend.report()["requests"]["resolvers"] == 1 + 2


def test_a_429_after_another_client_spent_the_window_is_waited_out_and_retried(small_hub):
    repo = small_hub.repos["org18/MiniMax-M1-80k-ft18"]
    url = f"{small_hub.url}/{repo.repo_id}/resolve/{repo.sha}/config.json"
    for _ in range(6):  # another client of the same account spends the stand-in's window
        httpx2.head(url)
    spend, _ = budget({"api": 50, "resolvers": 50})
    with spend.installed():
        path = HubSource().fetch(Listing(repo.repo_id, "hub", sha=repo.sha))
    assert path.read_bytes() == repo.files["config.json"]
    assert small_hub.throttled >= 1  # huggingface_hub got the 429 and waited as RateLimit said
    ours = [r for r in small_hub.requests[6:] if "/resolve/" in r.path]
    assert spend.report()["requests"]["resolvers"] == len(ours) >= 3  # the 429 counted too


# -- where the next night's listing stops -----------------------------------------------------


def listing(name: str, minutes: float, sha: str = "a") -> Listing:
    return Listing(name, "hub", sha=sha, last_modified=when(minutes).replace("Z", "+00:00"))


def test_only_new_and_changed_shas_are_fetched_oldest_first():
    state = CrawlState(None, False, {"held": "a", "moved": "a", "old": "a"}, frozenset({"held", "moved", "old", "gone"}),
                       {"held": "h1", "moved": "h1", "old": "h0"})  # fmt: skip
    listed = [listing("new", 9), listing("moved", 5, sha="b"), listing("held", 7), listing("old", 2)]
    fetch, unchanged = to_fetch(listed, state, frozenset({"h1"}))
    # "old" is unchanged, but its config has no spec at tonight's versions: fetched again (from
    # the Hugging Face cache), so the plan censuses it anew.
    assert [l.repo_id for l in fetch] == ["old", "moved", "new"] and [l.repo_id for l in unchanged] == ["held"]


def test_the_next_listing_stops_below_what_tonight_still_owes():
    since = datetime.fromisoformat(when(1).replace("Z", "+00:00"))
    listed = [listing("a", 9), listing("b", 5), listing("c", 3)]
    minute = lambda m: datetime.fromisoformat(when(m).replace("Z", "+00:00"))  # noqa: E731
    assert next_since(listed, since, True, []) == minute(9)
    assert next_since(listed, since, True, [listed[1], listed[0]]) == minute(5)
    assert next_since(listed, since, False, []) == since  # a listing cut off lists again from the top


# -- nights of the flow -------------------------------------------------------------------------

SMALL = ("HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen3-0.6B", "openai-community/gpt2")


@pytest.fixture(scope="module")
def crawl_nights(prefect_api, tmp_path_factory):
    """Five nights over one synthetic Hub and one catalogue (module docstring)."""
    tmp = tmp_path_factory.mktemp("hub-crawl")
    snapshot = tmp / "snapshot"
    for repo_id in SMALL:
        shutil.copytree(SNAPSHOT / repo_id.replace("/", "__", 1), snapshot / repo_id.replace("/", "__", 1))
    repos, configs = synthetic_repos(12, 3, gated_every=6, lfs_every=5, snapshot=snapshot)
    db = tmp / "catalogue.duckdb"
    out = {"configs": configs}
    with pytest.MonkeyPatch.context() as monkeypatch, StandinHub(repos, page_size=4) as hub:
        monkeypatch.setenv("HF_TOKEN", "hf_crawl_token")
        point_huggingface_hub_at(monkeypatch, hub.url, str(tmp / "hf-cache"))
        limits = hub_budget.LIMITS

        def night(name: str, **changes) -> None:
            monkeypatch.setattr(hub_budget, "LIMITS", replace(limits, **changes))
            hub.requests.clear()
            state, counts = run_refresh(source="hub", scope="all", db=str(db), retry_delays=[0.1], report=False)
            out[name] = (state, counts, list(hub.requests))

        night("first", full_listing_every=10)
        ids = sorted(hub.repos, key=lambda r: int(r.rsplit("-ft", 1)[1]))
        out["ids"] = ids
        # Night 2: repo 0 gets another config (a bigger vocabulary), repo 1 a new commit of the
        # same config, a new repo appears, repo 2 is deleted.
        change(hub, [ids[0]], 100, config=variant(configs[0], 3, 3))
        change(hub, [ids[1]], 101)
        new = hub.add(Repo("neworg/fresh", "f" * 40, files={"config.json": hub.repos[ids[3]].files["config.json"]},
                           last_modified=when(102), downloads=1))  # fmt: skip
        hub.remove(ids[2])
        night("second", full_listing_every=10)
        out["new"] = new.repo_id
        # Night 3: six repos change; the resolver budget (4 a window, the night ending before the
        # next) lets two configs through. Night 4 resumes with the usual budget.
        change(hub, ids[4:10], 200)
        tight = {**limits.tiers, "free": {**limits.tiers["free"], "resolvers": 5}}
        night("cut", full_listing_every=10, tiers=tight, share=1.0, night_s=1.0)
        night("resumed", full_listing_every=10)
        # Night 5: a full listing is due (the third night since the last full listing).
        night("full", full_listing_every=3)
        yield hub, db, out


def crawl_of(out, name) -> dict:
    return out[name][1]["crawl"]


def resolver_requests(requests) -> int:
    return len([r for r in requests if "/resolve/" in r.path])


@pytest.mark.slow
def test_the_first_night_lists_every_repo_and_fetches_each_config(crawl_nights):
    hub, db, out = crawl_nights
    state, counts, requests = out["first"]
    assert state.is_completed()
    crawl = crawl_of(out, "first")
    assert crawl["listing"] == "full" and crawl["listing_complete"] and crawl["since"] is None
    assert crawl["n_listed"] == 12 and crawl["n_fetched"] == 12 and crawl["n_pending"] == 0
    assert counts["failures"] == {"gated": 2}  # repos 5 and 11 are gated
    assert counts["configs"] == 3 and counts["new_configs"] + counts["stored"] == 3
    assert crawl["next_since"] == datetime.fromisoformat(when(11).replace("Z", "+00:00")).isoformat()
    # Every request counted, in its bucket, as the stand-in saw them.
    assert crawl["resolver_requests"] == resolver_requests(requests)
    assert crawl["api_requests"] == len([r for r in requests if r.path.startswith("/api/")])
    assert rows(db, "SELECT listing, n_listed, n_fetched FROM crawls WHERE run_id = ?", [counts["run_id"]]) == [("full", 12, 12)]


@pytest.mark.slow
def test_a_later_night_lists_and_fetches_only_what_changed(crawl_nights):
    hub, db, out = crawl_nights
    state, counts, requests = out["second"]
    ids = out["ids"]
    assert state.is_completed()
    crawl = crawl_of(out, "second")
    # Listed down to the last night's newest change, itself included (unchanged: not fetched).
    assert crawl["listing"] == "changes" and crawl["n_listed"] == 4 and crawl["n_fetched"] == 3 and crawl["n_unchanged"] == 1
    fetched = {r.path.split("/resolve/")[0].lstrip("/") for r in requests if "/resolve/" in r.path}
    assert fetched == {ids[0], ids[1], out["new"]}
    # Four a page: the first holds the three changes and the last night's newest, the second the
    # first repo older than that; the third page is never asked for.
    assert len([r for r in requests if r.path == "/api/models"]) == 2
    changed = config_hash(json.loads(hub.repos[ids[0]].files["config.json"]))
    assert counts["new_configs"] == 1 and rows(db, "SELECT config_hash FROM repos WHERE repo_id = ?", [ids[0]]) == [(changed,)]
    # The deleted repo and the untouched ones keep what the catalogue held.
    assert rows(db, "SELECT count(*) FROM repos WHERE config_hash IS NOT NULL") == [(11,)]
    assert crawl["n_gone"] == 0  # a changed-only listing cannot see a deletion


@pytest.mark.slow
def test_a_night_cut_off_by_the_budget_publishes_what_it_fetched_and_the_next_resumes(crawl_nights):
    hub, db, out = crawl_nights
    ids = out["ids"]
    state, counts, requests = out["cut"]
    cut = crawl_of(out, "cut")
    assert state.is_completed()
    assert cut["stopped"] == "resolvers" and cut["listing_complete"]
    assert cut["n_listed"] == 7 and cut["n_unchanged"] == 1  # the six changed, and the last night's newest
    assert cut["n_pending"] > 0 and cut["n_fetched"] + cut["n_pending"] == 6
    # The budget held: no more resolver requests than the window's quota reached the Hub.
    assert resolver_requests(requests) == cut["resolver_requests"] <= 5
    pending = cut["n_pending"]
    assert counts["repos"] == 7 - pending  # the repos left over are not tonight's rows
    resumed = crawl_of(out, "resumed")
    assert resumed["stopped"] is None and resumed["n_pending"] == 0
    assert resumed["n_fetched"] == pending  # only what the cut night left
    held = dict(rows(db, "SELECT repo_id, sha FROM repos"))
    assert all(held[r] == hub.repos[r].sha for r in ids[4:10])


@pytest.mark.slow
def test_a_full_listing_counts_the_deleted_repo_gone_and_fetches_nothing_unchanged(crawl_nights):
    hub, db, out = crawl_nights
    state, counts, requests = out["full"]
    full = crawl_of(out, "full")
    assert state.is_completed()
    assert full["listing"] == "full" and full["n_listed"] == len(hub.repos) and full["n_gone"] == 1
    # Nothing changed since the last night: the gated repos are settled, nothing is fetched.
    assert full["n_fetched"] == 0 and resolver_requests(requests) == 0
    # Tonight's rows keep each unchanged repo's config: every config-holding repo is in the run.
    # (the three shipped configs and repo 0's bigger vocabulary)
    assert rows(db, "SELECT n_configs FROM runs WHERE run_id = ?", [counts["run_id"]]) == [(4,)]
    assert rows(db, "SELECT count(*) FROM crawls") == [(5,)]


@pytest.mark.slow
def test_the_budget_spent_is_in_the_summary_and_the_catalogue(crawl_nights):
    _, db, out = crawl_nights
    crawl = crawl_of(out, "cut")
    assert crawl["budget"]["requests"]["resolvers"] == crawl["resolver_requests"]
    assert crawl["budget"]["quotas"]["resolvers"] == 5 and crawl["tier"] == "free"
    stored = rows(db, "SELECT resolver_requests, stopped FROM crawls ORDER BY since NULLS FIRST, run_id")
    assert (crawl["resolver_requests"], "resolvers") in stored

"""The nightly Prefect flow `refresh`: list → fetch → dedupe → census and price → publish.

One function per stage; the stages hand plain values to each other:

1. `list_repos` asks the source (the Hub or the shipped snapshot) for its repos.
2. `fetch_configs` (a thread pool: it is I/O) fetches and parses each repo's config.json and
   hashes it, a batch of repos per task. Transient source errors are retried; the rest become
   failures rows.
3. `plan_jobs` groups the repos by config_hash (fine-tunes and re-uploads such as DeepSeek-V3
   and R1 share one) and keeps the configs the published catalogue does not hold yet at the
   current census and records versions, measured by the current transformers and torch, and
   at every setting of the current grid (a spec with routed experts at its overload settings too).
4. `analyse_config` censuses and prices each new config in a child process of its own, on the
   chosen task runner: local threads (the default; each drives one census process) or a Dask
   cluster. Results are cached by config_hash and versions (flows/tasks.py).
5. The flow process alone writes: it builds a NightData and `store.publish`es it atomically.
6. A table artifact `refresh-summary` records the night's counts; the flow returns them too.
7. `write_report` writes the catalogue's report (`speccat report`, docs/report.md) beside it and
   a link artifact `refresh-report` points at its index.html (unless the flow is run with
   `report` False). A report that fails is logged, never fails the night: the catalogue is
   published by then.

A bad config never fails the flow: every refusal, timeout or crash is a failures row. Only a
listing that fails (after its retries) fails the run; that run is still published, as
`failed` with its reason, and a night that lists nothing as `empty`: both are recorded in
`runs` but never become the latest night (sql/views/latest_run.sql). An expected refusal of
the whole night (a failed listing, a catalogue held by another process, a bad parameter: any
ReasonError) ends the flow run Failed with one ERROR line and no traceback; the exception
still reaches the caller. Refused configs are logged at INFO with their reason, the failures
that are something going wrong (vocabulary `unexpected`) at ERROR.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import queue
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_link_artifact, create_table_artifact
from prefect.futures import as_completed
from prefect.runtime import flow_run
from prefect.states import Failed
from prefect.task_runners import ThreadPoolTaskRunner

from speccat.catalogue.errors import InputError, ReasonError
from speccat.catalogue.store.bounds import spill_directory
from speccat.catalogue.store.spool import spool
from speccat.catalogue.vocabulary import UNEXPECTED_REASONS

from speccat.flows import isolate, progress
from speccat.flows.hub import FetchError, Listing, make_source
from speccat.flows.hub_budget import BudgetSpent
from speccat.flows.targets import make_target
from speccat.flows.tasks import (
    Analysis,
    AnalysisError,
    Failure,
    Fetched,
    ROW_TABLES,
    Job,
    analyse_config,
    crawl_repos,
    FetchBatchError,
    fetch_configs,
    list_repos,
    versions_key,
)
from speccat.flows.versions import current_versions

FETCH_THREADS = 8
# Repos per fetch task, at most, and batches per thread, at least: a Prefect task run per repo
# cost the API server more than the fetch (at 2,000 repos it kept a core busy through the census
# and the publish after it), while a few batches per thread still spread the slow repos.
FETCH_BATCH = 100
BATCHES_PER_THREAD = 4
# Census jobs handed to the task runner at once: each finished one's result is let go of once
# the night has it, which Prefect's futures would otherwise hold until the stage ends.
IN_FLIGHT = 64
TASK_RUNNERS = ("local", "dask")
SCOPES = ("top", "all")  # the Hub's top `limit` by downloads, or every repo (flows/crawl.py)
DEFAULT_RETRY_DELAYS = (5.0, 30.0, 120.0)
SUMMARY_ARTIFACT = "refresh-summary"
REPORT_ARTIFACT = "refresh-report"


@dataclass
class Night:
    """What the stages found, gathered for the store and the summary."""

    listings: list[Listing] = field(default_factory=list)
    fetched: dict[str, Fetched] = field(default_factory=dict)  # repo_id -> fetched
    failures: dict[str, Failure] = field(default_factory=dict)  # repo_id -> its failure
    crawl: dict[str, Any] | None = None  # a `--scope all` night's crawls row (flows/crawl.py)
    known: dict[str, str] = field(default_factory=dict)  # repo_id -> config_hash of a repo listed unchanged, not fetched
    budget: dict[str, Any] | None = None  # the Hub requests it spent (flows/hub_budget.py Budget.report)
    analyses: dict[str, Analysis] = field(default_factory=dict)  # config_hash -> analysis
    spool: Path | None = None  # where each analysis's prices are written as it arrives (catalogue/store/spool.py)
    stored: int = 0  # configs the catalogue already held, specced and priced
    new_hashes: set[str] = field(default_factory=set)  # configs it held no spec of
    priced: int = 0  # stored specs priced again (under new records)
    cached: int = 0
    censused: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  # wall time of each stage

    @contextlib.contextmanager
    def timed(self, stage: str):
        clock = time.monotonic()
        try:
            yield
        finally:
            self.seconds[stage] = round(time.monotonic() - clock, 2)

    def fail(self, repo_ids, stage: str, reason: str, message: str) -> None:
        for repo_id in repo_ids:
            self.failures[repo_id] = Failure(repo_id, stage, reason, message)


def make_task_runner(kind: str, dask_address: str | None, workers: int | None):
    """The runner of the census stage: local threads (each drives one census process), or an
    existing Dask cluster through prefect-dask."""
    if kind == "local":
        return ThreadPoolTaskRunner(max_workers=workers or os.cpu_count() or 1)
    if kind == "dask":
        if not dask_address:
            raise ValueError("--task-runner dask needs --dask-address (the scheduler's address)")
        from prefect_dask import DaskTaskRunner

        return DaskTaskRunner(address=dask_address)
    raise ValueError(f"unknown task runner {kind!r}; allowed: {', '.join(TASK_RUNNERS)}")


# -- stages -------------------------------------------------------------------------------


def fetch_stage(night: Night, source, retry_delays: list[float], listings: list[Listing] | None = None) -> list[Listing]:
    """Fetch `listings` (default: every listed repo), in order, in batches (fetch_batches);
    return those the night's Hub budget left unfetched (BudgetSpent: no failure, they wait for
    the next night)."""
    fetch = fetch_configs.with_options(retry_delay_seconds=list(retry_delays), retries=len(retry_delays))
    listings = night.listings if listings is None else listings
    futures = {fetch.submit(source, batch): batch for batch in fetch_batches(listings)}
    pending, done = [], 0
    for future in as_completed(list(futures)):
        batch = futures[future]
        result = future.result(raise_on_failure=False)
        if isinstance(result, FetchBatchError):  # its retries ran out: the last try's answers
            result = result.outcomes
        for listing, outcome in zip(batch, result if isinstance(result, list) else [result] * len(batch)):
            if isinstance(outcome, Fetched):
                night.fetched[listing.repo_id] = outcome
            elif isinstance(outcome, BudgetSpent):
                pending.append(listing)
            else:
                night.fail([listing.repo_id], "fetch", *_fetch_failure(outcome))
        done += len(batch)
        progress.step("fetch", done, len(listings), len(batch))
    return pending


def fetch_batches(listings: list[Listing]) -> list[list[Listing]]:
    """`listings` in order, cut into batches of at most FETCH_BATCH, and at least
    BATCHES_PER_THREAD for each of the FETCH_THREADS threads while there are repos enough."""
    size = max(1, min(FETCH_BATCH, -(-len(listings) // (FETCH_THREADS * BATCHES_PER_THREAD))))
    return [listings[i : i + size] for i in range(0, len(listings), size)]


class Crawling:
    """A `--scope all` night between its listing and its fetch (flows/crawl.py): the crawl state
    it started from, what it listed, and the Hub budget installed in huggingface_hub's client
    until `fetch` (or `close`) ends it."""

    def __init__(self, state, tier: str, budget, installed, listed: list[Listing], complete: bool):
        self.state, self.tier, self.budget, self._installed = state, tier, budget, installed
        self.listed, self.complete = listed, complete

    def close(self) -> None:
        self._installed.close()

    def fetch(self, night: Night, source, retry_delays: list[float], current: frozenset[str]) -> None:
        """Fetch the new and changed shas (and those whose config is not `current`: measured at
        tonight's versions), oldest change first; an unchanged repo keeps its stored config_hash;
        leave out of tonight's rows the repos the budget left (they wait for the next night) and
        write the night's crawl row."""
        from speccat.flows.crawl import RETRIED, crawl_row, to_fetch

        try:
            fetch, unchanged = to_fetch(self.listed, self.state, current)
            night.known = {l.repo_id: self.state.hashes[l.repo_id] for l in unchanged if l.repo_id in self.state.hashes}
            pending = fetch_stage(night, source, retry_delays, fetch)
        finally:
            self.close()
        left = {l.repo_id for l in pending}
        night.listings = [l for l in self.listed if l.repo_id not in left]
        retried = [l for l in fetch if l.repo_id in night.failures and night.failures[l.repo_id].reason in RETRIED]
        night.budget = self.budget.report()
        night.crawl = crawl_row(
            self.state, self.tier, self.listed, self.complete, len(fetch) - len(pending), len(unchanged), pending, retried, night.budget,
        )  # fmt: skip
        progress.note(
            f"crawl: {len(fetch) - len(pending)} fetched, {len(unchanged)} unchanged, {len(pending)} left for the next night; "
            f"Hub requests {night.budget['requests']} in {night.budget['windows']} window(s)"
        )


def crawl_stage(night: Night, source, target, tier: str | None, retry_delays: list[float]) -> Crawling:
    """List a scope-all night's repos within the Hub budget (flows/crawl.py, flows/hub_budget.py)."""
    from speccat.flows.crawl import state_of
    from speccat.flows.hub_budget import LIMITS, Budget

    tier = tier or LIMITS.tier
    budget = Budget.from_limits(LIMITS, tier)
    state = state_of(target, LIMITS.full_listing_every)
    installed = contextlib.ExitStack()
    installed.enter_context(budget.installed())
    try:
        crawler = crawl_repos.with_options(retries=len(retry_delays), retry_delay_seconds=list(retry_delays))
        listed, complete = crawler(source, state.listing_since, LIMITS.night_s)
    except BaseException:
        installed.close()
        raise
    night.listings = listed
    progress.note(f"crawl: {state.listing} listing since {state.listing_since or 'the start'}: {len(listed)} repos"
                  f"{'' if complete else ' (cut off by the Hub budget)'}")  # fmt: skip
    return Crawling(state, tier, budget, installed, listed, complete)


def _fetch_failure(err: BaseException) -> tuple[str, str]:
    """(reason, message) of a fetch that failed."""
    from speccat.census.spec import SpecError

    if isinstance(err, (FetchError, SpecError)):
        return err.reason, str(err)
    return "fetch_failed", f"{type(err).__name__}: {err}"


def representative(fetched: Fetched) -> tuple:
    """Repos sharing a config_hash are censused once, from the most downloaded of them (then
    the first by id), and its config is the one stored. Keys the hash ignores (token ids,
    dtype) can still refuse a census: ordering by downloads keeps a repo nobody downloads from
    choosing what the popular repos sharing its hash get."""
    return (-(fetched.listing.downloads or 0), fetched.listing.repo_id)


def library_versions(versions: dict[str, str]) -> dict[str, str]:
    """The libraries that measure a spec, part of its identity in the catalogue: a spec
    measured by another transformers or torch is not carried, its config is censused again."""
    return {"transformers": versions["transformers"], "torch": versions["torch"]}


def held_now(target, versions: dict[str, str], rebuild: bool) -> frozenset[str]:
    """The config_hashes the catalogue holds specced and priced at tonight's versions and grid
    (as `plan_jobs` asks; none with `rebuild`)."""
    return frozenset() if rebuild else stored_now(target, versions).priced


def stored_now(target, versions: dict[str, str]):
    """What the catalogue holds at tonight's census, records and libraries, over tonight's grid
    and overload settings (catalogue/records/settings.yaml): target.stored's answer."""
    from speccat.catalogue.records.settings import load_settings

    settings = load_settings()
    grid = [s["setting_id"] for s in settings.settings]
    overload = [s["setting_id"] for s in settings.overload]
    return target.stored(versions["census"], versions["records"], grid, library_versions(versions), overload)


def plan_jobs(night: Night, target, versions: dict[str, str], seq_length: int, rebuild: bool) -> list[Job]:
    """One job per distinct config the catalogue does not hold at these versions (the census's,
    measured by tonight's transformers and torch): a census, or only a pricing when the spec is
    stored but not priced under tonight's records at every setting of tonight's grid
    (catalogue/records/settings.yaml), and for a spec with routed experts at every overload
    setting too (`Grid.priced_at`)."""
    by_hash: dict[str, list[Fetched]] = defaultdict(list)
    for fetched in night.fetched.values():
        by_hash[fetched.config_hash].append(fetched)
    libraries = library_versions(versions)
    held = stored_now(target, versions)
    specced = set() if rebuild else held.specs & set(by_hash)
    done = specced & held.priced
    to_price = sorted(specced - done)
    specs = target.load_specs(versions["census"], to_price, libraries) if to_price else {}
    night.stored = len(done)
    night.new_hashes = set(by_hash) - specced
    jobs = []
    for config_hash in sorted(set(by_hash) - done):
        first = min(by_hash[config_hash], key=representative)
        spec = json.dumps(specs[config_hash]) if config_hash in specs else None
        jobs.append(Job(config_hash, first.config, first.listing.repo_id, seq_length, spec))
    return jobs


def analyse_stage(
    night: Night, jobs: list[Job], runner, versions: str, time_limit: float, rebuild: bool, memory_limit: float | None = None
) -> None:
    if not jobs:
        return
    task = analyse_config.with_options(refresh_cache=True) if rebuild else analyse_config
    repos_of = defaultdict(list)
    for fetched in night.fetched.values():
        repos_of[fetched.config_hash].append(fetched.listing.repo_id)
    # Each finished future is put here by its own callback. prefect.futures.as_completed, called
    # anew for each result, left a callback on every pending future that kept each result
    # finished after it, and so every result, until the stage ended.
    waiting, in_flight, finished = list(reversed(jobs)), {}, queue.SimpleQueue()
    with _api_for(runner), runner, _collected_each():
        for done in range(1, len(jobs) + 1):
            while waiting and len(in_flight) < IN_FLIGHT:
                job = waiting.pop()
                params = {"job": job, "versions": versions, "time_limit": time_limit, "memory_limit": memory_limit}
                future = runner.submit(task, params)
                in_flight[future] = job
                future.add_done_callback(finished.put)
            future = finished.get()
            job = in_flight.pop(future)  # its result is let go of once handled: a night holds no one's prices
            result = future.result(raise_on_failure=False)
            if isinstance(result, Analysis):
                result = result.named(job.name)
                if result.prices is not None and night.spool is not None:
                    result = replace(result, prices=spool(result.prices, night.spool / job.config_hash))
                night.analyses[job.config_hash] = result
                if future.state.name == "Cached":
                    night.cached += 1
                elif job.spec is not None:
                    night.priced += 1
                elif result.spec is not None:
                    night.censused += 1
                if result.failure is not None:
                    night.fail(repos_of[job.config_hash], *result.failure)
            elif isinstance(result, AnalysisError):
                night.fail(repos_of[job.config_hash], result.stage, result.reason, str(result))
            else:
                night.fail(repos_of[job.config_hash], "census", "census_failed", f"{type(result).__name__}: {result}")
            del future, result
            gc.collect()
            progress.step("census", done, len(jobs))


@contextlib.contextmanager
def _collected_each():
    """While the census stage runs, what its loop collects after each result (gc.collect) is
    only what the stage made: every object alive before it is frozen (gc.freeze), so that a
    collection does not walk a first night's hundreds of thousands of listings each time.

    Prefect's task runs hold what a task returned in reference cycles, which only the cyclic
    collector frees; in a flow holding that many objects it seldom runs in full, and each config's
    result (up to some 35 MB of price tables) stayed: 12 MiB a config censused, 7.3 GiB after 480 on
    the 200,000-repo stand-in (docs/refresh.md)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _api_for(runner):
    """Tell remote workers where the API is. Prefect ships its settings with each task, but
    an ephemeral API is not in them (each process would start its own), so on Dask the
    flow's API URL is set explicitly for the stage. A Dask cluster on other machines needs a
    Prefect server they can reach (PREFECT_API_URL), since the ephemeral one binds 127.0.0.1."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if isinstance(runner, ThreadPoolTaskRunner) or PREFECT_API_URL.value():
        return contextlib.nullcontext()
    return temporary_settings({PREFECT_API_URL: str(get_client(sync_client=True).api_url)})


def night_data(
    night: Night, run_id: str, started: datetime, status: str, source: str, versions: dict[str, str],
    reason: str | None = None, message: str | None = None,
):
    """The night as the store ingests it: only tonight's new specs and prices."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.hub_params import rule_rows
    from speccat.catalogue.records.reference import reference_rows
    from speccat.catalogue.store.night import NightData
    from speccat.catalogue.records.settings import load_settings

    grid = load_settings()
    records = load_records()
    repos = []
    for listing in night.listings:
        fetched = night.fetched.get(listing.repo_id)
        repos.append(
            {
                "repo_id": listing.repo_id,
                "sha": listing.sha,
                "last_modified": listing.last_modified,
                "downloads": listing.downloads,
                "likes": listing.likes,
                "gated": listing.gated,
                "license": listing.license,
                "pipeline_tag": listing.pipeline_tag,
                "config_hash": fetched.config_hash if fetched else night.known.get(listing.repo_id),
                "hub_params": listing.safetensors_total,
                "hub_params_by_dtype": None if listing.safetensors is None else dict(listing.safetensors),
                "config_parts": fetched.parts if fetched else None,
            }
        )
    # Repos sharing a config_hash may differ in what the hash leaves out (names): store the
    # config of the representative repo, as the census did.
    configs = {}
    for fetched in sorted(night.fetched.values(), key=representative):
        if fetched.config_hash in night.new_hashes:
            configs.setdefault(fetched.config_hash, fetched.config)
    specs = {h: json.loads(a.spec) for h, a in night.analyses.items() if a.spec is not None and h in night.new_hashes}
    prices = {h: a.prices for h, a in night.analyses.items() if a.prices is not None}
    rows = {name: {h: getattr(a, name) for h, a in night.analyses.items() if a.prices is not None and len(getattr(a, name))}
            for name in ROW_TABLES}  # fmt: skip
    return NightData(
        run_id=run_id,
        started=started,
        ended=datetime.now(timezone.utc),
        status=status,
        source=source,
        versions=versions,
        settings=grid.stored,
        setting_defaults=dict(grid.setting({})),
        switches=records.switches,
        repos=repos,
        configs=configs,
        specs=specs,
        prices=prices,
        **rows,
        **reference_rows(records, grid, questions=True),
        param_rules=rule_rows(),
        failures=[vars(f) for f in sorted(night.failures.values(), key=lambda f: f.repo_id)],
        crawl=night.crawl,
        reason=reason,
        message=message,
        spool=None if night.spool is None else str(night.spool),
    )


def process_seconds() -> float:
    """Wall time since this process started: the night including Prefect's own start (its
    ephemeral API, or a served run's subprocess), which the flow's clock does not see."""
    import psutil

    return time.time() - psutil.Process().create_time()


def summary(night: Night, run_id: str, db: str, seconds: float, status: str) -> dict[str, Any]:
    by_reason: dict[str, int] = defaultdict(int)
    outcome: dict[str, dict[str, int]] = {"refused": defaultdict(int), "failed": defaultdict(int)}
    for failure in night.failures.values():
        by_reason[failure.reason] += 1
        outcome["failed" if failure.reason in UNEXPECTED_REASONS else "refused"][failure.reason] += 1
    return {
        "run_id": run_id,
        "status": status,
        "db": db,
        "repos": len(night.listings),
        "configs": len({f.config_hash for f in night.fetched.values()}),
        "stored": night.stored,
        "new_configs": len(night.new_hashes),
        "cached": night.cached,
        "censused": night.censused,
        "repriced": night.priced,
        "failures": dict(sorted(by_reason.items())),
        "refused": dict(sorted(outcome["refused"].items())),
        "failed": dict(sorted(outcome["failed"].items())),
        "failing_repos": sorted(night.failures),
        "seconds": round(seconds, 1),
        "wall_seconds": round(process_seconds(), 1),
        "stage_seconds": dict(night.seconds),
        "crawl": _crawl_counts(night),
    }


def _crawl_counts(night: Night) -> dict[str, Any] | None:
    """A scope-all night's crawl and Hub budget, as the summary states them (None otherwise)."""
    if night.crawl is None:
        return None
    crawl = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in night.crawl.items()}
    return {**crawl, "budget": night.budget}


def publish_summary(counts: dict[str, Any]) -> None:
    rows = [
        {"measure": "status", "value": counts["status"]},
        {"measure": "repos seen", "value": counts["repos"]},
        {"measure": "distinct configs", "value": counts["configs"]},
        {"measure": "already in the catalogue", "value": counts["stored"]},
        {"measure": "new configs", "value": counts["new_configs"]},
        {"measure": "answered from the cache", "value": counts["cached"]},
        {"measure": "censused", "value": counts["censused"]},
        {"measure": "stored specs priced again", "value": counts["repriced"]},
        *({"measure": f"refused: {reason}", "value": n} for reason, n in counts["refused"].items()),
        *({"measure": f"failed: {reason}", "value": n} for reason, n in counts["failed"].items()),
        {"measure": "failing repos", "value": ", ".join(counts["failing_repos"]) or "none"},
        *_crawl_rows(counts.get("crawl")),
        {"measure": "duration of the flow (s)", "value": counts["seconds"]},
        {"measure": "wall time with Prefect's start (s)", "value": counts["wall_seconds"]},
    ]
    create_table_artifact(key=SUMMARY_ARTIFACT, table=rows, description=f"speccat refresh into {counts['db']}")


def _crawl_rows(crawl: dict[str, Any] | None) -> list[dict[str, Any]]:
    if crawl is None:
        return []
    budget = crawl["budget"]
    spent = ", ".join(f"{bucket} {n} of {budget['quotas'][bucket]} a window" for bucket, n in budget["requests"].items())
    return [
        {"measure": "Hub listing", "value": f"{crawl['listing']} since {crawl['since'] or 'the start'}"
                                            f"{'' if crawl['listing_complete'] else ' (cut off)'}"},
        {"measure": "repos fetched / unchanged / left for the next night", "value": f"{crawl['n_fetched']} / {crawl['n_unchanged']} / {crawl['n_pending']}"},
        {"measure": "repos gone since the last full listing", "value": crawl["n_gone"]},
        {"measure": f"Hub requests ({crawl['tier']} tier)", "value": spent},
        {"measure": "Hub windows, seconds waited", "value": f"{budget['windows']}, {budget['waited_s']}"},
        {"measure": "stopped by the Hub budget", "value": crawl["stopped"] or "no"},
        {"measure": "next listing since", "value": crawl["next_since"] or "the start"},
    ]  # fmt: skip


def report_dir(target) -> Path:
    """Where the night's report goes: beside the catalogue file (`catalogue.duckdb` ->
    `catalogue-report/`), or beside a DuckLake's data folder (`DATA-report/`)."""
    where = Path(getattr(target, "path", None) or target.data_path.rstrip("/"))
    return where.with_name(f"{where.stem}-report")


def write_report(log, target) -> str | None:
    """Write the published catalogue's report and link it from the night's artifact; the
    report's folder, or None (logged) when it could not be written."""
    from speccat.report.site import build

    out = report_dir(target)
    try:
        with target.open_readonly() as con:
            manifest = build(con, out)
    except Exception as err:  # the night is published: a report that fails is reported, not fatal
        log.error("report not written to %s: %s: %s", out, type(err).__name__, err)
        return None
    index = (out / "index.html").resolve()
    create_link_artifact(key=REPORT_ARTIFACT, link=index.as_uri(), link_text=f"speccat report: {manifest['models']} models",
                         description=f"speccat report of {target}, written to {out}")  # fmt: skip
    return str(out)


# -- the flow -----------------------------------------------------------------------------


@flow(name="refresh", task_runner=ThreadPoolTaskRunner(max_workers=FETCH_THREADS))
def refresh(
    source: str = "snapshot",
    limit: int | None = None,
    db: str | None = None,
    task_runner: str = "local",
    dask_address: str | None = None,
    workers: int | None = None,
    snapshot_dir: str | None = None,
    time_limit: float = 600.0,
    memory_limit: float | None = None,
    seq_length: int | None = None,
    rebuild: bool = False,
    retry_delays: list[float] = list(DEFAULT_RETRY_DELAYS),
    lake: str | None = None,
    lake_data: str | None = None,
    lock_wait: float | None = None,
    report: bool = True,
    scope: str = "top",
    hub_tier: str | None = None,
) -> dict[str, Any]:
    """Refresh the catalogue at `db` from `source` ("snapshot" or "hub", the top `limit` repos).

    With `scope` "all" (hub only) the night crawls every transformers text-generation repo
    instead, listing only what changed since the last crawl and fetching only new or changed
    shas, within `hub_tier`'s request budget (flows/hub_limits.yaml; docs/refresh.md).

    `task_runner` "local" censuses on `workers` local processes (default: one per core);
    "dask" on the cluster at `dask_address`. `time_limit` stops one config's census;
    `memory_limit` (MiB, default census/intake/limits.yaml's census_memory_mib) bounds the address
    space its process may add;
    `rebuild` ignores what the catalogue and the cache hold. `retry_delays` are the waits
    between tries of a transient fetch error. With `lake` (a DuckLake catalog) and
    `lake_data` (its data path) the night is published into that lake instead of `db`.
    `lock_wait` bounds the wait for a process holding the catalogue file (catalogue/store/limits.yaml).
    `report` False leaves out the report the night writes beside the catalogue after its publish
    (`speccat report` writes one from the catalogue at any time).
    """
    log = get_run_logger()
    try:
        return night_flow(
            log, source, limit, db, task_runner, dask_address, workers, snapshot_dir, time_limit,
            memory_limit, seq_length, rebuild, retry_delays, lake, lake_data, lock_wait, report, scope, hub_tier,
        )  # fmt: skip
    except ReasonError as err:
        # Expected: one line for the operator, no traceback; the caller still gets the error.
        log.error("refresh failed: %s: %s", err.reason, err)
        return Failed(message=f"{err.reason}: {err}", data=err)


def night_flow(
    log, source, limit, db, task_runner, dask_address, workers, snapshot_dir, time_limit,
    memory_limit, seq_length, rebuild, retry_delays, lake, lake_data, lock_wait, report, scope="top", hub_tier=None,
) -> dict[str, Any]:  # fmt: skip
    """The night, stage by stage (the flow `refresh` is this, with expected refusals turned
    into a Failed state)."""
    if limit is not None and limit < 1:
        raise InputError("bad_argument", f"limit must be at least 1, got {limit}")
    if scope not in SCOPES:
        raise InputError("bad_argument", f"unknown scope {scope!r}; allowed: {', '.join(SCOPES)}")
    if scope == "all" and (source != "hub" or limit is not None):
        raise InputError("bad_argument", "scope all crawls the whole Hub: it needs source hub and no limit")
    started = datetime.now(timezone.utc)
    run_id = str(flow_run.id)
    runner = make_task_runner(task_runner, dask_address, workers)
    target = make_target(db, lake, lake_data, lock_wait)
    src = make_source(source, snapshot_dir=snapshot_dir)
    versions = current_versions()
    if seq_length is None:
        from speccat.catalogue.records.settings import default_setting

        seq_length = default_setting()["seq_length"]
    if memory_limit is None:
        from speccat.census.intake.limits import LIMITS

        memory_limit = LIMITS.census_memory_mib
    night = Night()
    if isinstance(runner, ThreadPoolTaskRunner):
        # The fork server imports torch, transformers and the census (seconds of CPU) while the
        # night lists and fetches, which wait on the network; the census stage waits for it.
        isolate.start(wait=False)

    crawling = None
    with night.timed("list"):
        try:
            if scope == "all":
                crawling = crawl_stage(night, src, target, hub_tier, retry_delays)
            else:
                lister = list_repos.with_options(retries=len(retry_delays), retry_delay_seconds=list(retry_delays))
                night.listings = lister(src, limit)
        except FetchError as err:  # crawl_stage has given huggingface_hub its own client back
            night.fail(["(listing)"], "list", err.reason, str(err))
            target.publish(night_data(night, run_id, started, "failed", source, versions, err.reason, str(err)))
            raise
    progress.note(f"list: {len(night.listings)} repos from {source}")
    if crawling is not None:
        with night.timed("fetch"):
            crawling.fetch(night, src, retry_delays, held_now(target, versions, rebuild))
    if not night.listings:
        target.publish(night_data(night, run_id, started, "empty", source, versions))
        log.warning("refresh %s listed no repo from %s: recorded as empty; the latest night is unchanged", run_id, source)
        counts = summary(night, run_id, str(target), (datetime.now(timezone.utc) - started).total_seconds(), "empty")
        publish_summary(counts)
        return counts
    if crawling is None:
        with night.timed("fetch"):
            fetch_stage(night, src, retry_delays)
    with night.timed("plan"):
        jobs = plan_jobs(night, target, versions, seq_length, rebuild)
    progress.note(f"plan: {len({f.config_hash for f in night.fetched.values()})} configs, {len(jobs)} to census or price")
    if jobs and isinstance(runner, ThreadPoolTaskRunner):
        with night.timed("census_start"):
            isolate.start()  # what is left of the fork server's one-time import, begun with the night
    with spill_directory(prefix="speccat-night-") as spool_dir:
        night.spool = spool_dir  # the prices, on disk until published
        with night.timed("census"):
            analyse_stage(night, jobs, runner, versions_key(versions, seq_length), time_limit, rebuild, memory_limit)
        with night.timed("publish"):
            status = "partial" if night.failures else "completed"
            target.publish(night_data(night, run_id, started, status, source, versions))
    progress.note(f"published {target}")
    log_failures(log, night)
    counts = summary(night, run_id, str(target), (datetime.now(timezone.utc) - started).total_seconds(), status)
    publish_summary(counts)
    counts["report"] = None
    if report:
        with night.timed("report"):
            counts["report"] = write_report(log, target)
    log.info("refresh %s: %s", run_id, counts)
    return counts


def log_failures(log, night: Night) -> None:
    """One line per failed repo: a refusal of its config at INFO, something going wrong
    (vocabulary `unexpected`) at ERROR."""
    for failure in sorted(night.failures.values(), key=lambda f: f.repo_id):
        level = logging.ERROR if failure.reason in UNEXPECTED_REASONS else logging.INFO
        what = "failed" if level == logging.ERROR else "refused"
        log.log(level, "%s %s at %s: %s: %s", what, failure.repo_id, failure.stage, failure.reason, failure.message)

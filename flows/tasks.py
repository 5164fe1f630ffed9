"""The refresh flow's Prefect tasks, one per stage: list, fetch, census-and-price.

- `list_repos` (or, for a `--scope all` night, `crawl_repos`) and `fetch_configs` (a batch of
  repos) talk to the source. A transient error (429, 5xx, timeout, see flows/hub.py) is retried
  with backoff through `retry_condition_fn`; anything else is a final answer and becomes a
  failures row. huggingface_hub lists with no read timeout, so a listing that stalls is given
  up after LIST_TIMEOUT_S and counted as transient.
- `analyse_config` censuses and prices one distinct config in a killable child process
  (flows/isolate.py). Its result is persisted and cached under the config_hash plus every
  version that could change it, so an unchanged night finds every config in the cache. A
  refusal of the config (a SpecError) is a deterministic answer and is cached like a spec;
  a timeout, a child past its memory budget (`too_large`) or a crashed child is not (the task
  fails, and the next night tries again).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.serializers import PickleSerializer
from prefect.states import Failed, State

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.store.night import Rows
from speccat.flows import isolate
from speccat.flows.hub import FETCH_FAILED, FetchError, Listing, Source
from speccat.flows.hub_budget import BudgetSpent

# What a census child runs (flows/analysis.py; named, so only the children import torch).
ANALYSE = "speccat.flows.analysis:analyse"
# Seconds one try of the listing may take (500 repos take a few seconds).
LIST_TIMEOUT_S = 300.0
# What a census child's outcome (flows/isolate.py) that is not an answer becomes.
OUTCOME_REASONS = {"timeout": "timeout", "memory": "too_large"}


@dataclass(frozen=True)
class Failure:
    """One failures row: which repo, at which stage, and why."""

    repo_id: str
    stage: str  # list, fetch, census or price
    reason: str
    message: str


@dataclass(frozen=True)
class Fetched:
    listing: Listing
    config: dict
    config_hash: str

    @property
    def parts(self) -> list[str]:
        """The config's parts its language model leaves out (vision_config, quantization_config,
        a nested config's sub-configs beside text_config): the config_hash holds none of them, so
        the catalogue keeps them per repo, for the parameter reconciliation (catalogue/hub_params.yaml)."""
        from speccat.census import language_config

        language = language_config(self.config)
        return sorted(k for k, v in self.config.items() if isinstance(v, dict) and k != "text_config" and k not in language)


@dataclass(frozen=True)
class Job:
    """One distinct config to census: the repos sharing it are censused once, as `name`.

    `spec` (JSON) is set when the catalogue already holds the spec and it only needs pricing.
    """

    config_hash: str
    config: dict
    name: str
    seq_length: int
    spec: str | None = None


# The Analysis fields, and the keys of a census child's answer (flows/analysis.py), that hold rows.
ROW_TABLES = ("infeasible", "point_prices", "end_prices", "loss_prices", "op_costs", "op_prices")


@dataclass(frozen=True)
class Analysis:
    """What the census and pricing of one config gave.

    `spec` is the ModelSpec as JSON (None when the census refused); `prices` the price
    tables (None when there is no spec or pricing refused), without the settings at which the
    model cannot be laid out; `infeasible` says why for each of those (catalogue/records/layouts.py
    rows); `failure` is (stage, reason, message) when either refused. The rows are held as Arrow
    tables (an analysis cached by an older speccat holds tuples of mappings): a night holds
    every config's until it publishes, and one config's op_costs are thousands of rows.
    """

    config_hash: str
    spec: str | None = None
    prices: Any = None
    failure: tuple[str, str, str] | None = None
    infeasible: Rows = ()
    point_prices: Rows = ()  # the price at each setting the census measured (catalogue/records/points.py rows)
    end_prices: Rows = ()  # the model's ends priced at each setting priced (catalogue/records/ends.py rows)
    loss_prices: Rows = ()  # the logits end under each loss kernel at each setting priced (ends.py rows)
    op_costs: Rows = ()  # each op's recompute cost at each setting priced (catalogue/records/cost.py rows)
    op_prices: Rows = ()  # each op's share of the bytes at the memory curve's settings (catalogue/records/opsplit.py rows)

    def named(self, name: str) -> Analysis:
        """This analysis with its spec named `name`. A cached analysis is served to every
        catalogue whose config has this hash, and carries the name of the repo it was first
        censused as; each catalogue names the spec after its own representative repo."""
        if self.spec is None:
            return self
        spec = json.loads(self.spec)
        if spec["name"] == name:
            return self
        return replace(self, spec=json.dumps({**spec, "name": name}))


class AnalysisError(ReasonError):
    """A census that did not answer (timeout, crash): a `census` reason at a stage; not cached,
    it becomes a failures row."""

    group = "census"

    def __init__(self, stage: str, reason: str, message: str):
        super().__init__(reason, message)
        self.stage = stage

    def __reduce__(self):
        return (AnalysisError, (self.stage, self.reason, str(self)))


def is_transient(task, task_run, state) -> bool:
    """retry_condition_fn: retry only what may succeed on another try."""
    err = state.result(raise_on_failure=False)
    return isinstance(err, FetchError) and err.transient


# Retries and their delays are set by the flow (`with_options`), from its `retry_delays`;
# huggingface_hub has already retried within each try.
@task(name="list-repos", retry_condition_fn=is_transient)
def list_repos(source: Source, limit: int | None) -> list[Listing]:
    return _listed(LIST_TIMEOUT_S, source.list, limit)


def _listed(seconds: float, fn, *args):
    """A listing call `fn(*args)` within `seconds` (_within), its errors as the fetch stage's
    (a FetchError as it is, any other classified)."""
    from speccat.flows.hub import classify

    try:
        return _within(seconds, fn, *args)
    except FetchError:
        raise
    except Exception as err:
        raise classify(err, "(listing)") from None


def _within(seconds: float, fn, *args):
    """`fn(*args)` in a daemon thread, given up after `seconds`: a socket read with no timeout
    cannot be interrupted, so the thread is left behind (it dies with the process)."""
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as err:  # handed to the caller
            box["error"] = err

    thread = threading.Thread(target=call, name="speccat-listing", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise FetchError(FETCH_FAILED, f"(listing): no answer within {seconds:g} s", transient=True)
    if "error" in box:
        raise box["error"]
    return box["value"]


@task(name="crawl-repos", retry_condition_fn=is_transient)
def crawl_repos(source, since, seconds: float) -> tuple[list[Listing], bool]:
    """A `--scope all` listing (flows/crawl.py): the repos changed since `since`, newest first,
    and whether the listing reached `since` (or its end). The night's Hub budget running out
    (BudgetSpent) cuts it short: what was listed is kept, and the next night lists again from
    the top. A listing that takes more than `seconds` is given up, as a transient error."""
    listed: list[Listing] = []

    def listing() -> bool:
        try:
            for item in source.crawl(since):
                listed.append(item)
        except BudgetSpent:
            return False
        return True

    complete = _listed(seconds, listing)
    return list(listed), complete


def _batch_run_name() -> str:
    from prefect.runtime import task_run

    listings = task_run.parameters["listings"]
    more = f" and {len(listings) - 1} more" if len(listings) > 1 else ""
    return f"fetch {listings[0].repo_id}{more}"


class FetchBatchError(FetchError):
    """A batch in which some repo's fetch failed in a way another try may mend: transient, so
    Prefect tries the whole batch again. `outcomes` holds what this try found for each repo
    (fetch_configs), so the answers of a batch's last try are kept when its retries run out."""

    def __init__(self, outcomes: list):
        failed = [o for o in outcomes if isinstance(o, FetchError) and o.transient]
        super().__init__(failed[0].reason, f"{len(failed)} of {len(outcomes)} repos: {failed[0]}", transient=True)
        self.outcomes = outcomes

    def __reduce__(self):
        return (FetchBatchError, (self.outcomes,))


# No cache policy: a fetch is pinned to a commit sha, and the Hugging Face cache is its cache.
@task(name="fetch-configs", retry_condition_fn=is_transient, task_run_name=_batch_run_name, cache_policy=NO_CACHE)
def fetch_configs(source: Source, listings: list[Listing]) -> list:
    """Fetch and parse a batch of repos' config.json files, one Prefect task for the batch
    (a task run per repo kept Prefect's server busier than the fetches themselves).

    Each repo's outcome, in order: Fetched; a final refusal (gated, not found, not JSON:
    SpecError bad_json), which is expected, so the task completes and the flow logs it at INFO;
    or BudgetSpent when the night's Hub budget allows no more requests (the repo waits for the
    next night; no request is sent). A transient error of any repo raises FetchBatchError once
    the others are done, and the batch is tried again: a config fetched already is served from
    the Hugging Face cache (it is pinned to a commit sha) without a request."""
    outcomes = [_fetched(source, listing) for listing in listings]
    if any(isinstance(o, FetchError) and o.transient for o in outcomes):
        raise FetchBatchError(outcomes)
    return outcomes


def _fetched(source: Source, listing: Listing) -> Fetched | FetchError | ReasonError | BudgetSpent:
    from speccat.census import config_hash, load_config_file
    from speccat.census.spec import SpecError

    try:
        config = load_config_file(source.fetch(listing))
        return Fetched(listing, config, config_hash(config))
    except (FetchError, SpecError, BudgetSpent) as err:
        return err


def versions_key(versions: dict[str, str], seq_length: int) -> str:
    """A short digest of every version the census and pricing results depend on."""
    from speccat.catalogue.records.layouts import layouts_version

    # The layout rules decide which settings are priced; they are versioned only here.
    canonical = json.dumps({**versions, "layouts": layouts_version(), "seq_length": seq_length}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def analysis_cache_key(context, parameters: dict) -> str:
    job: Job = parameters["job"]
    return f"speccat-analysis-{job.config_hash}-{parameters['versions']}"


@task(
    name="census-and-price",
    cache_key_fn=analysis_cache_key,
    persist_result=True,
    # Prefect keeps the last 1,000 results it wrote or read in memory by default: a first night
    # of thousands of configs held some 12 MB of each in the flow's process (6.1 GB after 480).
    # The flow takes each result from its future and spools its prices (flows/refresh.py).
    cache_result_in_memory=False,
    result_serializer=PickleSerializer(picklelib="speccat.flows.compact_pickle"),  # 18 times smaller on disk
    task_run_name="census {job.name}",
)
def analyse_config(job: Job, versions: str, time_limit: float, memory_limit: float | None = None) -> Analysis | State:
    """Census and price one config in a child process (`versions` is `versions_key(...)`),
    stopped after `time_limit` seconds, with `memory_limit` MiB of address space to grow by.

    A timeout, a child out of memory or a crash ends the task Failed (so it is not cached) with
    an AnalysisError (`timeout`, `too_large`, `census_failed`)."""
    outcome = isolate.run(ANALYSE, (job.config, job.name, job.seq_length, job.spec), time_limit, memory_limit)
    if outcome.error == "spec_error":
        return Analysis(job.config_hash, failure=("census", outcome.reason, outcome.message))
    if outcome.error is not None:
        reason = OUTCOME_REASONS.get(outcome.error, "census_failed")
        err = AnalysisError("census", reason, f"{job.name}: census {outcome.message}")
        return Failed(message=str(err), data=err)
    value = outcome.value
    if "price_error" in value:
        reason, message = value["price_error"]
        return Analysis(job.config_hash, spec=value["spec"], failure=("price", reason, message))
    rows = {name: pa.Table.from_pylist(list(value[name])) for name in ROW_TABLES}
    return Analysis(job.config_hash, spec=value["spec"], prices=value["prices"], **rows)

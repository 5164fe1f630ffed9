"""Where the configs come from: the Hugging Face Hub, or the snapshot the project ships.

Both sources have one interface (`Source`): `list(limit)` gives `Listing`s (one repo each,
with what the source knows about it) and `fetch(listing)` gives the local path of that
repo's `config.json`, or raises `FetchError` with a stable reason code.

HubSource uses huggingface_hub as its authors intend: `HfApi.list_models` for the most
downloaded transformers text-generation models, and `hf_hub_download` pinned to the listed
commit sha, through the standard cache (a pinned file already cached costs no request, and
`HF_HUB_OFFLINE=1` serves from the cache only). The endpoint, the cache and the token all come
from huggingface_hub's own environment (`HF_ENDPOINT`, `HF_HOME`/`HF_HUB_CACHE`, `HF_TOKEN` or
the token file); speccat never reads, logs or stores the token.

Both listings ask for the Hub's own parameter counts of each repo's safetensors weights
(`safetensors`), which the night stores beside the census's (the view repo_params).

`HubSource.crawl(since)` lists every transformers text-generation repo instead, the most
recently changed first (`sort="last_modified"`), and stops at `since`: the `--scope all` night
(flows/crawl.py), whose requests a Budget counts (flows/hub_budget.py). A fetch stopped by that budget (BudgetSpent) is no failure of the repo.

huggingface_hub already retries the listing and the file's metadata request on 429 (honouring
`RateLimit` or `Retry-After`), 5xx and timeouts; what is still transient after that (say a 503
on the download itself) is marked `transient` here so the flow's task retries it with backoff.

SnapshotSource reads the configs shipped in `flows/snapshot/<org>__<name>/config.json`. Its
listings are honest snapshot rows: no sha, downloads, likes or licence are invented.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from speccat.catalogue.errors import ReasonError
from speccat.flows.hub_budget import BudgetSpent

SNAPSHOT_DIR = Path(__file__).with_name("snapshot")
CONFIG_FILE = "config.json"

# Fetch-stage failure reasons (catalogue/reasons.py; the census adds its SpecError reasons).
GATED = "gated"
NOT_FOUND = "not_found"
RATE_LIMITED = "rate_limited"
FETCH_FAILED = "fetch_failed"

# Statuses worth another try, as huggingface_hub itself retries them.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

# What the Hub is asked to return for each listed model (docs/refresh.md), by the top-N listing
# and a `--scope all` crawl alike: `safetensors` is the Hub's own count of the weights' parameters.
LIST_EXPAND = ("sha", "gated", "downloads", "likes", "lastModified", "pipeline_tag", "tags", "safetensors")


@dataclass(frozen=True)
class Listing:
    """One repo as its source lists it. A field the source does not know stays None."""

    repo_id: str
    source: str  # "hub" or "snapshot"
    sha: str | None = None
    last_modified: str | None = None  # ISO 8601, UTC
    downloads: int | None = None
    likes: int | None = None
    gated: bool | str | None = None  # the Hub's own value: False, "auto" or "manual"
    license: str | None = None
    pipeline_tag: str | None = None
    # The Hub's parameter counts of the repo's safetensors weights, per dtype ((dtype, count), ...),
    # and their total (huggingface_hub's SafeTensorsInfo `parameters` and `total`); None for a repo
    # without safetensors weights, and from the snapshot. Stored with the night (repo_history).
    safetensors: tuple[tuple[str, int], ...] | None = None
    safetensors_total: int | None = None


class FetchError(ReasonError):
    """A config that could not be fetched: a `fetch` reason, and whether trying again may help."""

    group = "fetch"

    def __init__(self, reason: str, message: str, *, transient: bool = False):
        super().__init__(reason, message)
        self.transient = transient

    def __reduce__(self):  # survive pickling across process pools and Dask workers
        return (_rebuild_fetch_error, (self.reason, str(self), self.transient))


def _rebuild_fetch_error(reason: str, message: str, transient: bool) -> FetchError:
    return FetchError(reason, message, transient=transient)


class Source(Protocol):
    name: str

    def list(self, limit: int | None = None) -> list[Listing]: ...

    def fetch(self, listing: Listing) -> Path: ...


def _causes(err: BaseException) -> Iterator[BaseException]:
    """The error and the chain of errors behind it (huggingface_hub wraps the HTTP error of a
    failed metadata request in a LocalEntryNotFoundError)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


# huggingface_hub's errors and what each means here, the most specific first: a
# GatedRepoError is a RepositoryNotFoundError, so it must be matched before it.
HUB_ERRORS = (
    ("GatedRepoError", GATED, "gated repo; the token in the environment has no access"),
    ("DisabledRepoError", NOT_FOUND, "repo disabled"),
    ("RepositoryNotFoundError", NOT_FOUND, "repo not found (or private)"),
    ("RevisionNotFoundError", NOT_FOUND, "the listed revision is not on the Hub"),
    ("RemoteEntryNotFoundError", NOT_FOUND, f"the repo has no {CONFIG_FILE}"),
    ("OfflineModeIsEnabled", FETCH_FAILED, "not in the local cache and HF_HUB_OFFLINE is set"),
)


def classify(err: BaseException, repo_id: str) -> FetchError:
    """Map a huggingface_hub / HTTP error (or any error in its chain) to a FetchError."""
    import httpx2
    from huggingface_hub import errors

    if isinstance(err, FetchError):
        return err
    for cause in _causes(err):
        for name, reason, what in HUB_ERRORS:
            if isinstance(cause, getattr(errors, name)):
                return FetchError(reason, f"{repo_id}: {what}")
        if isinstance(cause, errors.HfHubHTTPError) and cause.response is not None:
            status = cause.response.status_code
            if status == 429:
                return FetchError(RATE_LIMITED, f"{repo_id}: rate limited (HTTP 429)", transient=True)
            if status in (401, 403):
                return FetchError(GATED, f"{repo_id}: access refused (HTTP {status})")
            if status == 404:
                return FetchError(NOT_FOUND, f"{repo_id}: not found (HTTP 404)")
            return FetchError(FETCH_FAILED, f"{repo_id}: HTTP {status}", transient=status in TRANSIENT_STATUSES)
        if isinstance(cause, (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError)):
            return FetchError(FETCH_FAILED, f"{repo_id}: {type(cause).__name__}: {_first_line(cause)}", transient=True)
    return FetchError(FETCH_FAILED, f"{repo_id}: {type(err).__name__}: {_first_line(err)}")


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else ""


def _license_of(tags: list[str] | None) -> str | None:
    for tag in tags or ():
        if tag.startswith("license:"):
            return tag.split(":", 1)[1]
    return None


@dataclass(frozen=True)
class HubSource:
    """The Hub's most downloaded transformers text-generation models.

    `endpoint` and `cache_dir` default to huggingface_hub's own (HF_ENDPOINT, HF_HUB_CACHE),
    resolved where the source runs; pass them only to override.
    """

    endpoint: str | None = None
    cache_dir: str | None = None
    name: str = field(default="hub", init=False)

    def list(self, limit: int | None = None) -> list[Listing]:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=self.endpoint)
        models = api.list_models(
            filter="transformers",
            pipeline_tag="text-generation",
            sort="downloads",
            limit=limit,
            expand=list(LIST_EXPAND),
        )
        return [self._listing(m) for m in models]

    def crawl(self, since: datetime | None = None) -> Iterator[Listing]:
        """Every transformers text-generation repo, the most recently changed first, down to
        `since` (a repo changed at `since` itself is listed; None: every repo). The listing is
        huggingface_hub's, page by page as the `Link` headers lead: stopping the iteration stops
        the paging, so a night asks only for the pages it reads."""
        from huggingface_hub import HfApi

        api = HfApi(endpoint=self.endpoint)
        models = api.list_models(
            filter="transformers", pipeline_tag="text-generation", sort="last_modified", expand=list(LIST_EXPAND),
        )  # fmt: skip
        for m in models:
            if since is not None and m.last_modified is not None and m.last_modified < since:
                return
            yield self._listing(m)

    def _listing(self, m) -> Listing:
        safetensors = getattr(m, "safetensors", None)
        return Listing(
            repo_id=m.id,
            source=self.name,
            sha=m.sha,
            last_modified=m.last_modified.isoformat() if m.last_modified else None,
            downloads=m.downloads,
            likes=m.likes,
            gated=m.gated,
            license=_license_of(m.tags),
            pipeline_tag=m.pipeline_tag,
            safetensors=tuple(sorted(safetensors.parameters.items())) if safetensors is not None else None,
            safetensors_total=safetensors.total if safetensors is not None else None,
        )

    def fetch(self, listing: Listing) -> Path:
        from huggingface_hub import hf_hub_download

        try:
            return Path(
                hf_hub_download(
                    listing.repo_id,
                    CONFIG_FILE,
                    revision=listing.sha,
                    endpoint=self.endpoint,
                    cache_dir=self.cache_dir,
                )
            )
        except BudgetSpent:  # no failure of the repo: it waits for the next night (flows/crawl.py)
            raise
        except Exception as err:  # every failure becomes a reasoned FetchError
            raise classify(err, listing.repo_id) from None


@dataclass(frozen=True)
class SnapshotSource:
    """The configs shipped in the project (or any folder laid out the same way)."""

    directory: str = str(SNAPSHOT_DIR)
    name: str = field(default="snapshot", init=False)

    def _path(self, repo_id: str) -> Path:
        return Path(self.directory) / repo_id.replace("/", "__", 1) / CONFIG_FILE

    def list(self, limit: int | None = None) -> list[Listing]:
        if not Path(self.directory).is_dir():
            raise FetchError(NOT_FOUND, f"no snapshot folder at {self.directory}")
        folders = sorted(p.parent.name for p in Path(self.directory).glob(f"*/{CONFIG_FILE}"))
        repo_ids = [name.replace("__", "/", 1) for name in folders]
        return [Listing(repo_id=r, source=self.name) for r in repo_ids[:limit]]

    def fetch(self, listing: Listing) -> Path:
        path = self._path(listing.repo_id)
        if not path.is_file():
            raise FetchError(NOT_FOUND, f"{listing.repo_id}: no {CONFIG_FILE} in the snapshot at {path.parent}")
        return path


def make_source(name: str, *, snapshot_dir: str | os.PathLike | None = None) -> Source:
    """The source named on the command line or in the deployment's parameters."""
    if name == "hub":
        return HubSource()
    if name == "snapshot":
        return SnapshotSource(str(snapshot_dir or SNAPSHOT_DIR))
    raise ValueError(f"unknown source {name!r}; allowed: hub, snapshot")

"""Runs for the store's tests: shipped configs censused and priced for real, as NightData.

`censused(repo_ids)` prices shipped configs once per process (their specs from
tests/support/shipped_specs.py, which the census tests share; the real records and settings
grid); `make_run(...)` wraps any subset of
them, plus failures, into a NightData the store can publish.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cache
from pathlib import Path
from typing import Any

from conftest import load_shipped

from speccat.catalogue.hub_params import rule_rows
from speccat.catalogue.records.cost import load_costs, op_costs
from speccat.catalogue.records.opsplit import op_prices
from speccat.catalogue.records.ends import end_prices, load_ends, loss_prices
from speccat.catalogue.records.points import price_points
from speccat.catalogue.records.pricing import PriceTables, price_spec
from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.reference import reference_rows
from speccat.catalogue.store.night import NightData
from speccat.catalogue.records.settings import load_settings
from speccat.census.structure.family import profiles_version

# Five shipped configs of different shapes: dense GQA, tied small, MoE, MLA dense+MoE, hybrid
# linear/full attention. DeepSeek-R1 shares DeepSeek-V3's architecture (one config_hash).
REPOS: tuple[str, ...] = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen3-0.6B",
    "mistralai/Mixtral-8x7B-v0.1",
    "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1",
    "Qwen/Qwen3-Next-80B-A3B-Thinking",
)


@dataclass(frozen=True)
class Censused:
    repo_id: str
    config: dict
    config_hash: str
    spec: dict
    prices: PriceTables
    point_prices: tuple = ()  # the records' price at each point the census measured
    end_prices: tuple = ()  # the ends' price at every setting of the grid
    loss_prices: tuple = ()  # the logits end under each loss kernel at every setting of the grid
    op_costs: tuple = ()  # each op's recompute cost at every setting of the grid
    op_prices: tuple = ()  # each op's share of the bytes at every setting of the memory curve


@cache
def records():
    return load_records()


@cache
def grid():
    return load_settings()


def census_version() -> str:
    from speccat.census import CENSUS_VERSION

    return CENSUS_VERSION


@cache
def censused(repo_id: str) -> Censused:
    from speccat.census import config_hash
    from support.shipped_specs import shipped_spec

    config = load_shipped(repo_id)
    spec = shipped_spec(repo_id).to_dict()
    prices = price_spec(spec, records(), grid(), costs=load_costs(records()))
    points = tuple(price_points(spec, records(), grid()))
    ends = tuple(end_prices(spec, records(), grid(), load_ends(records())))
    losses = tuple(loss_prices(spec, records(), grid(), load_ends(records())))
    costs = tuple(op_costs(spec, records(), grid(), load_costs(records())).rows())
    shares = tuple(op_prices(spec, records(), grid()))
    return Censused(repo_id, config, config_hash(config), spec, prices, points, ends, losses, costs, shares)


def versions(**overrides: str) -> dict[str, str]:
    out = {
        "speccat": "0.1.0",
        "transformers": "5.24.0",
        "torch": "2.13.0",
        "census": census_version(),
        "records": records().version,
        "profiles": profiles_version(),
        "settings": grid().version,
    }
    out.update(overrides)
    return out


def repo_row(item: Censused, **fields: Any) -> dict[str, Any]:
    return {"repo_id": item.repo_id, "config_hash": item.config_hash, **fields}


def make_run(
    run_id: str,
    items: Sequence[Censused],
    *,
    day: int = 1,
    repos: Iterable[Mapping[str, Any]] | None = None,
    failures: Sequence[Mapping[str, Any]] = (),
    new: Iterable[str] | None = None,
    status: str | None = None,
    source: str = "hub",
    fits_on: bool = False,
    **version_overrides: str,
) -> NightData:
    """A run that lists `items` (or the given repo rows) and stores the specs and prices of
    `new` config hashes (all of the items' by default); with `fits_on`, the questions of the
    table fits_on too, which the store then answers for every spec (a few seconds a spec)."""
    started = datetime(2026, 11, day, 3, 0, tzinfo=timezone.utc)
    fresh = {i.config_hash for i in items} if new is None else set(new)
    by_hash = {i.config_hash: i for i in items}
    return NightData(
        run_id=run_id,
        started=started,
        ended=started + timedelta(minutes=5),
        status=status or ("partial" if failures else "completed"),
        source=source,
        versions=versions(**version_overrides),
        settings=[dict(s) for s in grid().stored],
        setting_defaults=dict(grid().setting({})),
        switches=records().switches,
        repos=list(repos) if repos is not None else [repo_row(i) for i in items],
        configs={h: by_hash[h].config for h in sorted(fresh)},
        specs={h: by_hash[h].spec for h in sorted(fresh)},
        prices={h: by_hash[h].prices for h in sorted(fresh)},
        point_prices={h: list(by_hash[h].point_prices) for h in sorted(fresh)},
        end_prices={h: list(by_hash[h].end_prices) for h in sorted(fresh)},
        loss_prices={h: list(by_hash[h].loss_prices) for h in sorted(fresh)},
        op_costs={h: list(by_hash[h].op_costs) for h in sorted(fresh)},
        op_prices={h: list(by_hash[h].op_prices) for h in sorted(fresh)},
        **reference_rows(records(), grid(), questions=fits_on),
        param_rules=rule_rows(),
        failures=list(failures),
    )


def replicated(items: Sequence[Censused], copies: int) -> list[Censused]:
    """`copies` distinct configs per item: the same spec and prices under new config hashes
    (a synthetic catalogue of many configs built from the shipped specs)."""
    out = []
    for i in range(copies):
        for j, item in enumerate(items):
            suffix = f"{i * len(items) + j:08x}"
            out.append(
                Censused(
                    repo_id=f"synthetic/{item.repo_id.split('/')[1]}-{suffix}",
                    config={**item.config, "_copy": i},
                    # a new prefix, as a real hash has (DuckDB keeps 8-byte prefixes as string stats)
                    config_hash=suffix + item.config_hash[len(suffix):],
                    spec=item.spec,
                    prices=item.prices,
                    point_prices=item.point_prices,
                    end_prices=item.end_prices,
                    loss_prices=item.loss_prices,
                    op_costs=item.op_costs,
                    op_prices=item.op_prices,
                )
            )
    return out


def dump(con) -> dict[str, list[tuple]]:
    """Every table's rows, sorted: a catalogue's whole content, comparable across files."""
    from speccat.catalogue.store.file import TABLES

    def hashable(row: tuple) -> tuple:
        return tuple(tuple(v) if isinstance(v, list) else v for v in row)

    def order(row: tuple) -> tuple:  # Python's order: ENUM and VARCHAR columns sort alike
        return tuple((v is None, "" if v is None else v) for v in row)

    return {t: sorted((hashable(r) for r in con.execute(f"SELECT * FROM {t}").fetchall()), key=order) for t in TABLES}


# The two runs most tests share. Night 1 lists the six REPOS and a gated repo; night 2 drops
# Qwen3-0.6B, moves Llama to a new sha (same config), points Mixtral-8x7B at a new config
# (Mixtral-8x22B's), adds Qwen3-8B, fails to fetch DeepSeek-V3 at its known sha, and meets a
# repo whose config is not JSON.
DOWNLOADS = {
    "meta-llama/Llama-3.1-8B-Instruct": 5_000_000,
    "Qwen/Qwen3-0.6B": 3_000_000,
    "mistralai/Mixtral-8x7B-v0.1": 400_000,
    "deepseek-ai/DeepSeek-V3": 900_000,
    "deepseek-ai/DeepSeek-R1": 1_200_000,
    "Qwen/Qwen3-Next-80B-A3B-Thinking": 250_000,
    "Qwen/Qwen3-8B": 2_000_000,
    "acme/gated-model": 10,
    "acme/broken-config": 5,
}
NEW_CONFIG = "mistralai/Mixtral-8x22B-v0.1"
ADDED = "Qwen/Qwen3-8B"
GATED = "acme/gated-model"
BROKEN = "acme/broken-config"


def hub_row(item: Censused, night: int, **fields: Any) -> dict[str, Any]:
    return repo_row(
        item,
        sha=f"{item.repo_id}@{night}",
        downloads=DOWNLOADS[item.repo_id],
        likes=DOWNLOADS[item.repo_id] // 1000,
        gated=False,
        license="open",
        pipeline_tag="text-generation",
        last_modified=datetime(2026, 10, night, tzinfo=timezone.utc),
        **fields,
    )


def first_run(fits_on: bool = False) -> NightData:
    items = [censused(r) for r in REPOS]
    repos = [hub_row(i, 1) for i in items]
    repos.append({"repo_id": GATED, "gated": "manual", "downloads": DOWNLOADS[GATED]})
    failures = [{"repo_id": GATED, "stage": "fetch", "reason": "gated", "message": "403: accept the terms"}]
    return make_run("night-1", items, day=1, repos=repos, failures=failures, fits_on=fits_on)


def second_run(self_contained: bool = False, fits_on: bool = False) -> NightData:
    """Night 2. It carries specs and prices for its new configs only, unless `self_contained`
    (then for every config it lists: a run that lands whatever was stored before it); with
    `fits_on`, each night states the questions of the table fits_on (make_run)."""
    by_id = {r: censused(r) for r in REPOS + (NEW_CONFIG, ADDED)}
    new_mixtral = by_id[NEW_CONFIG]
    repos = []
    for repo_id in REPOS:
        item = by_id[repo_id]
        if repo_id == "Qwen/Qwen3-0.6B":
            continue
        if repo_id == "meta-llama/Llama-3.1-8B-Instruct":
            repos.append(hub_row(item, 2))
        elif repo_id == "mistralai/Mixtral-8x7B-v0.1":
            repos.append(hub_row(item, 2) | {"config_hash": new_mixtral.config_hash})
        elif repo_id == "deepseek-ai/DeepSeek-V3":
            repos.append(hub_row(item, 1) | {"config_hash": None})
        else:
            repos.append(hub_row(item, 1))
    repos.append(hub_row(by_id[ADDED], 2))
    repos.append({"repo_id": GATED, "gated": "manual", "downloads": DOWNLOADS[GATED]})
    repos.append({"repo_id": BROKEN, "downloads": DOWNLOADS[BROKEN]})
    failures = [
        {"repo_id": GATED, "stage": "fetch", "reason": "gated", "message": "403: accept the terms"},
        {"repo_id": "deepseek-ai/DeepSeek-V3", "stage": "fetch", "reason": "fetch_failed", "message": "503 three times"},
        {"repo_id": BROKEN, "stage": "census", "reason": "bad_json", "message": "config.json: line 1"},
    ]
    new = {new_mixtral.config_hash, by_id[ADDED].config_hash}
    if self_contained:
        new = {r.get("config_hash") for r in repos} - {None}
    return make_run("night-2", list(by_id.values()), day=2, repos=repos, failures=failures, new=new, fits_on=fits_on)


@cache
def two_night_catalogue(fits_on: bool = False) -> Path:
    """A catalogue with night 1 then night 2 published (built once per test process), with the
    table fits_on when asked (as the flow's nights build it; a few seconds a spec)."""
    from speccat.catalogue.store.file import publish

    folder = Path(tempfile.mkdtemp(prefix="speccat-store-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "catalogue.duckdb"
    publish(path, first_run(fits_on))
    publish(path, second_run(fits_on=fits_on))
    return path

"""The census stage lets go of each config's result once the night has it (flows/refresh.py
analyse_stage): the night keeps its prices as files in the spool, and nothing in the flow's
process keeps the price tables a census child sent back, while the stage runs or after it.
Prefect keeps the last 1,000 results a task wrote in memory unless the task says not to
(cache_result_in_memory); a first night of 480 configs on the Hub stand-in held 6.1 GB of them
in the flow's process before the publish began. And a new prefect.futures.as_completed per
result left a callback on each pending future that held every result finished after it, until
the stage ended. And Prefect's task runs hold what a task returned in reference cycles, which
only the cyclic collector frees: the stage collects after each result.
"""

from __future__ import annotations

import gc
import weakref

import pytest
from conftest import load_shipped
from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from speccat.catalogue.records.priced import PriceTables
from speccat.catalogue.store.spool import SpooledPrices, spool
from speccat.census import config_hash
from speccat.flows.refresh import Night, analyse_stage
from speccat.flows.tasks import Job

pytestmark = pytest.mark.slow

REPOS = ("Qwen/Qwen3-0.6B", "HuggingFaceTB/SmolLM2-135M-Instruct", "meta-llama/Llama-3.2-1B-Instruct", "google/gemma-3-1b-it",
         "openai-community/gpt2", "ArthurZ/mamba-130m")  # fmt: skip
WORKERS = 2  # the task runner's threads: the jobs beyond them wait their turn, pending
SEQ_LENGTH = 1024


def price_tables_alive() -> int:
    gc.collect()
    return sum(type(o) is PriceTables for o in gc.get_objects())  # type(), not isinstance: no lazy module is asked its class


@flow
def census_night(spool: str) -> tuple[dict, int, int]:
    """The census stage over REPOS; the PriceTables alive before it and after it, counted inside
    the flow run, where Prefect's result store lives."""
    from pathlib import Path

    night = Night(spool=Path(spool))
    jobs = [Job(config_hash(load_shipped(r)), load_shipped(r), r, SEQ_LENGTH) for r in REPOS]
    before = price_tables_alive()
    analyse_stage(night, jobs, ThreadPoolTaskRunner(max_workers=WORKERS), "released-test", time_limit=600, rebuild=True)
    return {h: type(a.prices) for h, a in night.analyses.items()}, before, price_tables_alive()


def test_the_night_holds_its_prices_on_disk_and_no_census_result_in_memory(prefect_api, tmp_path, monkeypatch):
    from speccat.flows import refresh

    monkeypatch.setattr(refresh, "IN_FLIGHT", len(REPOS))  # every job handed over at once
    spooled = []  # a weak reference to each result's price tables, in the order the night spooled them
    monkeypatch.setattr(refresh, "spool", lambda prices, folder: spooled.append(weakref.ref(prices)) or spool(prices, folder))
    during = []  # as each config is handled, inside the flow run: how many of those handled before it are alive

    def step(*args, **kwargs):
        during.append(sum(ref() is not None for ref in spooled[:-1]))

    monkeypatch.setattr(refresh.progress, "step", step)
    # The collector left to the stage: Prefect's task runs hold each result in reference cycles,
    # and in a flow holding a first night's listings the collector seldom ran, so each result
    # stayed (7.3 GiB after 480 configs). Disabled here, only the stage's own collections free them.
    gc.disable()
    try:
        held, before, after = census_night(str(tmp_path / "spool"))
    finally:
        gc.enable()
    assert held == {config_hash(load_shipped(r)): SpooledPrices for r in REPOS}
    assert sorted(p.name for p in (tmp_path / "spool").iterdir()) == sorted(held)
    # While the stage runs, every result handled before the current one is gone: the
    # as_completed loop kept some of them ([0, 0, 1, 2, 0, 0] here).
    assert during == [0] * len(REPOS)
    assert after == before  # each result's PriceTables let go of once spooled

"""The questions the catalogue's table fits_on answers for every model at once (fits_on.yaml):
memory sizes and GPU counts, and the rows the night hands the store for them: the sizes, and
the layouts tried at each GPU count, each at the grid setting of its tp and cp for every stack
and sequence length. The store prices them with the planner's own SQL (sql/steps/fits_on.sql),
so that the table and `speccat fit` cannot differ (docs/planning.md, "Every model at once")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from speccat.catalogue.datafile import Loader, read_yaml, version_of
from speccat.catalogue.records.candidates import leading
from speccat.catalogue.records.cost import Accelerator, accelerator_rows
from speccat.catalogue.records.schedules import Schedules
from speccat.catalogue.records.settings import Grid
from speccat.catalogue.records.states import States, StatesError

FITS_ON_PATH = Path(__file__).with_name("fits_on.yaml")


@dataclass(frozen=True)
class Questions:
    gpu_mem_gib: tuple[int, ...]
    accelerators: tuple[str, ...]  # per memory size, the accelerators sold at about that size
    gpus: tuple[int, ...]
    version: str


class _Loader(Loader):
    error = StatesError

    def counts(self, key: str, values) -> tuple[int, ...]:
        if not isinstance(values, list) or not values:
            raise self.fail("bad_value", key, f"must be a non-empty list, got {values!r}")
        for value in values:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise self.fail("bad_value", key, f"must hold whole numbers >= 1, got {value!r}")
        if len(set(values)) != len(values):
            raise self.fail("bad_value", key, f"holds a value twice: {values}")
        return tuple(values)


@cache
def load_questions(path: Path = FITS_ON_PATH) -> Questions:
    loader = _Loader(path.name)
    data = read_yaml(path, lambda reason, what: loader.fail(reason, "", what))
    top = loader.mapping("", data, ("gpu_mem_gib", "gpus"), ("gpu_mem_gib", "gpus"))
    sizes, names = [], []
    for i, entry in enumerate(top["gpu_mem_gib"] if isinstance(top["gpu_mem_gib"], list) else [None]):
        entry = loader.mapping(f"gpu_mem_gib[{i}]", entry, ("size", "accelerators"), ("size", "accelerators"))
        sizes.append(entry["size"])
        names.append(str(entry["accelerators"]))
    return Questions(loader.counts("gpu_mem_gib", sizes), tuple(names), loader.counts("gpus", top["gpus"]), version_of(data))


def plan_rows(
    questions: Questions, grid: Grid, states: States, accelerators: Mapping[str, Accelerator], schedules: Schedules
) -> dict[str, Sequence[Mapping]]:
    """The reference rows the night hands the store for the table fits_on: `fits_on_sizes` (one
    per memory size) and `fits_on_layouts` (per GPU count, each layout that can rank first,
    candidates.py `leading`, numbered in the order `speccat fit` numbers its layouts, at the grid
    setting of its tp and cp for each stack and sequence length: micro-batch 1, one in flight,
    every other field the grid's default, as fit prices; so even expert loads, dropless_tok_factor
    1, never one of the overload settings a spec with routed experts is priced at too). Both carry `plan_version`, a hash of
    everything the answers read beside the prices: this file, the grid, the recipes, the
    accelerators and the pipeline schedules (each layout runs its default). A (tp, cp) the grid does not price is left out, as the night holds no price."""
    default = next(name for name, a in accelerators.items() if a.default)
    plan = version_of({"questions": questions.version, "settings": grid.version, "states": states.version,
                       "accelerators": accelerator_rows(accelerators), "schedules": schedules.version})  # fmt: skip
    priced = {s["setting_id"] for s in grid.settings}
    highest_zero = max(states.zero)
    pairs = [(stack, seq) for stack in grid.schema["stack"].values for seq in grid.schema["seq_length"].values]
    layouts = []
    for gpus in questions.gpus:
        for position, lay in enumerate(leading(gpus, accelerators[default].node, highest_zero)):
            for stack, seq in pairs:
                setting = grid.setting({"stack": stack, "seq_length": seq, "micro_batch": 1, "tp": lay.tp, "cp": lay.cp, "in_flight": 1})
                if setting["setting_id"] in priced:
                    layouts.append({"plan_version": plan, "gpus": gpus, "position": position, "dp": lay.dp, "tp": lay.tp, "pp": lay.pp,
                                    "cp": lay.cp, "ep": lay.ep, "zero": lay.zero, "setting_id": setting["setting_id"]})  # fmt: skip
    sizes = [{"plan_version": plan, "gpu_mem_gib": size, "accelerators": names, "recipe": states.default_recipe, "accelerator": default}
             for size, names in zip(questions.gpu_mem_gib, questions.accelerators, strict=True)]  # fmt: skip
    return {"fits_on_sizes": sizes, "fits_on_layouts": layouts}

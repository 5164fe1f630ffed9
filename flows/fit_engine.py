"""What `speccat fit` lists: the (layout, switch set) pairs whose fullest stage fits the budget,
asked of the catalogue's own planner SQL (sql/macros/: rank_stages, rank_layouts,
fitting_sets), which the view rank_fits reads too, so that fit and the catalogue cannot differ.

The spec is priced at the settings fit's layouts need (its sequence length and micro-batch at
each tensor and context parallel size it tries) as a night prices it, into a catalogue in
memory (catalogue/store/memory.py); the layouts tried are a table there
(catalogue/records/candidates.py enumerates them).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

import duckdb
import pyarrow as pa

from speccat import sql
from speccat.catalogue.records.cost import load_accelerators, load_costs, op_costs
from speccat.catalogue.records.candidates import Layout, layouts
from speccat.catalogue.records.ends import end_prices, load_ends, loss_prices
from speccat.catalogue.records.layouts import LayoutError, infeasible
from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.pins import no_layout
from speccat.catalogue.records.pricing import price_spec
from speccat.catalogue.records.reference import reference_rows
from speccat.catalogue.records.settings import load_settings
from speccat.catalogue.records.states import load_states
from speccat.catalogue.store.memory import MemoryCatalogue
from speccat.catalogue.store.night import NightData
from speccat.flows.versions import current_versions

BYTE_FIELDS = frozenset({"activations", "ends", "loss_working", "remade", "backward", "weight", "grad", "optimizer", "host", "total"})
LAYOUTS_TABLE = "fit_layouts"


@functools.cache
def planning_data() -> dict:
    """The records, the settings grid, the recompute costs, the recipes (states.yaml), the
    ends' prices, the accelerators, the versions a night records and the data files' rows it
    stores, read once per process."""
    records, grid = load_records(), load_settings()
    return {"records": records, "grid": grid, "costs": load_costs(records), "states": load_states(), "ends": load_ends(records),
            "accelerators": load_accelerators(), "versions": current_versions(),
            # the data files' rows every night of fit's holds (it builds no table fits_on)
            "night_rows": reference_rows(records, grid, questions=False)}  # fmt: skip


@dataclass(frozen=True)
class Fit:
    """One (layout, switch set) that fits: the fullest stage's bytes by part, and the recompute
    it costs (a row of the macro fitting_sets, named as `fit --json` prints it)."""

    layout: Layout
    micro_batch: int
    mask: int  # -1 for full recompute
    switch_set: str
    stage: int  # the fullest stage
    in_flight: float
    activations: float  # bytes: the stage's layers × in-flight micro-batches
    ends: float  # bytes: embedding / final norm and logits × in-flight micro-batches
    loss_working: float  # bytes: the loss kernel's working set where the stage holds the head, else 0
    remade: float  # bytes: the saves one layer's backward remakes under the set (the stage's largest kind)
    backward: float  # bytes: one layer's backward beyond its saves, what it remakes and its working set (the stage's largest kind)
    weight: float
    grad: float
    optimizer: float
    offload_layers: int  # layers per rank whose activations go to host memory (its first)
    host: float  # bytes: the offloaded layers' activations in host memory, all micro-batches in flight
    offload_s: float  # their copy out and back per micro-batch over the host link
    total: float
    recompute_flops: float  # per micro-batch, the first stage's layers
    recompute_moved: float
    recompute_s: float  # estimated, per micro-batch, the first stage's layers
    overhead: float  # recompute_s over the same layers' forward + backward time (ratio)
    recompute_s_per_seq: float  # recompute_s over the sequences the dp pipelines take per micro-batch (dp · micro_batch)

    @classmethod
    def from_row(cls, row: Mapping) -> Fit:
        """A row of rank_layouts or fitting_sets."""
        layout = Layout(dp=row["dp_ranks"], tp=row["tp_ranks"], pp=row["pp_ranks"], ep=row["ep_ranks"], cp=row["cp_ranks"],
                        zero=row["zero_stage"], vpp=row["vpp_count"])  # fmt: skip
        return cls(
            layout, row["micro_batch_count"], row["mask"], row["switch_set"], row["fullest_stage"], row["in_flight_count"],
            row["activation_bytes"], row["ends_bytes"], row["loss_working_bytes"], row["remade_bytes"], row["backward_bytes"], row["weight_bytes"], row["grad_bytes"], row["optimizer_bytes"],
            row["offload_layers"], row["host_bytes"], row["offload_s"], row["total_bytes"], row["recompute_flops"], row["recompute_bytes"], row["recompute_s"], row["overhead_pct"] / 100,
            row["recompute_s_per_seq"],
        )  # fmt: skip

    def as_dict(self) -> dict:
        """The row as `fit --json` prints it: byte figures as whole bytes, rounded up (a rank
        holds no half byte; a ZeRO or tp share of an odd count is priced as a fraction)."""
        out = {f: getattr(self.layout, f) for f in ("dp", "tp", "pp", "ep", "cp", "zero", "vpp")}
        out.update({k: math.ceil(v) if k in BYTE_FIELDS else v for k, v in self.__dict__.items() if k != "layout"})
        return out


def fits(
    spec: Mapping, name: str, accelerator: str, *, gpus: int, seq: int, budget: float, micro_batch: int = 1,
    fixed: Mapping[str, int | None] | None = None, zeros: Iterable[int] = (0, 1, 2, 3), recipe: str | None = None,
    setting: Mapping | None = None, schedule: str | None = None, loss: str | None = None, offload_layers: int | str = 0,
) -> list[Fit]:  # fmt: skip
    """Every (layout, switch set) of `gpus` ranks whose fullest stage fits `budget` bytes, of
    each layout only the sets on its frontier, ranked by estimated recompute seconds per
    sequence, then total bytes (the macro fitting_sets). `setting` holds the other setting
    fields (the stack, flash attention, the dtype, ...) over the grid's defaults; `fixed` the
    layout fields held; `schedule` the pipeline schedule (schedules.yaml; None: each layout's
    default), which a layout it cannot run on (its vpp, its pp) leaves out; `loss` the loss kernel
    after the head (ends.yaml; None: the model's own); `offload_layers` the layers per rank whose
    activations go to host memory (its first), or "auto": every count tried, offload weighed on
    the frontier beside keeping and recomputing (fitting_sets with offload_search). LayoutError "infeasible" when the held
    fields leave no layout, or only ones layouts.yaml refuses at this sequence length."""
    data = planning_data()
    records, grid = data["records"], data["grid"]
    node = data["accelerators"][accelerator].node
    fixed = dict(fixed or {})
    zeros = tuple(zeros)
    candidates = layouts(gpus, spec, fixed, zeros, node)
    if not candidates:  # the held fields cannot be: say which, not "nothing fits"
        raise LayoutError("infeasible", f"{spec.get('name', name)}: {no_layout(spec, gpus, fixed, zeros, node)}")
    base = dict(setting or {})  # the stack and any other setting field (`--set`), under what the layout decides
    at = {(tp, cp): grid.setting({**base, "seq_length": seq, "micro_batch": micro_batch, "tp": tp, "cp": cp, "in_flight": 1})
          for tp, cp in sorted({(lay.tp, lay.cp) for lay in candidates})}  # fmt: skip
    refusals = infeasible(spec, records, grid.with_settings(list(at.values())))
    refused = {row["setting_id"] for row in refusals}
    at = {key: s for key, s in at.items() if s["setting_id"] not in refused}
    if not at:  # every (tp, cp) left is one layouts.yaml refuses: its first rule says why
        first = refusals[0]
        raise LayoutError("infeasible", f"{spec.get('name', name)}: kind {first['kind']!r} cannot run at seq {seq}: {first['message']} ({first['rule']})")
    con = held(spec, name, list(at.values()))
    rows = layout_rows(candidates, {key: s["setting_id"] for key, s in at.items()}, recipe or data["states"].default_recipe, budget, accelerator)
    con.register(LAYOUTS_TABLE, rows)
    search = offload_layers == "auto"
    asked = {"schedule": schedule, "loss": loss, "offload_layers": None if search else offload_layers or None, "offload_search": search or None}
    try:
        for variable, value in asked.items():
            con.execute(sql.render("steps/set_variable", name=variable), {"value": value})
        cursor = con.execute(sql.render("steps/fitting_sets", layouts=LAYOUTS_TABLE))
        columns = [d[0] for d in cursor.description]
        return [Fit.from_row(dict(zip(columns, row))) for row in cursor.fetchall()]
    finally:
        for variable in asked:
            con.execute(sql.render("steps/set_variable", name=variable), {"value": None})
        con.unregister(LAYOUTS_TABLE)


_HELD: dict[str, MemoryCatalogue] = {}  # the spec fit asked about last (its hash) and its catalogue in memory


def held(spec: Mapping, name: str, settings: list[Mapping]) -> duckdb.DuckDBPyConnection:
    """A connection to a catalogue in memory holding `spec` priced at `settings`: the one this
    process holds for the spec, with the settings it lacks priced and added, or a new one (a
    search asks about one spec at many settings, and often at the same ones again)."""
    key = spec_hash(spec)
    grid = planning_data()["grid"]
    if key not in _HELD:
        for other in _HELD.values():
            other.close()
        _HELD.clear()
        _HELD[key] = MemoryCatalogue(priced_night(spec, key, name, grid.with_settings(settings)))
    catalogue = _HELD[key]
    lacking = [s for s in settings if s["setting_id"] not in catalogue.settings]
    if lacking:
        catalogue.add(priced_night(spec, key, name, grid.with_settings(lacking)))
    return catalogue.con


def spec_hash(spec: Mapping) -> str:
    """The key a spec is held under in memory (it stands for the config hash the catalogue keys
    a spec by: fit may hold a spec no config of the catalogue gave)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def priced_night(spec: Mapping, config_hash: str, name: str, grid) -> NightData:
    """`spec` priced at every setting of `grid` as the night prices it, as a night of its own
    (source `fit`) holding the one repo `name`, the spec keyed by `config_hash` (spec_hash)."""
    data = planning_data()
    records, costs = data["records"], data["costs"]
    now = datetime.now(timezone.utc)
    return NightData(
        run_id=f"fit-{config_hash}", started=now, ended=now, status="completed", source="fit", versions=data["versions"],
        # a fixed setting fit was asked for (--set attention_kernel=flash) is priced and hashed into
        # the setting's id, but the settings table has no column for it (docs/pricing.md)
        settings=[{k: v for k, v in s.items() if k not in grid.fixed} for s in grid.settings],
        setting_defaults=dict(grid.setting({})), switches=records.switches,
        repos=[{"repo_id": name, "config_hash": config_hash}], configs={config_hash: {"model_type": spec.get("model_type")}},
        specs={config_hash: spec}, prices={config_hash: price_spec(spec, records, grid, costs=costs)},
        end_prices={config_hash: end_prices(spec, records, grid, data["ends"])},
        loss_prices={config_hash: loss_prices(spec, records, grid, data["ends"])},
        op_costs={config_hash: op_costs(spec, records, grid, costs).rows(frozenset())}, **data["night_rows"],
    )  # fmt: skip


def layout_rows(
    candidates: list[Layout], settings: Mapping[tuple[int, int], str], recipe: str, budget: float, accelerator: str, only_fitting: bool = True
) -> pa.Table:
    """The layouts tried, as the table the planner's macros read (sql/macros/rank_stages.sql),
    numbered in the order they were enumerated: each at the setting of its (tp, cp) in
    `settings` (a layout without one is left out: layouts.yaml refuses it), asking, as fit
    does, only for what could fit at each layout's fullest stage (`only_fitting`), or, with
    only_fitting false, for every set at every stage."""
    rows = [{"layout": i, "dp": lay.dp, "pp": lay.pp, "ep": lay.ep, "zero": lay.zero, "vpp": lay.vpp, "etp": None,
             "setting_id": settings[(lay.tp, lay.cp)], "recipe": recipe, "budget_bytes": float(budget), "accelerator": accelerator,
             "only_fitting": only_fitting}
            for i, lay in enumerate(candidates) if (lay.tp, lay.cp) in settings]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=LAYOUT_SCHEMA)


LAYOUT_SCHEMA = pa.schema(
    [(c, pa.int32()) for c in ("layout", "dp", "pp", "ep", "zero", "vpp", "etp")]
    + [("setting_id", pa.string()), ("recipe", pa.string()), ("budget_bytes", pa.float64()), ("accelerator", pa.string()), ("only_fitting", pa.bool_())]
)

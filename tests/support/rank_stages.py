"""Every pipeline stage's model states at one layout, from the planner's own SQL (the macro
rank_stages over a catalogue in memory holding the spec, as `speccat fit` asks it, but for every
stage, not only the fullest), for tests that work those bytes by hand."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from speccat.catalogue.records.candidates import Layout
from speccat.catalogue.store.memory import MemoryCatalogue
from speccat.flows.fit_engine import layout_rows, planning_data, priced_night, spec_hash


def stage_states(spec: Mapping, layout: Layout, recipe: str | None = None, seq: int = 2048) -> list[dict]:
    """Per stage (0 first): weight, grad, optimizer and their total, in bytes, one rank's."""
    data = planning_data()
    grid = data["grid"]
    setting = grid.setting({"seq_length": seq, "micro_batch": 1, "tp": layout.tp, "cp": layout.cp, "in_flight": 1})
    with contextlib.closing(MemoryCatalogue(priced_night(spec, spec_hash(spec), "model", grid.with_settings([setting])))) as held:
        con = held.con
        at = {(layout.tp, layout.cp): setting["setting_id"]}
        con.register("one_layout", layout_rows([layout], at, recipe or data["states"].default_recipe, 2.0**60, "H100-SXM", only_fitting=False))
        rows = con.execute(
            "SELECT weight_bytes, grad_bytes, optimizer_bytes FROM rank_stages('one_layout') WHERE mask = 0 ORDER BY stage"
        ).fetchall()
    return [{"weight": w, "grad": g, "optimizer": o, "total": w + g + o} for w, g, o in rows]

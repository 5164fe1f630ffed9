"""The data files' rows every night hands the store beside its specs and prices, as the
catalogue's reference tables hold them: the recipes' sharding (states.yaml), the ops each switch
set re-runs and keeps, the accelerators, the pipeline schedules, the loss kernels, the frameworks' flags and, for
a night that builds the table fits_on, the questions it answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from speccat.catalogue.records.cost import accelerator_rows, load_accelerators, load_costs, switch_op_rows
from speccat.catalogue.records.ends import load_ends
from speccat.catalogue.records.fits_on import load_questions, plan_rows
from speccat.catalogue.records.flags import flag_rows, load_flags
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.opsplit import switch_kept_rows
from speccat.catalogue.records.schedules import load_schedules
from speccat.catalogue.records.settings import Grid
from speccat.catalogue.records.states import load_states, state_sharding_rows


def reference_rows(records: Records, grid: Grid, questions: bool) -> dict[str, Sequence[Mapping]]:
    """NightData's reference fields, by name; with `questions`, fits_on's (fits_on_sizes,
    fits_on_layouts), without them a night builds no fits_on rows."""
    states, accelerators, schedules = load_states(), load_accelerators(), load_schedules()
    rows = {
        "state_sharding": state_sharding_rows(states),
        "switch_ops": switch_op_rows(records, load_costs(records)),
        "switch_kept": switch_kept_rows(records),
        "accelerators": accelerator_rows(accelerators),
        "schedules": schedules.rows(),
        "losses": load_ends(records).rows(),
        **flag_rows(load_flags(tuple(records.switches))[0], records),
    }
    if questions:
        rows.update(plan_rows(load_questions(), grid, states, accelerators, schedules))
    return rows

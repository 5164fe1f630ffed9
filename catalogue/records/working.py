"""The working set of a layer's backward, priced (records.yaml `working_set`, docs/pricing.md,
"The backward peak").

The census states, per kind, what is alive at the moment of the layer's backward when most is,
beyond what was alive when it began (spec `measured.working_set`,
census/measure/backward_peak.py): tensors by width (elements per token) and dtype, each with a
net count, and a constant. The records say what one rank holds of a tensor of each width (the
first class whose width equals it) and what each dtype's element weighs; this module adds them
up at every setting. A spec that states no working set (one censused before it was measured)
gets NaN: no price, never a guessed one.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from speccat.catalogue.records.expr import Expr, ExprError
from speccat.catalogue.records.names import LayerNames, PricingError, bind, kind_values
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.priced import layers
from speccat.catalogue.records.settings import Grid
from speccat.catalogue.records.working_records import WorkingSet

def _optional(expr: Expr, names: LayerNames) -> float | None:
    """`expr` at `names`, or None where the kind lacks a name it reads (a class for other kinds)."""
    try:
        return float(expr(names))
    except (PricingError, KeyError, ExprError):
        return None


def held_per_token(working: WorkingSet, widths: list, census: LayerNames) -> list[tuple[Expr | None, Expr | None]]:
    """For each stated [width, dtype, count], what one rank holds of it per token: (the matched
    class's `held`, None) or, of a width no class holds at the `census` names, (None, the share)."""
    classes = [(c, _optional(c.width, census)) for c in working.classes if c.when is None or _optional(c.when, census)]
    out = []
    for width, _, count in widths:
        held = next((c.held for c, w in classes if w == width), None)
        out.append((held, None) if held is not None else (None, working.unmatched_formed if count > 0 else working.unmatched_freed))
    return out


def kind_working_set(working: WorkingSet, stated: Mapping, held: list, names: LayerNames, where: str) -> float:
    """One rank's bytes of a kind's stated working set (`measured.working_set`) at one setting's
    `names`, each width held as `held` (held_per_token) says."""
    total = float(stated["constant_bytes"])
    try:
        tokens = float(working.tokens(names))
        for (width, dtype, count), (cls, share) in zip(stated["widths"], held):
            if dtype not in working.dtypes:
                raise PricingError("bad_value", f"{where}: working set dtype {dtype!r} has no bytes in the records' working_set.dtypes")
            elements = float(cls(names)) if cls is not None else width * float(share(names))
            total += count * elements * float(working.dtypes[dtype](names)) * tokens
    except ExprError as err:
        raise PricingError("bad_value", f"{where}: working set: {err}") from None
    # a stack that runs the layer otherwise (megatron dispatching only the chosen expert slots
    # where transformers ran every expert) may free more than it forms at these widths
    return max(total, 0.0)


def price_working_sets(spec: Mapping, records: Records, grid: Grid, kinds: tuple[str, ...]) -> np.ndarray:
    """[kind, setting]: one rank's bytes of each kind's working set at each setting of `grid`;
    NaN for a kind whose spec states none, or every kind when the records price none."""
    out = np.full((len(kinds), len(grid.settings)), np.nan)
    working, measured = records.working_set, spec.get("measured", {})
    stating = [(k, kind) for k, kind in enumerate(kinds) if measured.get(kind, {}).get("working_set") is not None] if working else []
    kvs = [kind_values(spec, kind) for _, kind in stating]
    held = []  # per kind stating one, each width's class matched as the census ran
    for kv, (_, kind) in zip(kvs, stating):
        ran = grid.setting({"stack": "transformers", "seq_length": measured[kind]["seq_length"], "tp": 1, "cp": 1, "sequence_parallel": False})
        held.append(held_per_token(working, measured[kind]["working_set"]["widths"], bind(kv, ran, grid.dtype_bytes, records)))
    for j, i, names, where in layers(kvs, records, grid):
        k, kind = stating[j]
        out[k, i] = kind_working_set(working, measured[kind]["working_set"], held[j], names, where)
    return out

"""Kinds whose attention differs in shape (spec `attention_dims`), priced with each kind's own
heads and widths: transformers' registry model types censused from their default configs,
measured across settings (census/across.py) and priced at the same points
(catalogue/records/points.py)."""

from __future__ import annotations

import pytest

from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.points import price_points
from speccat.catalogue.records.settings import load_settings
from speccat.census import run_census

TOLERANCE = 0.005  # at the census's setting
SWITCH_TOLERANCE = 0.01  # what a switch set frees
OWN_DIMS = ["dots3_note_text", "mimo_v2_flash", "gemma4_unified_text"]
OWN_DIMS_GAPS: dict[str, str] = {}  # model_type -> why its kinds are priced off (an xfail); gemma4_unified_text's weightless v_norm is now priced


def _pairs(model_type: str) -> dict[tuple[str, str], tuple[float, float]]:
    """(kind, point) -> (priced, measured) bytes per token."""
    from bench.bench_registry import default_config

    spec = run_census(default_config(model_type), name=model_type, seq_length=256, across=True)
    assert spec["attention_dims"]  # at least one kind differs from the model-wide dims
    priced = {(r["kind"], r["point"]): r["priced_per_token"] for r in price_points(spec, load_records(), load_settings())}
    measured = {(kind, "census"): sum(m["bytes_per_token"].values()) for kind, m in spec["measured"].items()}
    for point in spec["measured_at"]:
        measured.update({(kind, point["point"]): sum(ops.values()) for kind, ops in point["bytes_per_token"].items()})
    return {key: (priced[key], measured[key]) for key in measured}


@pytest.mark.parametrize(
    "model_type",
    [pytest.param(t, marks=pytest.mark.xfail(strict=True, reason=OWN_DIMS_GAPS[t])) if t in OWN_DIMS_GAPS else t for t in OWN_DIMS],
)
def test_kinds_with_their_own_attention_dims_are_priced_as_measured(model_type):
    for (kind, point), (priced, measured) in _pairs(model_type).items():
        if point == "census":
            assert abs(priced / measured - 1) <= TOLERANCE, f"{kind}: priced {priced:.1f} B/token, measured {measured:.1f}"


@pytest.mark.parametrize("model_type", OWN_DIMS)
def test_each_kinds_attention_is_priced_with_its_own_dims(model_type):
    """What recomputing the attention kernel's inputs (attBMM) or its outputs (softmax) frees,
    through torch's selective-checkpoint API, priced and measured, per kind."""
    pairs = _pairs(model_type)
    for kind in {kind for kind, _ in pairs}:
        full = pairs[(kind, "census")]
        for name in ("attBMM", "softmax"):
            recomputed = pairs[(kind, f"recompute {name}")]
            priced, measured = full[0] - recomputed[0], full[1] - recomputed[1]
            assert measured > 0 and abs(priced / measured - 1) <= SWITCH_TOLERANCE, f"{kind}, {name}: priced {priced:.1f}, measured {measured:.1f}"

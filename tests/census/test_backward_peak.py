"""The census's backward peak (census/measure/backward_peak.py) against a real CPU forward and
backward of one layer of the same tiny model, bf16, sdpa: the most bytes alive at any moment
of the layer's backward beyond those alive before it began (its saves among them; the gradient
it receives counted in), counted storage by storage (tests/support/storage_tracker.py), the backward run to
the layer's input as the census runs it (the weights' own gradients not asked for).

While a dispatch mode runs, torch takes every tensor for a subclass (ATen's
TensorSubclassLikeUtils.h), and the index's backward then fills the zeros it made with the
gradient out of place (index_put) rather than in place (index_put_): one more tensor of the
gathered rows alive at that op, which a plain run does not hold. The census's fake tensors take
that path too, and it counts the copy in the zeros' place; so does the tracker here
(tests/support/storage_tracker.py PlainIndexPut), which checks that the out-of-place fill ran.

Three shapes of a tiny Llama (tests/support/tiny_models.py) and a tiny Qwen3 MoE:
- a wide MLP, where the peak is in the MLP and is worked by hand: the gradient the layer
  receives (h · 2 bytes a token, alive to the end through the residual), down_proj's input
  gradient, then the gradients of the activation and of up_proj, less down_proj's saved input,
  which its backward has freed: (h + 2 · ffn) · 2 bytes a token;
- a narrow MLP (32 wide), where the peak is in the attention's backward;
- the MoE, whose grouped experts run as the census runs them (grouped_mm).

Under full recompute torch's checkpoint re-runs the layer's forward when its backward first
reads a save, so the peak beyond the start is the saves remade plus the same working set:
checked on the real layer with torch.utils.checkpoint. The saves remade are all the layer keeps
with nothing recomputed, which the records price: Llama's, whose first RMSNorm keeps an fp32
copy of the input rather than the input the checkpoint holds, are its whole price.
"""

from __future__ import annotations

import pytest
from support.layer_peaks import real_peak
from support.tiny_models import S, tiny_config

from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import load_settings
from speccat.census import run_census

LLAMA, QWEN_MOE = "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B"
CASES = {"wide MLP": (LLAMA, {"intermediate_size": 256}), "narrow MLP": (LLAMA, {"intermediate_size": 32}), "MoE": (QWEN_MOE, {})}


def config_of(case: str) -> dict:
    repo, changes = CASES[case]
    return {**tiny_config(repo), **changes}


def census_kind(config: dict) -> tuple[dict, dict]:
    spec = run_census(config, name="tiny", seq_length=S).to_dict()
    (kind,) = spec["measured"]
    return spec, spec["measured"][kind]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_census_backward_peak_is_the_real_layers(case):
    config = config_of(case)
    _, measured = census_kind(config)
    assert measured["backward_peak"] == real_peak(config)
    # what the census states is alive at that peak adds up to it
    size = {"compute": 2, "float32": 4, "int64": 8, "bool": 1}
    stated = measured["working_set"]
    assert sum(n * w * size[dtype] * S for w, dtype, n in stated["widths"]) + stated["constant_bytes"] == measured["backward_peak"]


def test_a_wide_mlps_peak_worked_by_hand():
    config = config_of("wide MLP")
    _, measured = census_kind(config)
    assert measured["backward_peak"] == (config["hidden_size"] * 2 + 2 * config["intermediate_size"] * 2) * S
    h, ffn = config["hidden_size"], config["intermediate_size"]
    assert measured["working_set"] == {"widths": [[h, "compute", 1], [ffn, "compute", 2]], "constant_bytes": 0}


def test_full_recompute_adds_the_saves_the_records_price_remade():
    config = config_of("wide MLP")
    spec, measured = census_kind(config)
    records, grid = load_records(), load_settings()
    setting = grid.setting({"stack": "transformers", "seq_length": S, "tp": 1, "cp": 1, "attention_kernel": "flash"})
    prices = price_layers(spec, records, grid.with_settings([setting]))
    remade = float(prices.total[0, 0, 0])  # nothing recomputed: none of it is the layer's input
    assert remade > measured["backward_peak"] and float(prices.full[0, 0]) == S * config["hidden_size"] * 2
    assert real_peak(config, recompute=True) == remade + measured["backward_peak"]


def test_a_working_set_leaves_out_what_holds_nothing():
    """A save the watcher books at 0 bytes (log_sigmoid's buffer, which CUDA leaves empty) freed in
    a layer's backward states no width: the spec would refuse a width of 0."""
    import torch

    from speccat.census.measure.backward_peak import working_set

    made, freed = [(3 * 8 * 2, torch.bfloat16)], [(0, torch.float32), (3 * 16 * 4, torch.float32)]
    assert working_set((made, freed), 3, torch.bfloat16) == {"widths": [[8, "compute", 1], [16, "float32", -1]], "constant_bytes": 0}

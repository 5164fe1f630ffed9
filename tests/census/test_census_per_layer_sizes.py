"""Sizes a config may state once per layer (census/intake/limits.yaml `per_layer_sizes`): gemma3n's
intermediate_size is a list, one width per layer. The checks take a list of sizes there, each
entry within the field's bounds and the list as long as the stack, and refuse anything else
naming the field (and the entry); layers built at different widths are different shapes, so
different kinds.
"""

from __future__ import annotations

import pytest

from speccat.census.intake.checks import check_raw
from speccat.census.intake.limits import LIMITS
from speccat.census.spec import SpecError

LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}  # fmt: skip


def test_a_per_layer_list_of_sizes_passes_the_raw_checks():
    check_raw({**LLAMA, "model_type": "gemma3n_text", "intermediate_size": [128, 128, 256]})


@pytest.mark.parametrize(
    ("sizes", "reason", "names"),
    [
        ([128, 0, 256], "bad_value", "intermediate_size[1]: must be >= 1"),
        ([128, "256", 256], "bad_value", "intermediate_size[1]: must be an integer"),
        ([128, 256, True], "bad_value", "intermediate_size[2]: must be an integer"),
        ([128, [256], 256], "bad_value", "intermediate_size[1]: must be an integer"),
        ([128, 256, LIMITS.sizes["intermediate_size"][1] + 1], "too_large", "intermediate_size[2]:"),
        ([128, 256], "bad_value", "intermediate_size: 2 entries, but num_hidden_layers is 3"),
        ([], "bad_value", "intermediate_size: a per-layer list"),
    ],
)
def test_each_entry_and_the_length_are_checked(sizes, reason, names):
    with pytest.raises(SpecError) as err:
        check_raw({**LLAMA, "intermediate_size": sizes})
    assert err.value.reason == reason and names in str(err.value)


def test_a_size_transformers_takes_only_as_one_integer_is_still_refused_as_a_list():
    assert "hidden_size" not in LIMITS.per_layer_sizes
    with pytest.raises(SpecError, match=r"hidden_size: must be an integer, got list"):
        check_raw({**LLAMA, "hidden_size": [64, 64, 64]})


def test_a_model_that_takes_one_width_refuses_a_list_when_transformers_does():
    """The raw checks leave it to transformers which models take a per-layer width: llama's
    MLP cannot be built from a list."""
    from speccat.census import run_census

    with pytest.raises(SpecError) as err:
        run_census({**LLAMA, "intermediate_size": [128, 128, 128]}, name="llama-list", seq_length=16)
    assert err.value.reason == "bad_value"


def test_layers_of_different_widths_are_different_shapes():
    """A tiny gemma3n text stack whose third layer is wider: classified apart from the others."""
    from bench.bench_registry import default_config
    from speccat.census.build.model import build
    from speccat.census.intake.resolve import resolve_config
    from speccat.census.structure.shapes import classify

    config = default_config("gemma3n_text")
    config.update(
        num_hidden_layers=4, intermediate_size=[64, 64, 96, 64], hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, vocab_size=64, vocab_size_per_layer_input=64, hidden_size_per_layer_input=8, laurel_rank=4,
        layer_types=["sliding_attention"] * 3 + ["full_attention"], num_kv_shared_layers=0, activation_sparsity_pattern=[0.0] * 4,
    )  # fmt: skip
    top, text, _ = resolve_config(config)
    stack = classify(build(top, text).layers)
    shapes = list(dict.fromkeys(shape for _, shape in stack))
    assert [shape.layers for shape in shapes] == [[0, 1, 3], [2]]
    widths = [{p.shape for n, p in build(top, text).layers[s.first].mlp.named_parameters() if n == "up_proj.weight"} for s in shapes]
    assert widths == [{(64, 32)}, {(96, 32)}]


def test_the_limits_refuse_a_per_layer_size_with_no_bounds(tmp_path):
    from pathlib import Path

    import yaml

    from speccat.census.intake.limits import LIMITS_PATH, load_limits

    data = yaml.safe_load(Path(LIMITS_PATH).read_text())
    data["per_layer_sizes"] = ["intermediate_size", "expert_width"]
    path = tmp_path / "limits.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=r"per_layer_sizes: \['expert_width'\] have no bounds"):
        load_limits(path)

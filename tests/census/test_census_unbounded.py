"""A bound field's "no bound" value (census/intake/limits.yaml `unbounded`): transformers' XLNet and
Transformer-XL state max_position_embeddings -1, relative positions with no sequence limit.
It passes the size checks and bounds nothing; any other value below 1 is still refused."""

from __future__ import annotations

import pytest

from speccat.census.intake.checks import check_raw
from speccat.census.intake.limits import LIMITS, LIMITS_PATH, load_limits
from speccat.census.spec import SpecError

LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}  # fmt: skip


def test_minus_one_positions_is_no_bound():
    assert LIMITS.unbounded == {"max_position_embeddings": -1}
    check_raw({**LLAMA, "max_position_embeddings": -1})


@pytest.mark.parametrize("value", [0, -2])
def test_other_values_below_one_are_refused(value):
    with pytest.raises(SpecError) as err:
        check_raw({**LLAMA, "max_position_embeddings": value})
    assert err.value.reason == "bad_value" and f"max_position_embeddings: must be >= 1, got {value}" in str(err.value)


def test_an_unbounded_model_runs_at_the_census_length_and_states_no_limit():
    from speccat.census import run_census

    spec = run_census({**LLAMA, "max_position_embeddings": -1}, name="llama-unbounded", seq_length=32)
    assert {m["seq_length"] for m in spec["measured"].values()} == {32}
    assert "max_position_embeddings" not in spec


def test_the_loader_refuses_an_unbounded_field_with_no_bounds(tmp_path):
    import yaml

    data = yaml.safe_load(LIMITS_PATH.read_text())
    data["unbounded"] = {"context_length": -1}
    path = tmp_path / "limits.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match="unbounded"):
        load_limits(path)

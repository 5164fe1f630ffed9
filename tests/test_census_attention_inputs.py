"""speccat's attention takes what a flash kernel takes. A tensor input it would not read (an
additive score bias, per-query sinks) is refused, never dropped: dropped, the layer would be
measured and priced as plain attention while the model means something else (inkling's relative
position bias, s×s scores per head, which transformers passes only to its sdpa and eager
attention: the model states it does not support flash attention)."""

from __future__ import annotations

import pytest
import torch

from speccat.census.attention import speccat_attention
from speccat.census.spec import SpecError


class _Attention(torch.nn.Module):
    is_causal = True


def _qkv():
    q = torch.randn(1, 4, 8, 16)
    k, v = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    return q, k, v


def test_positions_are_taken_and_change_nothing():
    q, k, v = _qkv()
    plain, _ = speccat_attention(_Attention(), q, k, v, None)
    with_positions, _ = speccat_attention(_Attention(), q, k, v, None, position_ids=torch.arange(8)[None])
    assert with_positions.shape == (1, 8, 4, 16)
    assert torch.equal(plain, with_positions)


@pytest.mark.parametrize("name", ["position_bias", "sinks"])
def test_a_tensor_the_kernel_does_not_take_is_refused(name):
    q, k, v = _qkv()
    with pytest.raises(SpecError) as err:
        speccat_attention(_Attention(), q, k, v, None, **{name: torch.zeros(1, 4, 8, 8)})
    assert err.value.reason == "unsupported_layer"
    assert f"_Attention: its attention passes the tensor {name}" in str(err.value)


def test_a_model_passing_a_position_bias_is_refused_naming_it():
    from bench.bench_registry import default_config
    from speccat.census import run_census

    with pytest.raises(SpecError) as err:
        run_census(default_config("inkling_text"), name="inkling_text", seq_length=32)
    assert err.value.reason == "unsupported_layer"
    assert "its attention passes the tensor position_bias" in str(err.value)

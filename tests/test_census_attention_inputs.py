"""speccat's attention takes what its kernel takes: q, k, v and an additive score bias (inkling's
relative position bias, s×t scores per head, which transformers passes to its sdpa and eager
attention: the kernel adds it as SDPA's memory-efficient kernel adds a float mask). A tensor input
it would not read (per-query sinks, a second bias) is refused, never dropped: dropped, the layer
would be measured and priced as attention it does not compute."""

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


def test_a_score_bias_is_taken_as_the_kernels_bias():
    """A tensor keyword shaped as scores (b, heads, s, t) is an additive score bias, whatever its
    name: the kernel adds it to the scores, as SDPA adds a float mask."""
    q, k, v = _qkv()
    bias = torch.randn(1, 4, 8, 8)
    ours, _ = speccat_attention(_Attention(), q, k, v, None, position_bias=bias, scaling=0.25)
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    reference = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), attn_mask=bias.masked_fill(~causal, float("-inf")), scale=0.25
    )
    torch.testing.assert_close(ours, reference.transpose(1, 2), rtol=1e-5, atol=1e-5)
    plain, _ = speccat_attention(_Attention(), q, k, v, None, scaling=0.25)
    assert not torch.allclose(ours, plain)  # the bias was read, not dropped


@pytest.mark.parametrize(
    "inputs,named",
    [
        ({"sinks": torch.zeros(1, 4, 8, 1)}, "sinks"),  # inkling2's per-query sinks: one logit per head and query
        ({"position_bias": torch.zeros(1, 4, 8, 8), "other_bias": torch.zeros(1, 4, 8, 8)}, "other_bias, position_bias"),
        ({"position_bias": torch.zeros(1, 4, 8, 8, dtype=torch.long)}, "position_bias"),  # not a float: no score bias
    ],
)
def test_a_tensor_the_kernel_does_not_take_is_refused(inputs, named):
    q, k, v = _qkv()
    with pytest.raises(SpecError) as err:
        speccat_attention(_Attention(), q, k, v, None, **inputs)
    assert err.value.reason == "unsupported_layer"
    assert f"_Attention: its attention passes the tensor {named}" in str(err.value)

"""speccat's attention takes what its kernel takes: q, k, v and an additive score bias (inkling's
relative position bias, s×t scores per head, which transformers passes to its sdpa and eager
attention: the kernel adds it as SDPA's memory-efficient kernel adds a float mask). Per-query sinks,
which no kernel takes, run as the model's own eager code (the `eager_attention_forward` of the
module's modeling file; here, this file's), or are refused where the module names none. Any other
tensor input it would not read (a second bias) is refused, never dropped: dropped, the layer would
be measured and priced as attention it does not compute."""

from __future__ import annotations

import pytest
import torch

from speccat.census.kernels.attention import speccat_attention
from speccat.census.spec import SpecError


class _Attention(torch.nn.Module):
    is_causal = True


# a module class whose modeling file names no eager attention
_Elsewhere = type("_Attention", (torch.nn.Module,), {"is_causal": True, "__module__": "torch.nn"})
EAGER_CALLS = []


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, sinks=None, **kwargs):
    """This file's eager attention, as a modeling file's: one extra logit per query (the sink) with no value."""
    EAGER_CALLS.append(sinks)
    key, value = key.repeat_interleave(2, dim=1), value.repeat_interleave(2, dim=1)
    scores = (query @ key.transpose(2, 3)) * scaling
    scores = scores.masked_fill(~torch.ones(8, 8, dtype=torch.bool).tril(), float("-inf"))
    probs = torch.softmax(torch.cat([scores, sinks], dim=-1), dim=-1)[..., :-1]
    return (probs @ value).transpose(1, 2), probs


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


def test_per_query_sinks_run_as_the_modules_own_eager_code():
    q, k, v = _qkv()
    sinks = torch.randn(1, 4, 8, 1)
    EAGER_CALLS.clear()
    ours, _ = speccat_attention(_Attention(), q, k, v, None, scaling=0.25, sinks=sinks)
    reference, _ = eager_attention_forward(None, q, k, v, None, 0.25, sinks=sinks)
    assert len(EAGER_CALLS) == 2 and EAGER_CALLS[0] is sinks
    assert torch.equal(ours, reference)
    plain, _ = speccat_attention(_Attention(), q, k, v, None, scaling=0.25)
    assert not torch.allclose(ours, plain)  # the sinks were read, not dropped


def test_per_query_sinks_are_refused_where_the_module_names_no_eager_code():
    q, k, v = _qkv()
    with pytest.raises(SpecError) as err:
        speccat_attention(_Elsewhere(), q, k, v, None, sinks=torch.zeros(1, 4, 8, 1))
    assert err.value.reason == "unsupported_layer"
    assert "_Attention: its attention passes the tensor sinks" in str(err.value)

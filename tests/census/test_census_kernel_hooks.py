"""Kernels found by what they are (docs/census.md, "Kernels found by what they are"): the census
stands in for a kernel function through the hook transformers lists it under (its
`kernel_layer_name`), followed through the functions the layer's forward calls, whatever the
modeling file names it. A torch fallback where a kernel runs in training is refused, never
measured quietly.

Each test renames the causal conv1d of a tiny Qwen3-Next's linear attention: the forward calls
`causal_conv1d_forward` (a kernelizable helper), which calls the conv kernel; the tests replace
that helper with one of their own that calls the conv under another name.
"""

from __future__ import annotations

import pytest
import torch.nn.functional as F
from transformers.integrations.hub_kernels import use_kernel_forward_from_hub, use_kernel_func_from_hub_with_fallback
from transformers.models.qwen3_next import modeling_qwen3_next

from speccat.census import run_census

from speccat.census.structure import predicates
from speccat.census.spec import SpecError

S = 64
TINY_NEXT = {
    "model_type": "qwen3_next", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "intermediate_size": 96, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 4, "full_attention_interval": 4,
    "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "vocab_size": 128,
}  # fmt: skip


def _torch_conv(hidden_states, weight, bias=None, activation=None, **kwargs):
    """A depthwise causal convolution in torch (what a fallback computes)."""
    out = F.conv1d(hidden_states, weight.unsqueeze(1), bias, padding=weight.shape[-1] - 1, groups=hidden_states.shape[1])
    out = out[..., : hidden_states.shape[-1]]
    return F.silu(out) if activation is not None else out


# the conv kernel under a name no modeling file uses, listed under transformers' hook name
renamed_depthwise_kernel = use_kernel_func_from_hub_with_fallback("causal_conv1d_fn", "causal_conv1d")(_torch_conv)
# the same computation with no hook: nothing says it is the kernel
plain_depthwise = _torch_conv


@use_kernel_forward_from_hub("conv_of_a_renamed_layer")
def _conv_through_hooked_kernel(conv1d, hidden_states, cache, layer_idx, activation=None, **kwargs):
    """A kernelizable helper of its own name (as transformers' causal_conv1d_forward is) calling
    the conv kernel under a name of its own."""
    return renamed_depthwise_kernel(hidden_states, conv1d.weight.squeeze(1), conv1d.bias, activation=activation)


@use_kernel_forward_from_hub("conv_of_a_renamed_layer")
def _conv_through_plain_code(conv1d, hidden_states, cache, layer_idx, activation=None, **kwargs):
    return plain_depthwise(hidden_states, conv1d.weight.squeeze(1), conv1d.bias, activation=activation)


@pytest.fixture
def fresh_reach():
    """The census reads each layer class's calls once per process; the tests change a modeling
    module's globals, so the classes are read again before and after."""
    predicates.forget_reached()
    yield
    predicates.forget_reached()


def _linear(spec):
    return next(kind for kind, flavour in spec["flavours"].items() if flavour["attention"] == "linear")


def test_a_renamed_kernel_is_found_by_its_hook(monkeypatch, fresh_reach):
    """The conv kernel called under a new name, through a helper of the test's own, still runs
    through speccat::causal_conv1d: the kind keeps exactly what it keeps with transformers' names."""
    as_shipped = run_census(TINY_NEXT, name="tiny-next", seq_length=S)
    predicates.forget_reached()
    monkeypatch.setattr(modeling_qwen3_next, "causal_conv1d_forward", _conv_through_hooked_kernel)
    renamed = run_census(TINY_NEXT, name="tiny-next", seq_length=S)
    kind = _linear(renamed)
    assert renamed["measured"][kind]["bytes_per_token"] == as_shipped["measured"][kind]["bytes_per_token"]
    # the stand-in was put back: the test module's global is the hooked kernel again
    assert globals()["renamed_depthwise_kernel"] is renamed_depthwise_kernel


def test_a_renamed_kernel_without_a_hook_is_refused_not_measured(monkeypatch, fresh_reach):
    """The conv computed by code nothing names as the kernel: the census does not stand in for
    it, sees a depthwise convolution run in torch inside the linear attention, and refuses with
    kernel_fallback, naming the mixer."""
    monkeypatch.setattr(modeling_qwen3_next, "causal_conv1d_forward", _conv_through_plain_code)
    with pytest.raises(SpecError) as refused:
        run_census(TINY_NEXT, name="tiny-next", seq_length=S)
    assert refused.value.reason == "kernel_fallback"
    assert "linear_attn (Qwen3NextGatedDeltaNet)" in str(refused.value)


def test_the_hook_names_the_kernel_not_the_python_name():
    """transformers 5.25 names Mamba's scan `mamba_selective_scan` in its modeling file; its hook
    says what it is, and that is what the census matches."""
    from transformers.models.mamba import modeling_mamba

    assert predicates.kernel_hook_name(modeling_mamba.mamba_selective_scan) == "selective_scan_fn"
    mixer_calls = {identity for identity, _, _ in predicates.reached(modeling_mamba.MambaMixer)}
    assert {"mamba_inner_fn", "selective_scan_fn", "causal_conv1d_fn"} <= mixer_calls

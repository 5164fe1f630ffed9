"""JetMoE (jetmoe): routed experts whose code reads the router's per-expert counts as numbers
(docs/census.md, "Counts read as values"), in its MoE MLP and in its mixture of attention heads.

- the census's assumed routing (census/measure/expert_counts.py): a `.tolist()` of per-expert counts
  made from a top-k is answered with even loads, nothing else is;
- a tiny JetMoE layer's census bytes against a real CPU forward and backward of the same layer
  whose routers are forced to even loads (so the real counts are the assumed ones), storage by
  storage, each from a hand count; and the same storages at uneven loads (what the layer keeps
  does not depend on how the slots fall among the experts);
- the registry default's kinds, counts and MoE facts read from its config by hand.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import saves_and_grads, tiny_model

from speccat.census import run_census

B, F, L = 2, 4, 8  # bf16, fp32, int64 bytes
H, C, KV, I, E, K, S = 48, 12, 2, 40, 4, 2, 32  # hidden, kv_channels, kv heads, expert width, experts, top-k, tokens
N, Q, HEADS = S * K, C * KV, KV * K  # token slots, one attention expert's width, the kernel's heads
TINY = {
    "model_type": "jetmoe", "hidden_size": H, "kv_channels": C, "num_key_value_heads": KV, "num_attention_heads": HEADS,
    "intermediate_size": I, "num_local_experts": E, "num_experts_per_tok": K, "num_hidden_layers": 2, "vocab_size": 128,
    "max_position_embeddings": 64,
}  # fmt: skip


# -- the assumed routing -------------------------------------------------------------------


def test_even_counts_split_the_slots_with_the_remainder_first():
    from speccat.census.measure.expert_counts import even_counts

    assert even_counts(64, 4) == [16] * 4
    assert even_counts(10, 4) == [3, 3, 2, 2]
    assert sum(even_counts(512, 8)) == 512


def test_counts_made_from_a_top_k_are_read_as_even_loads_on_fake_tensors():
    from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

    from speccat.census.measure.expert_counts import EvenExpertCounts

    fake = FakeTensorMode()
    with fake:
        logits = torch.randn(10, 4)
    with EvenExpertCounts(), fake:
        _, chosen = logits.topk(2, dim=1)
        counts = torch.zeros(10, 4).scatter(1, chosen, 1).long().sum(0)
        assert counts.tolist() == [5, 5, 5, 5]  # 10 tokens × top-2 over 4 experts
        with pytest.raises(DataDependentOutputException):
            counts[:3].tolist()  # not one count per candidate of the top-k: not answered
        with pytest.raises(DataDependentOutputException):
            counts.float().tolist()  # not integer counts
    with EvenExpertCounts():
        assert torch.tensor([1, 2, 3, 4]).tolist() == [1, 2, 3, 4]  # real values are read as they are


def test_the_assumed_routing_runs_only_where_stacked_experts_are():
    """Pushed for layers holding stacked experts (marked by structure), not for others."""
    import contextlib

    from transformers import AutoConfig, AutoModelForCausalLM

    from speccat.census.measure.expert_counts import EvenExpertCounts, assumed_routing
    from speccat.census.structure.predicates import mark_stacked_experts

    with torch.device("meta"):
        jetmoe = AutoModelForCausalLM.from_config(AutoConfig.for_model(**TINY)).model.layers
        llama = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", hidden_size=48, intermediate_size=40, num_hidden_layers=1, num_attention_heads=4, vocab_size=128)).model.layers
    for layer in (*jetmoe, *llama):
        mark_stacked_experts(layer)
    with assumed_routing(jetmoe) as mode:
        assert isinstance(mode, EvenExpertCounts)
    assert isinstance(assumed_routing(llama), contextlib.nullcontext)


# -- a real layer, storage by storage --------------------------------------------------------


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY, name="tiny-jetmoe", seq_length=S).to_dict()


def _forced(chosen: torch.Tensor):
    """A forward hook on a router's projection that makes its top-k pick `chosen` (tokens × k)."""

    def hook(module, args, out):
        return out + torch.zeros_like(out).scatter(1, chosen, 1e4)

    return hook


def _kept(loads: str) -> list[tuple[int, torch.dtype]]:
    """(storage bytes, dtype) of what layer 0 keeps for backward, its routers forced to `loads`:
    `even` (token t to experts t·k … t·k+k−1 mod E: every expert S·K/E slots, the census's
    assumption) or `skewed` (every token to experts 0 … k−1: the others get none). The layer's
    input, output, parameters and rotary tables are left out."""
    from speccat.census.kernels.attention import ATTENTION_IMPL

    model = tiny_model(TINY, torch.bfloat16)
    model.config._attn_implementation = ATTENTION_IMPL
    layer = model.model.layers[0]
    tokens, slot = torch.arange(S)[:, None], torch.arange(K)[None]
    chosen = (tokens * K + slot) % E if loads == "even" else slot.expand(S, K)
    for router in (layer.mlp.router.layer, layer.self_attention.experts.router.layer):
        router.register_forward_hook(_forced(chosen))
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = model.model.rotary_emb(x, torch.arange(S).unsqueeze(0))
    kept, _ = saves_and_grads(model, layer, x, position_embeddings=(cos, sin), attention_mask=None)
    rotary = {cos.untyped_storage()._cdata, sin.untyped_storage()._cdata}
    return sorted(((t.untyped_storage().nbytes(), t.dtype) for key, t in kept.items() if key not in rotary), key=str)


def _router(bf16, f32, i64) -> list[tuple[int, torch.dtype]]:
    """A JetMoE router and its dispatch: the normalised input (its projection's), the top-k's
    softmax (fp32) and indices, the slots sorted by expert and their tokens (int64)."""
    return [(S * H * B, bf16), (S * K * F, f32), (S * K * L, i64), (N * L, i64), (N * L, i64)]


def _expected():
    bf16, f32, i64 = torch.bfloat16, torch.float32, torch.int64
    norms = [(S * H * F, f32), (S * F, f32), (S * H * B, bf16)] * 2  # RMSNorm: fp32 input, rstd, the cast its weight multiplies
    gated = [(N * H * B, bf16), (N * B, bf16), (N * H * B, bf16)]  # the experts' outputs and the gates they are scaled by; the product (index_add keeps it)
    # MoE: the experts' input (the slots' tokens), gate_up's output (silu's input: ffAct), silu's
    # output and the product (output_linear's input)
    moe = [*_router(bf16, f32, i64), (N * H * B, bf16), (N * I * B, bf16), (N * I * B, bf16), *gated]
    act = [(N * 2 * I * B, bf16)]
    # mixture of attention heads: the slots' tokens (input_linear's), the routed q (index_add
    # keeps it), the kernel's output per slot (output_linear's input)
    moa = [*_router(bf16, f32, i64), (N * H * B, bf16), (N * Q * B, bf16), (N * Q * B, bf16), *gated]
    kernel = [(S * HEADS * C * B, bf16)] * 3  # q and k, v repeated to the top-k's heads
    out = [(S * HEADS * C * B, bf16), (HEADS * S * F, f32)]  # the kernel's output and logsumexp
    return {"normOp": norms, "ffMM": moe, "ffAct": act, "attMM": moa, "attBMM": kernel, "softmax": out}


def test_the_census_books_what_a_real_layer_keeps_at_even_loads(spec):
    expected = _expected()
    real = _kept("even")
    assert real == sorted((s for storages in expected.values() for s in storages), key=str)
    booked = spec["measured"][spec["layers"][0]["kind"]]["bytes_per_token"]
    assert sum(booked.values()) * S == sum(n for n, _ in real)
    for op, storages in expected.items():
        assert booked[op] * S == sum(n for n, _ in storages), op


def test_what_the_layer_keeps_does_not_depend_on_the_loads():
    """Every expert's slice of the slots is a view of one storage: uneven loads (two experts get
    every slot, two none) keep the same storages as even ones."""
    assert _kept("skewed") == _kept("even")


def test_the_tiny_layer_states_its_experts(spec):
    kind = spec["layers"][0]["kind"]
    assert spec["layers"] == [{"kind": kind, "count": 2}]
    assert (spec["num_experts"], spec["num_experts_per_tok"], spec["moe_intermediate_size"]) == (E, K, I)
    assert spec["measured"][kind]["experts_impl"] == "stacked" and spec["variants"][kind]["experts_dense"] is False


# -- the registry default --------------------------------------------------------------------


def test_the_registry_default_states_its_kinds_and_counts():
    """JetMoeConfig(): 12 layers alike; hidden 2048; 8 experts of width 5632 (intermediate_size),
    top-2, a gated SiLU (input_linear 2 × 5632 wide); attention of 16 kv heads of 128
    (kv_channels) repeated to the top-2's 32 heads, q and o routed to 8 attention experts."""
    from bench.bench_registry import default_config

    spec = run_census(default_config("jetmoe"), name="jetmoe", seq_length=256).to_dict()
    kind = spec["layers"][0]["kind"]
    assert spec["layers"] == [{"kind": kind, "count": 12}]
    facts = {k: spec[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "vocab_size")}
    assert facts == {"hidden_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 32, "head_dim": 128, "num_experts": 8,
                     "num_experts_per_tok": 2, "moe_intermediate_size": 5632, "vocab_size": 32000}  # fmt: skip
    assert spec["num_key_value_heads"] == 32  # k and v repeated to the 32 heads before the kernel: what it keeps
    assert "intermediate_size" not in spec  # every layer MoE
    assert spec["flavours"][kind] == {"attention": "full", "ffn": "moe"}
    # attMM: q, k, v into the kernel and the routed o projection after it; ffMM: input_linear's
    # two (gate and up) and output_linear's one h × 5632 matrices; one SiLU
    assert {op: spec["ops"][kind][op] for op in ("attMM", "attBMM", "ffMM", "ffAct", "softmax")} == {"attMM": 4, "attBMM": 2, "ffMM": 3, "ffAct": 1, "softmax": 1}
    assert spec["measured"][kind]["experts_impl"] == "stacked" and spec["variants"][kind]["experts_dense"] is False
    # the MoE's 8 experts (2 × 5632 + 5632 wide, 2048 deep) are routed parameters; its router
    # (8 × 2048) and output bias (2048) the block's rest; the attention's experts, router, bias
    # and kv projection are the attention's
    params = spec["params"]["kinds"][kind]
    assert params["ffn_routed"] == 8 * 3 * 5632 * 2048
    assert params["ffn_router"] == 8 * 2048 + 2048
    assert params["attention"] == 8 * 2 * 2048 * 2048 + 8 * 2048 + 2048 + 2048 * 2 * 2048

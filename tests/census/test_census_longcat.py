"""LongCat-Flash (longcat_flash): a layer of two sublayers (two MLA attentions, two dense MLPs)
plus a shortcut MoE whose router chooses among routed and zero (identity) experts (docs/census.md,
"Counts read as values" and "Layers of sublayers"). Since transformers 5.25 its routed experts are
transformers' experts interface (grouped_mm over every slot) and the MoE block handles the zero
experts itself: their gate weights scale the token beside the experts, and their slots go to
routed experts with weight 0 (transformers 5.24 ran the experts as a loop over the experts hit,
zero experts among them).

- the census's assumed routing (census/measure/expert_counts.py), which experts run as such a loop ask
  for: the experts hit (a `nonzero` of a per-candidate mask) and each one's slots (a
  one-argument `where` of its per-slot mask) are answered with even loads over every
  candidate, zero experts included; nothing else is;
- the probe's layer count where the config's counts the sublayers (num_hidden_layers is
  2 × num_layers, the stack's length);
- a tiny layer's census bytes against a real CPU forward and backward of the same layer with its
  router forced to even loads, storage by storage, each from a hand count;
- the registry default's kinds, counts, facts and parameters read from its config by hand.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import priced_vs_measured, saves_and_grads, signature, tiny_model

from speccat.census import run_census

B, F, L = 2, 4, 8  # bf16, fp32, int64 bytes
H, S, NH, QR, KR, NOPE, ROPE, V, M = 32, 16, 2, 16, 8, 8, 4, 8, 24  # hidden, tokens, heads, q and kv lora ranks, head dims, dense MLP width
E, Z, K, I = 4, 2, 3, 16  # routed experts, zero experts, top-k, expert width
C, N = E + Z, S * K  # the router's candidates, the token slots
TINY = {
    "model_type": "longcat_flash", "hidden_size": H, "num_layers": 2, "num_attention_heads": NH, "q_lora_rank": QR,
    "kv_lora_rank": KR, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE, "head_dim": ROPE, "v_head_dim": V,
    "ffn_hidden_size": M, "n_routed_experts": E, "zero_expert_num": Z, "moe_topk": K, "expert_ffn_hidden_size": I,
    "vocab_size": 128, "max_position_embeddings": 64,
}  # fmt: skip


# -- the assumed routing -------------------------------------------------------------------


def test_the_experts_hit_and_their_slots_are_read_as_even_loads_on_fake_tensors():
    from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensorMode

    from speccat.census.measure.expert_counts import EvenExpertCounts

    fake = FakeTensorMode()
    with fake:
        scores = torch.randn(10, 6)
    with EvenExpertCounts(), fake:
        chosen = scores.topk(2, dim=1)[1]  # 20 slots among 6 candidates: 4, 4, 3, 3, 3, 3
        mask = torch.nn.functional.one_hot(chosen, num_classes=6).permute(2, 1, 0)  # (candidates, k, tokens)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        assert tuple(hit.shape) == (6, 1)
        with pytest.raises(DynamicOutputShapeException):
            torch.where(mask[0])  # no expert's index read yet: not answered
        sizes = {}
        for row in hit:
            expert = int(row.item())
            slot, token = torch.where(mask[expert])
            sizes[expert] = (slot.numel(), token.numel())
        assert sizes == {0: (4, 4), 1: (4, 4), 2: (3, 3), 3: (3, 3), 4: (3, 3), 5: (3, 3)}
        with pytest.raises(DynamicOutputShapeException):
            torch.where(mask[5])  # one answer per index read: the last was answered
        with pytest.raises(DynamicOutputShapeException):
            mask.sum(dim=(0, 1)).nonzero()  # one entry per token, not per candidate
        with pytest.raises(DynamicOutputShapeException):
            torch.greater(scores, 0).nonzero()  # not a mask of the top-k's candidates


def test_fewer_slots_than_candidates_hit_the_first_ones():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from speccat.census.measure.expert_counts import EvenExpertCounts

    fake = FakeTensorMode()
    with fake:
        scores = torch.randn(2, 8)
    with EvenExpertCounts(), fake:
        chosen = scores.topk(2, dim=1)[1]  # 4 slots among 8 candidates
        counts = torch.nn.functional.one_hot(chosen, num_classes=8).sum(dim=(0, 1))
        hit = torch.greater(counts, 0).nonzero()
        assert [int(row.item()) for row in hit] == [0, 1, 2, 3]


# -- the layer count -----------------------------------------------------------------------


def test_a_layer_count_derived_as_a_multiple_of_the_stack_is_cut_by_that_multiple():
    """LongcatFlashConfig's num_hidden_layers is a property, 2 × num_layers (the stack's length):
    set to the probed layers' count it would run half of them; the probe sets twice their
    count, and restores the config's own after. A plain count is set as is."""
    from transformers import AutoConfig

    from speccat.census.measure.layer_subset import config_subset

    longcat = AutoConfig.for_model(**TINY)
    assert (longcat.num_hidden_layers, longcat.num_layers) == (4, 2)
    with config_subset(longcat, [1], 2, probed_count=True):
        assert (longcat.num_hidden_layers, longcat.num_layers) == (2, 1)
    assert (longcat.num_hidden_layers, longcat.num_layers) == (4, 2)
    llama = AutoConfig.for_model("llama", num_hidden_layers=4)
    with config_subset(llama, [1], 4, probed_count=True):
        assert llama.num_hidden_layers == 1
    assert llama.num_hidden_layers == 4


# -- a real layer, storage by storage --------------------------------------------------------


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY, name="tiny-longcat", seq_length=S).to_dict()


def _kept(chosen: torch.Tensor) -> list[tuple[tuple[int, ...], torch.dtype, int]]:
    """(shape, dtype, storage bytes) of what layer 0 keeps for backward, its router's top-k
    replaced by `chosen` (tokens × k candidates); the layer's input, output, parameters and rotary
    tables left out."""
    from speccat.census.kernels.attention import ATTENTION_IMPL

    model = tiny_model(TINY, torch.bfloat16)
    model.config._attn_implementation = ATTENTION_IMPL
    layer = model.model.layers[0]
    layer.mlp.router.get_topk_indices = lambda scores: chosen
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = model.model.rotary_emb(x, torch.arange(S).unsqueeze(0))
    kept, _ = saves_and_grads(model, layer, x, position_embeddings=(cos, sin), attention_mask=None)
    rotary = {cos.untyped_storage()._cdata, sin.untyped_storage()._cdata}
    return signature(t for key, t in kept.items() if key not in rotary)


def _even() -> torch.Tensor:
    """Token t to candidates t·k … t·k+k−1 mod C: every candidate, zero experts too, N / C slots."""
    return ((torch.arange(S)[:, None] * K + torch.arange(K)[None]) % C).contiguous()


def _expected():
    bf16, f32, i64 = torch.bfloat16, torch.float32, torch.int64

    def norm(width):  # RMSNorm: the fp32 input, rstd, the bf16 cast its weight multiplies
        return [((1, S, width), f32, S * width * F), ((1, S, 1), f32, S * F), ((1, S, width), bf16, S * width * B)]

    norms = norm(H) * 4 + (norm(QR) + norm(KR)) * 2  # four on the stream; q_a's and kv_a's in each attention
    # each attention: q_a's and kv_a's input (the stream norm's output), q_b's (q_a_layernorm's
    # output), kv_b's (the scaled latent), o_proj's (the kernel's output, heads × v wide); the
    # rotary products keep only the tables (the rotated halves do not need a gradient of them)
    attention = [((S, H), bf16, S * H * B), ((S, QR), bf16, S * QR * B), ((S, KR), bf16, S * KR * B), ((S, NH * V), bf16, S * NH * V * B)] * 2
    kernel = [((1, NH, S, NOPE + ROPE), bf16, S * NH * (NOPE + ROPE) * B)] * 4 + [((1, NH, S, V), bf16, S * NH * (NOPE + V) * B)] * 2  # q, k; v a view of kv_b's output
    out = [((1, S, NH, V), bf16, S * NH * V * B), ((1, NH, S), f32, NH * S * F)] * 2  # the kernel's output and logsumexp
    # the two dense MLPs: input, SiLU's output, up's output, down's input (SiLU's input: ffAct)
    dense = [((S, H), bf16, S * H * B), ((1, S, M), bf16, S * M * B), ((1, S, M), bf16, S * M * B), ((S, M), bf16, S * M * B)] * 2
    dense_act = [((1, S, M), bf16, S * M * B)] * 2
    # the router: its fp32 input, the fp32 copy of its weight (F.linear's), the softmax over every
    # candidate, zero experts included, the top-k's indices
    router = [((S, H), f32, S * H * F), ((H, C), f32, H * C * F), ((S, C), f32, S * C * F), ((S, K), i64, S * K * L)]
    # the zero experts, beside the experts: the bool masks of the two masked_fills (the zero
    # experts' weights kept, the routed ones' kept), and the summed zero-expert weight the
    # token is scaled by (the token itself is the MLPs' input, already kept)
    zero = [((S, K), torch.bool, S * K)] * 2 + [((S, 1), f32, S * F)]
    # the experts interface over every slot, zero experts' too (sent to routed experts with
    # weight 0): the sort's permutation indexing the weights, its token index (perm // k)
    # gathering the tokens and the index the output is summed back with; grouped_mm's int32
    # offsets (one per expert, both matmuls'); the tokens gathered (gate_up's input), SiLU's
    # output, down's input, down's output and the sorted fp32 weights (the weighting product's);
    # gate_up's output, SiLU's input: ffAct
    experts = [((N,), i64, N * L)] * 3 + [((E,), torch.int32, E * 4)]
    experts += [((N, H), bf16, N * H * B), ((N, I), bf16, N * I * B), ((N, I), bf16, N * I * B), ((N, H), bf16, N * H * B), ((N, 1), f32, N * F)]
    moe = router + zero + experts
    moe_act = [((N, I), bf16, N * 2 * I * B)]
    return {
        "normOp": norms, "attMM": attention, "attBMM": kernel, "softmax": out,
        "ffMM": dense + moe, "ffAct": dense_act + moe_act,
    }  # fmt: skip


def test_the_census_books_what_a_real_layer_keeps_at_even_loads(spec):
    expected = _expected()
    assert _kept(_even()) == sorted((s for storages in expected.values() for s in storages), key=str)
    booked = {op: n * S for op, n in spec["measured"][spec["layers"][0]["kind"]]["bytes_per_token"].items() if n}
    assert booked == {op: sum(n for *_, n in storages) for op, storages in expected.items()}


def test_the_bytes_depend_on_neither_the_spread_nor_the_slots_sent_to_zero_experts():
    """Every slot runs through the experts interface, a slot sent to a zero expert too (to a
    routed expert, with weight 0; transformers 5.24's loop gave it no matmul): what the layer
    keeps depends neither on how the slots spread among the experts nor on how many reach a
    zero expert, so the census's even loads are every routing's bytes (docs/census.md)."""

    def total(chosen):
        return sum(n for *_, n in _kept(chosen))

    even = total(_even())
    slot = torch.arange(K)[None].expand(S, K)
    # token t's slots 0 and 1 to routed experts 0 and 1, its slot 2 to zero expert E: the even
    # routing's zero-expert share (a third when K = 3, C = 6), spread otherwise
    assert E * K == 2 * C
    skewed = torch.where(slot < 2, slot, torch.full_like(slot, E)).contiguous()
    assert total(skewed) == even
    assert total(torch.tensor([E, E + 1, 0]).expand(S, K).contiguous()) == even  # two of each token's three slots to the zero experts


def test_the_tiny_layer_states_its_kind(spec):
    kind = spec["layers"][0]["kind"]
    assert spec["layers"] == [{"kind": kind, "count": 2}]
    assert (spec["num_experts"], spec["num_experts_per_tok"], spec["moe_intermediate_size"]) == (E, K, I)
    assert spec["measured"][kind]["experts_impl"] == "grouped_mm"  # transformers' experts interface


# -- the registry default --------------------------------------------------------------------


def test_the_registry_default_states_its_kinds_and_counts():
    """LongcatFlashConfig(): 28 layers alike (num_layers; num_hidden_layers is 56, the attention
    sublayers); hidden 6144; 64 heads, MLA with q_lora_rank 1536, kv_lora_rank 512, nope 128,
    rope 64, v 128; two dense MLPs of 12288; 512 routed experts of 2048 and 256 zero experts,
    top-12."""
    from bench.bench_registry import default_config

    spec = run_census(default_config("longcat_flash"), name="longcat_flash", seq_length=256).to_dict()
    kind = spec["layers"][0]["kind"]
    assert spec["layers"] == [{"kind": kind, "count": 28}]
    facts = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    assert {k: spec[k] for k in facts} == {
        "hidden_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 64, "num_experts": 512, "num_experts_per_tok": 12,
        "moe_intermediate_size": 2048, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    }  # fmt: skip
    assert spec["flavours"][kind] == {"attention": "full", "ffn": "moe"}
    # attMM: q, k, v into each of the two kernels and each attention's o_proj; ffMM: one routed
    # expert's gate, up and down (h × 2048 each); one SiLU an expert; four norms on the stream
    assert {op: spec["ops"][kind][op] for op in ("attMM", "attBMM", "softmax", "ffMM", "ffAct", "normOp")} == {
        "attMM": 8, "attBMM": 4, "softmax": 2, "ffMM": 3, "ffAct": 1, "normOp": 4,
    }  # fmt: skip
    variants = spec["variants"][kind]
    assert variants["router_scores_all"] and variants["router_fp32_input"]  # a softmax over all 768 candidates, of an fp32 input
    assert not variants["experts_dense"] and spec["measured"][kind]["experts_impl"] == "grouped_mm"
    priced, measured = priced_vs_measured(spec, 256)[kind]
    assert abs(priced / measured - 1) > 0.02  # the records price one mixer and one feed-forward: stored unpriced
    h, heads = 6144, 64
    mla = h * 1536 + 1536 * heads * (128 + 64) + h * (512 + 64) + 512 * heads * (128 + 128) + heads * 128 * h
    assert spec["params"]["kinds"][kind] == {
        "attention": 2 * mla,
        "ffn_routed": 512 * 2 * 2048 * h + 512 * h * 2048,  # the experts that compute (5.24's gate_up_proj held the zero experts' slices too)
        "ffn_shared": 0,
        "ffn_router": (512 + 256) * h,
        "ffn_dense": 2 * 3 * h * 12288,
        "norm": 4 * h + 2 * (1536 + 512),
        "other": 0,
    }

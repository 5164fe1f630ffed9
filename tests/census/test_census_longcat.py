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
- its two attentions (`attn_calls_extra`), its kv latents scaled after their norms
  (`latent_up_made`) and its two dense MLPs beside the MoE (`dense_beside_width`,
  `dense_beside_calls`, `dense_beside_kept`, `dense_beside_act_saved`), read off what ran, and the
  records' price of the tiny layer against that hand count, at every point the census measures
  (tensor and context parallel ranks, recompute switches); a layer with one attention calling
  its kernel twice (diffllama's), one with an MLP beside its MoE that is its shared expert
  (granitemoeshared's) and DeepSeek's MLA, its up-projections reading the latent norms' outputs,
  state none of them;
- the registry default's kinds, counts, facts and parameters read from its config by hand.
"""

from __future__ import annotations

import pytest
import torch
from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, saves_and_grads, signature, tiny_model

from speccat.census import run_census

B, F, L = 2, 4, 8  # bf16, fp32, int64 bytes
H, S, NH, QR, KR, NOPE, ROPE, V, M = 32, 16, 4, 16, 8, 8, 4, 8, 24  # hidden, tokens, heads, q and kv lora ranks, head dims, dense MLP width
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


NEW_FACTS = ("attn_calls_extra", "dense_beside_width", "dense_beside_calls", "dense_beside_kept", "dense_beside_act_saved", "latent_up_made")


def test_the_tiny_layer_states_its_two_attentions_and_its_dense_mlps_beside_the_moe(spec):
    """Two MLA attentions (self_attn.0 and .1), one beyond the first, each with kv_b's input its
    kv latent scaled after its norm (KR wide: 2 KR in all); two MLPs of width M beside the MoE
    block (mlps.0 and .1, each fed its own sublayer's norm), each keeping SiLU's output, up's
    output and the product (3 of their width) and SiLU's input (1)."""
    variants = spec["variants"][spec["layers"][0]["kind"]]
    assert {name: variants[name] for name in NEW_FACTS} == {
        "attn_calls_extra": 1, "dense_beside_width": 2 * M, "dense_beside_calls": 2, "dense_beside_kept": 3, "dense_beside_act_saved": 1,
        "latent_up_made": 2 * KR,
    }  # fmt: skip


# What the records leave unpriced of the tiny layer, per token: the router's softmax over the Z
# zero experts' candidates (fp32; the records price the scores num_experts wide), the zero
# experts' two bool masks of K and their summed fp32 weight, and grouped_mm's int32 offsets (one
# per expert, per layer call: over the S tokens).
UNPRICED = F * Z + 2 * K + F + E * 4 / S


def test_the_records_price_the_tiny_layer_as_the_real_run_keeps_it(spec):
    """The hand count of what the real layer keeps (_expected: the census books the same, checked
    above), less what the records leave unpriced (UNPRICED), is the records' price exactly:
    both attentions' inputs, latents, latent norms and output projections, both dense MLPs."""
    kind = spec["layers"][0]["kind"]
    kept = sum(n for storages in _expected().values() for *_, n in storages) / S
    priced, measured = priced_vs_measured(spec, S)[kind]
    assert measured == kept
    assert priced == pytest.approx(kept - UNPRICED)
    assert abs(priced / measured - 1) <= 0.02


def test_the_tiny_layer_is_priced_at_every_point_the_census_measures():
    """At half the sequence, a context-parallel rank, a tensor-parallel rank of 2 (heads, the dense
    MLPs' and the experts' widths halved) and every recompute switch: the records' price short of
    what the census measured by no more than what they leave unpriced (UNPRICED, its offsets
    over the fewest tokens a point runs: half S), within the tolerance. Where the latent norms
    are recomputed (attUp) kv_b's input stays, each attention's kv latent scaled after its norm
    (k_pass * mla_scale_kv_lora, transformers/models/longcat_flash/modeling_longcat_flash.py:396),
    2 KR bf16 a token, 2% of the tiny layer: latent_up_made prices it so."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.points import measured_per_token, price_points
    from speccat.catalogue.records.settings import load_settings

    records = load_records()
    spec = run_census(TINY, name="tiny-longcat", seq_length=S, across=True).to_dict()
    measured = measured_per_token(spec)
    rows = [r for r in price_points(spec, records, load_settings()) if (r["kind"], r["point"]) in measured]
    assert {"census", "seq 8", "cp 2", "tp 2", "recompute attUp", "recompute all"} <= {r["point"] for r in rows}
    for row in rows:
        got = measured[row["kind"], row["point"]]
        assert got - (UNPRICED + E * 4 / S) - 1e-9 <= row["priced_per_token"] <= got, row["point"]
        assert abs(row["priced_per_token"] / got - 1) <= records.tolerance, row["point"]


@pytest.mark.parametrize(
    ("model_type", "tiny"),
    [
        ("diffllama", dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_hidden_layers=2, vocab_size=256)),
        ("granitemoeshared", dict(hidden_size=64, intermediate_size=32, shared_intermediate_size=48, num_local_experts=4, num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=128)),
        ("deepseek_v3", dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, n_shared_experts=1, first_k_dense_replace=1, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, head_dim=8, v_head_dim=8, vocab_size=128)),
    ],
    ids=["two-kernel-calls-one-attention", "shared-mlp-beside-the-moe", "mla-up-projections-read-the-norms"],
)
def test_one_attention_and_a_shared_mlp_beside_the_moe_state_none(model_type, tiny):
    """diffllama calls its kernel twice in one attention module: one attention, no more.
    granitemoeshared's shared_mlp, an MLP beside the MoE block reading the MoE's input, is its
    shared expert, no dense MLP beside it. DeepSeek's MLA up-projections read their latent
    norms' outputs as the norms made them."""
    spec = run_census(default(model_type, **tiny), name=f"tiny-{model_type}", seq_length=64).to_dict()
    for kind, variants in spec["variants"].items():
        assert {name: variants[name] for name in NEW_FACTS} == dict.fromkeys(NEW_FACTS, 0), kind


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
    # two MLA sublayers; two dense MLPs of ffn_hidden_size 12288 beside the MoE, each keeping
    # SiLU's output, up's output and the product, and SiLU's input
    assert {name: variants[name] for name in NEW_FACTS} == {
        "attn_calls_extra": 1, "dense_beside_width": 2 * 12288, "dense_beside_calls": 2, "dense_beside_kept": 3, "dense_beside_act_saved": 1,
        "latent_up_made": 2 * 512,  # each attention's kv latent (kv_lora_rank) scaled after its norm
    }  # fmt: skip
    priced, measured = priced_vs_measured(spec, 256)[kind]
    # unpriced, per token: the router's fp32 softmax over its 256 zero experts' candidates, the
    # zero experts' two bool masks of 12 and their fp32 summed weight, grouped_mm's 512 int32
    # offsets over the 256 tokens
    assert measured - priced == pytest.approx(4 * 256 + 2 * 12 + 4 + 512 * 4 / 256)
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

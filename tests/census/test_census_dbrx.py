"""databricks/dbrx-instruct: a flat config whose language model is built from sub-configs of its
own (attn_config, ffn_config). The census builds it from them (census/intake/config.py keeps a flat
config's own `*_config` mappings and drops only other modalities', other models', storage and
other tools' ones), so transformers builds the model the config states.

Its experts are stacked experts flattened into rows (docs/census.md, "How a config becomes a
spec"): DbrxExpertGLU holds w1, v1 and w2 as 2-D weights of (16 experts x 10752 rows, 6144), beside
a router of 16 outputs, and DbrxExperts loops over the experts hit (`nonzero` of a one-hot of the
top-k with 17 classes, each expert's slots by `where`, its index read by indexing), which the
census answers with its assumed even loads ("Counts read as values"). Its attention and norms
sit in one block named like a norm (DbrxNormAttentionNorm), which is no norm: it holds the
attention. The records price it (variants qkv_kept: clip_qkv's clamp keeps Wqkv's output;
experts_loop; router_jitter: moe_jitter_eps 0 still multiplies the router's input in training).

Before, both sub-configs were dropped as if they were another modality's, the model was built
from DbrxAttentionConfig's defaults, which state no rope_theta, and the census refused the
config as `bad_value`; then it refused the experts as `unsupported_layer` (neither the experts
interface nor stacked experts).
"""

from __future__ import annotations

import copy

import pytest
from conftest import load_shipped
from support.layer_runs import priced_vs_measured, saves_and_grads, tiny_model

from speccat.census import config_hash, language_config

REPO = "databricks/dbrx-instruct"


@pytest.fixture(scope="module")
def config() -> dict:
    return load_shipped(REPO)


@pytest.fixture(scope="module")
def built(config):
    from speccat.census.build.model import build
    from speccat.census.intake.resolve import resolve_config

    top, text, nested = resolve_config(config)
    assert not nested and text is top
    return top, build(top, text)


def test_the_language_config_keeps_the_models_own_sub_configs(config):
    language = language_config(config)
    assert language["attn_config"] == config["attn_config"]
    assert language["ffn_config"] == config["ffn_config"]


def test_the_sub_configs_are_in_the_config_hash(config):
    wider = copy.deepcopy(config)
    wider["ffn_config"]["ffn_hidden_size"] = 2 * config["ffn_config"]["ffn_hidden_size"]
    assert config_hash(wider) != config_hash(config)
    more_kv = copy.deepcopy(config)
    more_kv["attn_config"]["kv_n_heads"] = 16
    assert config_hash(more_kv) != config_hash(config)


@pytest.mark.parametrize(
    "key, value",
    [
        ("vision_config", {"hidden_size": 1}),  # another modality
        ("quantization_config", {"quant_method": "fp8"}),  # how the weights are stored
        ("transformers.js_config", {"dtype": "q4"}),  # another tool's settings
        ("depth_decoder_config", {"model_type": "moshi_depth", "hidden_size": 1}),  # a model of its own
    ],
)
def test_other_parts_stay_out_of_the_language_config_and_the_hash(config, key, value):
    other = {**copy.deepcopy(config), key: value}
    assert key not in language_config(other)
    assert config_hash(other) == config_hash(config)


def test_transformers_gets_the_stated_sub_configs(built, config):
    top, _ = built
    attn, ffn = config["attn_config"], config["ffn_config"]
    assert (top.attn_config.kv_n_heads, top.attn_config.clip_qkv, top.attn_config.rope_theta) == (attn["kv_n_heads"], attn["clip_qkv"], attn["rope_theta"])
    assert (top.ffn_config.ffn_hidden_size, top.ffn_config.moe_num_experts, top.ffn_config.moe_top_k) == (
        ffn["ffn_hidden_size"],
        ffn["moe_num_experts"],
        ffn["moe_top_k"],
    )


def test_the_built_model_has_the_configs_dims(built, config):
    _, model = built
    d, heads, kv = config["d_model"], config["n_heads"], config["attn_config"]["kv_n_heads"]
    experts, width = config["ffn_config"]["moe_num_experts"], config["ffn_config"]["ffn_hidden_size"]
    head_dim = d // heads  # 128
    assert len(model.layers) == config["n_layers"] == 40
    layer = model.layers[0]
    attn = layer.norm_attn_norm.attn
    assert tuple(attn.Wqkv.weight.shape) == ((heads + 2 * kv) * head_dim, d) == (8192, 6144)
    assert tuple(attn.out_proj.weight.shape) == (d, d)
    ffn = layer.ffn
    assert tuple(ffn.router.layer.weight.shape) == (experts, d) == (16, 6144)
    for weight in (ffn.experts.mlp.w1, ffn.experts.mlp.v1, ffn.experts.mlp.w2):
        assert tuple(weight.shape) == (experts * width, d) == (16 * 10752, 6144)
    assert tuple(model.embedding.weight.shape) == (config["vocab_size"], d)


@pytest.fixture(scope="module")
def spec(config):
    from speccat.census import run_census

    return run_census(config, name=REPO).to_dict()


def test_the_experts_are_stacked_experts_flattened_into_rows(built, config):
    """w1, v1, w2 of (16 x 10752, 6144) beside a router of 16 outputs: 16 experts of 10752."""
    from speccat.census.structure.predicates import expert_count, expert_width, is_stacked_experts, mark_stacked_experts, stacked_shapes

    _, model = built
    layer = model.layers[0]
    experts, width, d = config["ffn_config"]["moe_num_experts"], config["ffn_config"]["ffn_hidden_size"], config["d_model"]
    assert mark_stacked_experts(layer) == {"ffn.experts.mlp": experts}
    glu = layer.ffn.experts.mlp
    assert is_stacked_experts(glu) and not is_stacked_experts(layer.ffn.router.layer)
    assert stacked_shapes(glu) == [(experts, width, d)] * 3
    assert (expert_count(glu), expert_width(glu, d)) == (16, 10752)


def test_flattened_rows_need_a_router_that_divides_them():
    """Told by structure: 2-D weights of a non-projection module whose rows a router's outputs
    divide; a projection whose rows happen to be a multiple is no expert, nor are weights no
    router beside them divides."""
    import torch
    from torch import nn

    from speccat.census.structure.predicates import is_stacked_experts, mark_stacked_experts

    class Glu(nn.Module):
        def __init__(self, rows: int):
            super().__init__()
            self.w1 = nn.Parameter(torch.empty(rows, 8))
            self.w2 = nn.Parameter(torch.empty(rows, 8))

    def block(rows: int, router: int) -> nn.Module:
        ffn = nn.Module()
        ffn.router = nn.Linear(8, router, bias=False)
        ffn.glu = Glu(rows)
        ffn.dense = nn.Linear(8, 12, bias=False)  # rows a multiple of 4 too: a projection
        layer = nn.Module()
        layer.ffn = ffn
        return layer

    layer = block(4 * 6, 4)
    assert mark_stacked_experts(layer) == {"ffn.glu": 4}
    assert not is_stacked_experts(layer.ffn.dense)
    assert mark_stacked_experts(block(4 * 6 + 1, 4)) == {}  # 25 rows: no whole number an expert
    assert mark_stacked_experts(block(4, 4)) == {}  # one row an expert: not a width


def test_the_census_states_the_configs_expert_facts(spec, config):
    ffn = config["ffn_config"]
    kind = spec["layers"][0]["kind"]
    assert spec["layers"] == [{"kind": kind, "count": config["n_layers"]}]
    assert (spec["num_experts"], spec["num_experts_per_tok"], spec["moe_intermediate_size"]) == (ffn["moe_num_experts"], ffn["moe_top_k"], ffn["ffn_hidden_size"]) == (16, 4, 10752)
    assert spec["flavours"][kind] == {"attention": "full", "ffn": "moe"}
    assert spec["measured"][kind]["experts_impl"] == "stacked"
    d, heads, kv, width, experts = config["d_model"], config["n_heads"], config["attn_config"]["kv_n_heads"], ffn["ffn_hidden_size"], ffn["moe_num_experts"]
    head_dim = d // heads
    assert spec["params"]["kinds"][kind] == {
        "attention": (heads + 2 * kv) * head_dim * d + d * d,  # Wqkv, out_proj
        "ffn_routed": 3 * experts * width * d,  # w1, v1, w2
        "ffn_shared": 0, "ffn_router": experts * d, "ffn_dense": 0,
        "norm": 2 * d,  # norm_1, norm_2 (LayerNorms without bias), not the block named like a norm
        "other": 0,
    }  # fmt: skip
    assert {op: spec["ops"][kind][op] for op in ("attMM", "ffMM", "ffAct", "normOp")} == {"attMM": 4, "ffMM": 3, "ffAct": 1, "normOp": 2}
    variants = spec["variants"][kind]
    assert variants["experts_loop"] and variants["router_jitter"] and variants["qkv_kept"] == 1 and not variants["experts_dense"]


def test_the_routed_bytes_worked_by_hand(spec, config):
    """Per token, at the census's even loads, from the config's dims (bf16: 2 bytes, int64 8)."""
    B, L = 2, 8
    h, f, k, e = config["d_model"], config["ffn_config"]["ffn_hidden_size"], config["ffn_config"]["moe_top_k"], config["ffn_config"]["moe_num_experts"]
    kind = spec["layers"][0]["kind"]
    booked = spec["measured"][kind]["bytes_per_token"]
    # each of the k slots: its gathered input, the weighted output index_add sums back and the
    # down output (h each); gate's output (SiLU's input: ffAct), SiLU's output, up's output,
    # their product (f each); its routing weight; its two indices (top-k position, token)
    slot = B * (3 * h + 4 * f) + B + 2 * L
    # the router: its input (the second norm's output), the jitter's random factor (h each),
    # the bf16 softmax over the 16 experts, the top-k's indices, the chosen weights and their norm
    router = B * 2 * h + B * e + L * k + B * k + B
    assert booked["ffAct"] == k * B * f == 86016
    assert booked["ffMM"] + booked["ffAct"] == k * slot + router == 516242


def test_the_records_price_it_within_tolerance(spec):
    from speccat.catalogue.records import points
    from speccat.flows.analysis import pricing_inputs

    records, grid, _, ends = pricing_inputs()
    rows = points.price_points(spec, records, grid) + points.price_ends(spec, records, grid, ends)
    _, _, worst = points.worst_ratio(spec, rows)  # the bytes at every point and the backward peak
    assert abs(worst - 1) <= records.tolerance
    points.check_prices(spec, rows, records)
    kind = spec["layers"][0]["kind"]
    priced, measured = priced_vs_measured(spec, spec["measured"][kind]["seq_length"])[kind]
    assert abs(priced / measured - 1) < 0.001


# -- a tiny layer, storage by storage ------------------------------------------------------------

H, S, NH, KV, E, K, I = 64, 16, 4, 2, 4, 2, 48  # hidden, tokens, heads, kv heads, experts, top-k, expert width
DH, N = H // NH, S * K // E  # head width; each expert's slots at even loads
TINY = {
    "model_type": "dbrx", "d_model": H, "n_heads": NH, "n_layers": 2, "vocab_size": 128, "max_seq_len": 64,
    "attn_config": {"kv_n_heads": KV, "clip_qkv": 8.0, "rope_theta": 10000.0},
    "ffn_config": {"ffn_hidden_size": I, "moe_num_experts": E, "moe_top_k": K, "moe_jitter_eps": 0, "ffn_act_fn": {"name": "silu"}},
}  # fmt: skip


def _expected(stat_bytes: int) -> dict[str, list[tuple]]:
    """(dtype, storage bytes) of what a tiny layer keeps, by the op the census books it to; the
    LayerNorms' mean and rstd `stat_bytes` an element (bf16 on CPU, fp32 as the census books them)."""
    import torch

    bf16, f32, i64 = torch.bfloat16, torch.float32, torch.int64
    qkv = (NH + 2 * KV) * DH
    return {
        # Wqkv's input (norm_1's output) and its output, which the clamp keeps
        "attMM": [(bf16, S * H * 2), (bf16, S * qkv * 2)],
        # the kernel: rotated q and k, v a view of the clamp's output (its whole storage)
        "attBMM": [(bf16, S * NH * DH * 2), (bf16, S * KV * DH * 2), (bf16, S * qkv * 2)],
        "softmax": [(bf16, S * NH * DH * 2), (f32, NH * S * 4)],  # the kernel's output, logsumexp
        # norm_2's input (the residual sum); mean and rstd of both norms
        "normOp": [(bf16, S * H * 2)] + [(bf16 if stat_bytes == 2 else f32, S * stat_bytes)] * 4,
        # the router: its input, the jitter's factor, the softmax, top-k's indices, the chosen
        # weights and their norm; each expert's slots: gathered input, SiLU's output, up's output,
        # the product, down's output, the weighted output index_add keeps, the weights, indices
        "ffMM": [(bf16, S * H * 2)] * 2 + [(bf16, S * E * 2), (i64, S * K * 8), (bf16, S * K * 2), (bf16, S * 2)]
        + [(bf16, N * H * 2), (bf16, N * I * 2), (bf16, N * I * 2), (bf16, N * I * 2), (bf16, N * H * 2), (bf16, N * H * 2), (bf16, N * 2), (i64, 2 * N * 8)] * E,
        "ffAct": [(bf16, N * I * 2)] * E,  # gate's output, SiLU's input
    }  # fmt: skip


def _real_kept() -> list[tuple]:
    """(dtype, storage bytes) of what layer 0 of the tiny model keeps in a real CPU bf16 forward
    and backward, its router's top-k sent evenly (token t to experts t·k … t·k+k−1 mod E); its
    input, output, parameters and rotary tables left out."""
    import torch

    from speccat.census.kernels.attention import ATTENTION_IMPL, register

    register()
    model = tiny_model(TINY, torch.bfloat16)
    model.config._attn_implementation = ATTENTION_IMPL
    layer = model.transformer.blocks[0]
    route = layer.ffn.route_tokens_to_experts
    even = ((torch.arange(S)[:, None] * K + torch.arange(K)[None]) % E).contiguous()
    layer.ffn.route_tokens_to_experts = lambda logits: (route(logits)[0], even)
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = model.transformer.rotary_emb(x, torch.arange(S).unsqueeze(0))
    kept, _ = saves_and_grads(model, layer, x, position_embeddings=(cos, sin), attention_mask=None)
    rotary = {cos.untyped_storage()._cdata, sin.untyped_storage()._cdata}
    return sorted(((t.dtype, t.untyped_storage().nbytes()) for key, t in kept.items() if key not in rotary), key=str)


def test_every_point_the_night_measures_is_priced(config):
    """The night censuses across settings: a second length, a cp rank, each recompute switch and
    all of them. The first norm runs inside the attention block's child (norm_attn_norm.norm_1),
    yet it is a norm on the hidden stream: Wqkv's input is its output, no MLA latent norm's
    (the part attUp, which recomputing MLA's up-projections drops and the records price at 0
    here). Read as a latent norm's, `recompute all` measured 5% below the price."""
    from speccat.catalogue.records import points
    from speccat.census import run_census
    from speccat.flows.analysis import pricing_inputs

    records, grid, _, ends = pricing_inputs()
    spec = run_census(config, name=REPO, seq_length=512, across=True)
    assert {p["point"] for p in spec["measured_at"]} >= {"recompute all", "recompute normOp", "cp 2"}
    rows = points.price_points(spec, records, grid) + points.price_ends(spec, records, grid, ends)
    points.check_prices(spec, rows, records)
    everything = next(row for row in rows if row["point"] == "recompute all")
    measured = points.measured_per_token(spec)[(everything["kind"], "recompute all")]
    assert everything["priced_per_token"] / measured == pytest.approx(1, abs=0.001)


def test_a_tiny_layer_keeps_what_the_census_books():
    """The real layer keeps the hand-worked storages; the census books the same per op, plus the
    layer's input (norm_1 keeps it; the real run leaves the input out) and the norms' statistics
    at their CUDA width (fp32; CPU keeps them in bf16). Its expert facts are the config's."""
    from speccat.census import run_census

    real = _expected(2)
    assert _real_kept() == sorted((s for storages in real.values() for s in storages), key=str)
    spec = run_census(TINY, name="tiny-dbrx", seq_length=S).to_dict()
    kind = spec["layers"][0]["kind"]
    assert (spec["num_experts"], spec["num_experts_per_tok"], spec["moe_intermediate_size"]) == (E, K, I)
    booked = {op: n * S for op, n in spec["measured"][kind]["bytes_per_token"].items() if n}
    expected = {op: sum(n for _, n in storages) for op, storages in _expected(4).items()}
    expected["normOp"] += S * H * 2  # the layer's input, which norm_1 keeps
    assert booked == expected
    priced, measured = priced_vs_measured(spec, S)[kind]
    assert abs(priced / measured - 1) < 0.01  # the router's softmax and renorm are bf16 here, fp32 in the records


def test_mpts_attn_config_reaches_transformers_too():
    """The same for any flat config: mpt's attention switches live in its attn_config."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from speccat.census.intake.resolve import resolve_config

    mpt = CONFIG_MAPPING["mpt"]().to_dict()
    mpt.update(model_type="mpt", d_model=256, n_heads=4, n_layers=2, vocab_size=1000, max_seq_len=512)
    mpt["attn_config"] = {**mpt["attn_config"], "qk_ln": True, "clip_qkv": 6.0, "alibi": False}
    top, _, _ = resolve_config(mpt)
    assert (top.attn_config.qk_ln, top.attn_config.clip_qkv, top.attn_config.alibi) == (True, 6.0, False)

"""Every shipped config censuses to a valid ModelSpec whose facts a reader can check against the config.

The table states, per shipped config, what its config.json says (or what follows from it, with the
derivation in a comment): the kinds and their layer counts in stack order, the widths, the MoE,
MLA and linear-attention dimensions and the flags. A field the table leaves out of a row must be
absent from the spec ("absent is not zero").
"""

from __future__ import annotations

import json
from itertools import groupby

import pytest

from conftest import load_shipped, repo_id_of, shipped_config_paths
from speccat.catalogue.vocabulary import CACHED, OPS, OTHER
from speccat.census.structure.family import family_for
from speccat.census.spec import FLAGS, ModelSpec

SHIPPED = [repo_id_of(p) for p in shipped_config_paths()]

# The dimension fields the table checks in every row (present with the row's value, or absent).
CHECKED = (
    "hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "num_shared_experts", "first_k_dense_replace", "kv_lora_rank",
    "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "linear_num_key_heads",
    "linear_key_head_dim", "linear_num_value_heads", "linear_value_head_dim", "linear_conv_kernel_dim",
    "sliding_window",
)  # fmt: skip


def windowed(layers: int, full_every: int, ff: str) -> list[tuple[str, int]]:
    """The layer runs of a stack whose every `full_every`-th layer attends to every earlier token
    and the others over a sliding window: kinds `sliding_{ff}` and `full_{ff}`."""
    runs: list[tuple[str, int]] = []
    for i in range(layers):
        kind = f"full_{ff}" if (i + 1) % full_every == 0 else f"sliding_{ff}"
        runs[-1:] = [(kind, runs[-1][1] + 1)] if runs and runs[-1][0] == kind else [*runs[-1:], (kind, 1)]
    return runs


def dense(layers, h, vocab, heads, kv, head_dim, width, flags=(), **more):
    """One dense decoder kind: `layers` groups, all sizes as the config states them."""
    return dict(
        layers=layers, hidden_size=h, vocab_size=vocab, num_attention_heads=heads, num_key_value_heads=kv,
        head_dim=head_dim, intermediate_size=width, flags=set(flags), **more,
    )  # fmt: skip


def moe(layers, h, vocab, heads, kv, head_dim, experts, top_k, width, flags=(), intermediate_size=None, **more):
    """MoE layers; intermediate_size only where dense layers exist (a config's may be an unused default)."""
    row = dense(layers, h, vocab, heads, kv, head_dim, intermediate_size, flags, **more)
    row.update(num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=width)
    return row


def hybrid(n, interval):
    """Qwen hybrids: every `interval`-th layer full attention, the others linear (full_attention_interval)."""
    return [("linear_attention", interval - 1), ("full_attention", 1)] * (n // interval)


def groups_of(layer_types):
    """Run-length groups of a config's own layer_types list."""
    return [(kind, len(list(run))) for kind, run in groupby(layer_types)]


LINEAR_QWEN = dict(  # linear_num_key_heads 16, key dim 128, value heads 32, value dim 128, conv kernel 4 (all stated)
    linear_num_key_heads=16, linear_key_head_dim=128, linear_num_value_heads=32, linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
)  # fmt: skip
# DeepSeek MLA: attention heads see K/V expanded per head from the latent, so kv heads = heads; the
# q/k head is qk_nope_head_dim + qk_rope_head_dim = 128 + 64 = 192 wide and the value head 128.
MLA = dict(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
DEEPSEEK_V3 = moe(
    [("dense", 3), ("moe", 58)], 7168, 129280, 128, 128, 192, 256, 8, 2048,
    intermediate_size=18432, q_lora_rank=1536, first_k_dense_replace=3,
    shared_expert_intermediate_size=2048, num_shared_experts=1,  # n_shared_experts 1 × moe_intermediate_size 2048
    **MLA,
)  # fmt: skip

TABLE = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": dense([("decoder", 30)], 576, 49152, 9, 3, 64, 1536, {"tie_word_embeddings"}),  # head 576/9
    "Qwen/Qwen1.5-MoE-A2.7B-Chat": moe(
        [("decoder", 24)], 2048, 151936, 16, 16, 128, 60, 4, 1408, {"qkv_bias", "shared_expert_gate"},
        # one wide gated shared expert of 5632 = 4 routed widths of 1408
        shared_expert_intermediate_size=5632, num_shared_experts=4,
    ),
    # Qwen2 puts biases on q, k, v; use_sliding_window is false, so no window is used.
    "Qwen/Qwen2-7B-Instruct": dense([("decoder", 28)], 3584, 152064, 28, 4, 128, 18944, {"qkv_bias"}),
    "Qwen/Qwen2.5-7B-Instruct": dense([("decoder", 28)], 3584, 152064, 28, 4, 128, 18944, {"qkv_bias"}),
    "Qwen/Qwen2.5-VL-7B-Instruct": dense([("decoder", 28)], 3584, 152064, 28, 4, 128, 18944, {"qkv_bias"}),  # flat
    "Qwen/Qwen3-0.6B": dense([("decoder", 28)], 1024, 151936, 16, 8, 128, 3072, {"qk_norm", "tie_word_embeddings"}),
    "Qwen/Qwen3-235B-A22B": moe([("decoder", 94)], 4096, 151936, 64, 4, 128, 128, 8, 1536, {"qk_norm"}),
    "Qwen/Qwen3-30B-A3B": moe([("decoder", 48)], 2048, 151936, 32, 4, 128, 128, 8, 768, {"qk_norm"}),
    "Qwen/Qwen3-32B": dense([("decoder", 64)], 5120, 151936, 64, 8, 128, 25600, {"qk_norm"}),
    "Qwen/Qwen3-8B": dense([("decoder", 36)], 4096, 151936, 32, 8, 128, 12288, {"qk_norm"}),
    "Qwen/Qwen3-Next-80B-A3B-Thinking": moe(
        hybrid(48, 4), 2048, 151936, 16, 2, 256, 512, 10, 512, {"qk_norm", "attn_output_gate", "shared_expert_gate"},
        shared_expert_intermediate_size=512, num_shared_experts=1, **LINEAR_QWEN,
    ),
    "Qwen/Qwen3-VL-4B-Instruct": dense([("decoder", 36)], 2560, 151936, 32, 8, 128, 9728, {"qk_norm", "tie_word_embeddings"}),  # nested
    "Qwen/Qwen3.5-35B-A3B": moe(
        hybrid(40, 4), 2048, 248320, 16, 2, 256, 256, 8, 512, {"qk_norm", "attn_output_gate", "shared_expert_gate"},
        shared_expert_intermediate_size=512, num_shared_experts=1, **LINEAR_QWEN,
    ),
    "Qwen/Qwen3.5-9B": dense(
        groups_of(load_shipped("Qwen/Qwen3.5-9B")["text_config"]["layer_types"]),
        4096, 248320, 16, 4, 256, 12288, {"qk_norm", "attn_output_gate"}, **LINEAR_QWEN,
    ),
    # use_bias: biases on every projection and LayerNorm; tie_word_embeddings unstated, the class ties.
    "bigcode/starcoder2-7b": dense(
        [("decoder", 32)], 4608, 49152, 36, 4, 128, 18432,
        {"qkv_bias", "o_bias", "mlp_bias", "norm_bias", "layer_norms", "tie_word_embeddings"}, sliding_window=4096,
    ),  # fmt: skip
    "deepseek-ai/DeepSeek-V3": DEEPSEEK_V3,
    "deepseek-ai/DeepSeek-R1": DEEPSEEK_V3,
    "deepseek-ai/DeepSeek-V3.2": DEEPSEEK_V3,
    "deepseek-ai/DeepSeek-V2-Lite": moe(
        [("dense", 1), ("moe", 26)], 2048, 102400, 16, 16, 192, 64, 6, 1408,
        intermediate_size=10944, first_k_dense_replace=1,  # q_lora_rank is null: no query latent
        shared_expert_intermediate_size=2816, num_shared_experts=2,  # n_shared_experts 2 × 1408
        **MLA,
    ),  # fmt: skip
    # Gemma ties its embeddings (the class default; the configs do not say otherwise).
    "google/gemma-2-2b-it": dense(windowed(26, 2, "dense"), 2304, 256000, 8, 4, 256, 9216, {"tie_word_embeddings", "sdpa_refused"}, sliding_window=4096),
    "google/gemma-2b": dense([("decoder", 18)], 2048, 256000, 8, 1, 256, 16384, {"tie_word_embeddings"}),
    "google/gemma-3-1b-it": dense(
        windowed(26, 6, "dense"), 1152, 262144, 4, 1, 256, 6912, {"qk_norm", "tie_word_embeddings"}, sliding_window=512
    ),
    # A sparse text_config: vocab_size is unstated, so the class default 262208 applies.
    "google/gemma-3-27b-it": dense(
        windowed(62, 6, "dense"), 5376, 262208, 32, 16, 128, 21504, {"qk_norm", "tie_word_embeddings"}, sliding_window=1024
    ),
    "meta-llama/Llama-2-7b-chat-hf": dense([("decoder", 32)], 4096, 32000, 32, 32, 128, 11008),
    "meta-llama/Llama-3.1-70B-Instruct": dense([("decoder", 80)], 8192, 128256, 64, 8, 128, 28672),
    "meta-llama/Llama-3.1-8B-Instruct": dense([("decoder", 32)], 4096, 128256, 32, 8, 128, 14336),
    "meta-llama/Llama-3.2-1B-Instruct": dense([("decoder", 16)], 2048, 128256, 32, 8, 64, 8192, {"tie_word_embeddings"}),
    "meta-llama/Meta-Llama-3.1-405B": dense([("decoder", 126)], 16384, 128256, 128, 8, 128, 53248),
    "microsoft/phi-4": dense([("decoder", 40)], 5120, 100352, 40, 10, 128, 17920),  # fused qkv_proj and gate_up_proj
    "mistralai/Mistral-7B-v0.3": dense([("decoder", 32)], 4096, 32768, 32, 8, 128, 14336),
    "mistralai/Mixtral-8x22B-v0.1": moe([("decoder", 56)], 6144, 32000, 48, 8, 128, 8, 2, 16384),
    "mistralai/Mixtral-8x7B-v0.1": moe([("decoder", 32)], 4096, 32000, 32, 8, 128, 8, 2, 14336),
    # attention_bias true (q, k, v and o), biased experts, alternating sliding (128) and full layers
    # built alike, kinds apart by their window.
    "openai/gpt-oss-120b": moe(
        windowed(36, 2, "moe"), 2880, 201088, 64, 8, 64, 128, 4, 2880, {"qkv_bias", "o_bias", "mlp_bias", "sdpa_refused"}, sliding_window=128
    ),
    "openai/gpt-oss-20b": moe(
        windowed(24, 2, "moe"), 2880, 201088, 64, 8, 64, 32, 4, 2880, {"qkv_bias", "o_bias", "mlp_bias", "sdpa_refused"}, sliding_window=128
    ),
}


# The 34 configs shipped first; the 16 shipped with issue 12 are tests/census/test_census_hub_more.py's.
REPOS = sorted(TABLE)


@pytest.fixture(scope="module")
def specs() -> dict[str, ModelSpec]:
    from support.shipped_specs import shipped_spec  # each shipped config censused once per test process

    return {repo: shipped_spec(repo) for repo in REPOS}


def test_the_table_covers_every_shipped_config():
    from support.hub_more import OWN_TESTS, REFUSED, TABLE as MORE

    more = set(REFUSED) | set(MORE) | set(OWN_TESTS) | {"openai-community/gpt2", "zai-org/GLM-4.5", "moonshotai/Kimi-K2.5"}
    assert len(REPOS) == 34 and len(more) == 16
    assert sorted(set(REPOS) | more) == sorted(SHIPPED)


@pytest.mark.parametrize("repo", REPOS)
def test_shipped_config_facts(specs, repo):
    spec, row = specs[repo], dict(TABLE[repo])
    assert [(g["kind"], g["count"]) for g in spec["layers"]] == row.pop("layers")
    assert spec["num_hidden_layers"] == sum(g["count"] for g in spec["layers"])
    flags = row.pop("flags")
    assert {flag for flag in FLAGS if spec.get(flag)} == flags
    for field in CHECKED:
        if field == "num_hidden_layers":
            continue
        assert spec.get(field) == row.get(field), field


@pytest.mark.parametrize("repo", REPOS)
def test_shipped_spec_is_valid_and_round_trips(specs, repo):
    spec = specs[repo]
    assert ModelSpec.from_json(spec.to_json()) == spec
    assert spec["name"] == repo and spec["arch"] == load_shipped(repo)["model_type"]
    assert set(spec["ops"]) == set(spec["flavours"]) == set(spec["measured"]) == set(spec["params"]["kinds"]) == set(spec.kinds)


@pytest.mark.parametrize("repo", REPOS)
def test_counted_ops_equal_the_family_profile(specs, repo):
    """The profiles are the families' declared expectations; the census's own counts must agree.
    A profile states a kind per flavour: kinds of one flavour told apart by their attention's
    window (gemma-3's sliding_dense and full_dense) are each the profile's kind of that flavour."""
    spec = specs[repo]
    family = family_for(spec["arch"])
    for kind in spec.kinds:
        flavour = spec["flavours"][kind]
        profiled = family.kinds[kind if kind in family.kinds else family.kind_for(flavour["attention"], flavour["ffn"])]
        assert spec["ops"][kind] == dict(profiled.ops), kind
        assert profiled.accepts(flavour["attention"], flavour["ffn"])


def _ops(*counts):
    return dict(zip(OPS, counts))


STANDARD = _ops(4, 2, 3, 1, 0, 2, 4, 1, 1, 0)


def test_named_op_counts(specs):
    assert specs["meta-llama/Llama-3.1-8B-Instruct"]["ops"] == {"decoder": STANDARD}
    # The router's softmax is not a score softmax: one softmax, from the attention kernel.
    assert specs["mistralai/Mixtral-8x7B-v0.1"]["ops"]["decoder"]["softmax"] == 1
    for repo in ("Qwen/Qwen3-Next-80B-A3B-Thinking", "Qwen/Qwen3.5-9B"):
        ops = specs[repo]["ops"]
        assert ops["linear_attention"] == _ops(4, 0, 3, 0, 0, 2, 4, 0, 1, 1)
        assert ops["full_attention"] == STANDARD
    # Fused qkv_proj and gate_up_proj still count three attention inputs + output, and three h×w matmuls.
    assert specs["microsoft/phi-4"]["ops"]["decoder"]["attMM"] == 4
    assert specs["microsoft/phi-4"]["ops"]["decoder"]["ffMM"] == 3
    # A plain two-projection MLP (c_fc, c_proj) and two residual dropouts (residual_dropout 0.1).
    assert specs["bigcode/starcoder2-7b"]["ops"]["decoder"]["ffMM"] == 2
    assert specs["bigcode/starcoder2-7b"]["ops"]["decoder"]["dropout"] == 2
    # Sandwich norms: four per layer; the QK-norm is the qk_norm flag, not a normOp.
    assert specs["google/gemma-3-27b-it"]["ops"]["sliding_dense"]["normOp"] == 4
    assert specs["google/gemma-3-27b-it"]["qk_norm"] is True


def test_sliding_and_full_layers_built_alike_are_kinds_apart(specs):
    # gpt-oss-20b alternates sliding and full attention layers (its layer_types), built alike:
    # kinds apart, each layer's kind its layer type's, since transformers hands sdpa a mask for the
    # sliding ones (docs/census.md, "Which sdpa kernel runs on CUDA"); the same for gemma-3.
    for repo, window, ff in (("openai/gpt-oss-20b", 128, "moe"), ("google/gemma-3-1b-it", 512, "dense")):
        config = load_shipped(repo)
        layer_types = config.get("layer_types") or [
            "full_attention" if (i + 1) % config["sliding_window_pattern"] == 0 else "sliding_attention"
            for i in range(config["num_hidden_layers"])
        ]  # gemma-3-1b states the pattern: every 6th layer full
        kinds = [run["kind"] for run in specs[repo]["layers"] for _ in range(run["count"])]
        assert kinds == [f"{t.removesuffix('_attention')}_{ff}" for t in layer_types]
        assert specs[repo]["sliding_window"] == window
        assert specs[repo]["variants"][f"sliding_{ff}"]["attention_window"] == window
        assert specs[repo]["variants"][f"full_{ff}"]["attention_window"] == 0


def test_no_shipped_norm_keeps_fp32_rows_the_records_do_not_count(specs):
    # every shipped norm is a fused kernel or an RMS norm whose fp32 rows its upcast and scale
    # facts account for (cohere's LayerNorm written as torch ops is the registry's: 2)
    assert {(repo, kind) for repo, spec in specs.items() for kind, v in spec["variants"].items() if v["norm_fp32_extra"]} == set()


def test_parameters_add_up_to_the_published_count(specs):
    spec = specs["meta-llama/Llama-3.1-8B-Instruct"]
    h, kv_width, width, vocab, layers = 4096, 8 * 128, 14336, 128256, 32
    per_layer = {
        "attention": 2 * h * h + 2 * h * kv_width,  # q, o: h×h; k, v: h×(8 kv heads × 128)
        "ffn_dense": 3 * h * width,
        "norm": 2 * h,
    }
    params = spec["params"]
    assert {k: v for k, v in params["kinds"]["decoder"].items() if v} == per_layer
    assert (params["embedding"], params["output"], params["final_norm"]) == (vocab * h, vocab * h, h)
    total = params["embedding"] + params["output"] + params["final_norm"] + layers * sum(per_layer.values())
    assert total == 8_030_261_248  # Llama-3.1-8B's published parameter count


def test_tied_embeddings_have_no_separate_output_parameters(specs):
    params = specs["meta-llama/Llama-3.2-1B-Instruct"]["params"]
    assert params["output"] == 0 and params["embedding"] == 128256 * 2048


def test_moe_parameters_are_split_by_part(specs):
    kinds = specs["deepseek-ai/DeepSeek-V3"]["params"]["kinds"]
    h, experts, width, shared = 7168, 256, 2048, 2048
    assert kinds["moe"]["ffn_routed"] == experts * 3 * h * width
    assert kinds["moe"]["ffn_shared"] == 3 * h * shared
    assert kinds["moe"]["ffn_router"] == experts * h  # the router's weight (its score-correction bias is a buffer)
    assert kinds["moe"]["ffn_dense"] == 0 and kinds["dense"]["ffn_dense"] == 3 * h * 18432


@pytest.mark.parametrize("repo", REPOS)
def test_measured_column(specs, repo):
    spec = specs[repo]
    for kind in spec.kinds:
        measured = spec["measured"][kind]
        per_op = measured["bytes_per_token"]
        assert set(per_op) == set(OPS) | {OTHER, CACHED}
        assert per_op[CACHED] == 0  # the selective-checkpoint cache's op: only switch-set points fill it
        assert measured["seq_length"] == 4096
        flavour = spec["flavours"][kind]
        assert ("experts_impl" in measured) == (flavour["ffn"] == "moe")
        if flavour["attention"] == "full":
            assert measured["attention_impl"] == "speccat::flash_attention"
            # The kernel's own outputs: its output (bf16, heads x the value width) and one fp32
            # statistic per head.
            value_width = spec.get("v_head_dim") or spec.get("head_dim") or spec["hidden_size"] // spec["num_attention_heads"]
            assert per_op["softmax"] == spec["num_attention_heads"] * (2 * value_width + 4)
            assert per_op["linrec"] == 0
        else:
            assert measured["attention_impl"] == "speccat::chunk_gated_delta_rule"
            assert per_op["attBMM"] == per_op["softmax"] == 0 and per_op["linrec"] > 0
        assert per_op["attMM"] > 0 and per_op["ffMM"] > 0 and per_op["normOp"] > 0 and per_op["ffAct"] > 0
        assert per_op["gather"] == per_op["headCast"] == 0  # nothing is kept for them on one device
        assert (per_op["dropout"] > 0) == (spec["ops"][kind]["dropout"] > 0)


def test_flash_kernel_bytes_follow_the_heads(specs):
    # Llama-3.1-8B: the kernel's inputs, q (32 heads) of width 128, k and v of 8 kv heads, bf16;
    # its outputs, the output (32 heads) and an fp32 log-sum-exp per head.
    per_op = specs["meta-llama/Llama-3.1-8B-Instruct"]["measured"]["decoder"]["bytes_per_token"]
    assert per_op["attBMM"] == 2 * (32 * 128 + 8 * 128 + 8 * 128)
    assert per_op["softmax"] == 2 * 32 * 128 + 4 * 32


def test_spec_json_is_stable(specs):
    spec = specs["Qwen/Qwen3-Next-80B-A3B-Thinking"]
    assert json.loads(spec.to_json()) == spec.to_dict()


@pytest.mark.parametrize("repo_id", ["Qwen/Qwen3-VL-4B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct"])
def test_a_broken_vision_config_changes_neither_hash_nor_census(repo_id):
    """The census builds from what config_hash covers: a copy of a popular config whose
    vision_config cannot be built shares the original's hash, so it must get the same spec
    rather than a refusal that would stand for the original."""
    from speccat.census import config_hash, run_census

    original = load_shipped(repo_id)
    poisoned = json.loads(json.dumps(original))
    poisoned["vision_config"] = dict(poisoned.get("vision_config") or {}, depth="many", hidden_size=-3)
    assert config_hash(poisoned) == config_hash(original)
    assert run_census(poisoned, name=repo_id) == run_census(original, name=repo_id)

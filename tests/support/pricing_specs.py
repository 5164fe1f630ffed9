"""Hand-built ModelSpec mappings of shipped configs, for the pricing tests.

Each builder reads its dims from the shipped config.json (tests/conftest.py `load_shipped`)
and states the layer stack, flavours and op counts the way the census does, so pricing can be
tested on its own with values traceable to the file. tests/pricing/test_pricing_specs.py checks the builders.
"""

from __future__ import annotations

from conftest import load_shipped

from speccat.catalogue.vocabulary import VARIANTS
from speccat.census.structure.family import family_for
from speccat.census.spec import FLAGS

DENSE = {"attention": "full", "ffn": "dense"}
MOE = {"attention": "full", "ffn": "moe"}


def _variants(*stated: str, **counts: int) -> dict:
    """A kind's variant facts as the census states them: the named ones true, those in `counts`
    their count, the rest false/0 (a layer called once keeps one cycle: recurrent_cycles 1)."""
    return {name: name in stated for name in VARIANTS} | {"index_topk": 0, "act_saved": 1, "recurrent_cycles": 1} | counts


def _ops(model_type: str, kind: str) -> dict:
    return dict(family_for(model_type).kinds[kind].ops)


def _base(repo_id: str, c: dict, **extra) -> dict:
    spec = {
        "name": repo_id,
        "arch": c["model_type"],
        "hidden_size": c["hidden_size"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_attention_heads": c["num_attention_heads"],
        "vocab_size": c["vocab_size"],
        **{flag: False for flag in FLAGS},  # the census states every flag; the builder sets the true ones
    }
    spec.update(extra)
    return spec


def llama_8b() -> dict:
    """Llama-3.1-8B: one dense decoder kind; no head_dim in the config (dh = h/a)."""
    repo = "meta-llama/Llama-3.1-8B-Instruct"
    c = load_shipped(repo)
    spec = _base(
        repo, c,
        num_key_value_heads=c["num_key_value_heads"], intermediate_size=c["intermediate_size"],
        layers=[{"kind": "decoder", "count": c["num_hidden_layers"]}],
        ops={"decoder": _ops("llama", "decoder")}, flavours={"decoder": DENSE},
        variants={"decoder": _variants("norm_upcast")},
    )  # fmt: skip
    return spec


def qwen3_30b_a3b() -> dict:
    """Qwen3-30B-A3B: every layer MoE (128 experts, top 8, no shared expert), QK-norm."""
    repo = "Qwen/Qwen3-30B-A3B"
    c = load_shipped(repo)
    spec = _base(
        repo, c,
        num_key_value_heads=c["num_key_value_heads"], head_dim=c["head_dim"],
        intermediate_size=c["intermediate_size"], moe_intermediate_size=c["moe_intermediate_size"],
        num_experts=c["num_experts"], num_experts_per_tok=c["num_experts_per_tok"], qk_norm=True,
        layers=[{"kind": "decoder", "count": c["num_hidden_layers"]}],
        ops={"decoder": _ops("qwen3_moe", "decoder")}, flavours={"decoder": MOE},
        variants={"decoder": _variants("norm_upcast", "router_scores_all", "router_renorm", "qk_norm_per_head")},
    )  # fmt: skip
    return spec


def qwen15_moe() -> dict:
    """Qwen1.5-MoE-A2.7B: 60 experts, top 4, a shared expert of 4 routed widths."""
    repo = "Qwen/Qwen1.5-MoE-A2.7B-Chat"
    c = load_shipped(repo)
    spec = _base(
        repo, c,
        num_key_value_heads=c["num_key_value_heads"], intermediate_size=c["intermediate_size"],
        moe_intermediate_size=c["moe_intermediate_size"],
        shared_expert_intermediate_size=c["shared_expert_intermediate_size"],
        num_experts=c["num_experts"], num_experts_per_tok=c["num_experts_per_tok"],
        qkv_bias=True, shared_expert_gate=True,
        layers=[{"kind": "decoder", "count": c["num_hidden_layers"]}],
        ops={"decoder": _ops("qwen2_moe", "decoder")}, flavours={"decoder": MOE},
        variants={"decoder": _variants("norm_upcast", "router_scores_all", shared_kept=3, shared_act_saved=1)},
    )  # fmt: skip
    return spec


def deepseek_v2_lite() -> dict:
    """DeepSeek-V2-Lite: MLA without a q latent (q_lora_rank null); first layer dense."""
    repo = "deepseek-ai/DeepSeek-V2-Lite"
    c = load_shipped(repo)
    assert c["q_lora_rank"] is None
    dense = c["first_k_dense_replace"]
    spec = _base(
        repo, c,
        num_key_value_heads=c["num_key_value_heads"], intermediate_size=c["intermediate_size"],
        moe_intermediate_size=c["moe_intermediate_size"], num_experts=c["n_routed_experts"],
        num_experts_per_tok=c["num_experts_per_tok"], num_shared_experts=c["n_shared_experts"],
        first_k_dense_replace=dense, kv_lora_rank=c["kv_lora_rank"],
        qk_rope_head_dim=c["qk_rope_head_dim"], qk_nope_head_dim=c["qk_nope_head_dim"],
        head_dim=c["qk_nope_head_dim"] + c["qk_rope_head_dim"],  # q and k's width, as the census states it
        v_head_dim=c["v_head_dim"],
        layers=[{"kind": "dense", "count": dense}, {"kind": "moe", "count": c["num_hidden_layers"] - dense}],
        ops={"dense": _ops("deepseek_v2", "dense"), "moe": _ops("deepseek_v2", "moe")},
        flavours={"dense": DENSE, "moe": MOE},
        variants={
            "dense": _variants("norm_upcast", "q_heads_major"),
            "moe": _variants("norm_upcast", "q_heads_major", "router_fp32_input", "router_scores_all", "routing_weights_fp32", shared_kept=3, shared_act_saved=1),
        },
    )  # fmt: skip
    return spec


def qwen35_9b() -> dict:
    """Qwen3.5-9B's text model: gated-delta-rule linear layers between full attention layers."""
    repo = "Qwen/Qwen3.5-9B"
    c = load_shipped(repo)["text_config"]
    layers: list[dict] = []
    for kind in c["layer_types"]:
        if layers and layers[-1]["kind"] == kind:
            layers[-1]["count"] += 1
        else:
            layers.append({"kind": kind, "count": 1})
    spec = _base(
        repo, c,
        num_key_value_heads=c["num_key_value_heads"], head_dim=c["head_dim"],
        intermediate_size=c["intermediate_size"],
        **{k: c[k] for k in ("linear_num_key_heads", "linear_key_head_dim", "linear_num_value_heads",
                             "linear_value_head_dim", "linear_conv_kernel_dim")},
        qk_norm=True, attn_output_gate=True, layers=layers,
        ops={k: _ops("qwen3_5_text", k) for k in ("linear_attention", "full_attention")},
        flavours={"linear_attention": {"attention": "linear", "ffn": "dense"}, "full_attention": DENSE},
        variants={
            "linear_attention": _variants("norm_upcast", "norm_scale_fp32", "gated_norm", gated_norm_fp32=3),
            # the output gate: q_proj's second half, a sigmoid per head channel whose output is kept
            "full_attention": _variants("norm_upcast", "norm_scale_fp32", "q_heads_major", "qk_norm_per_head")
            | {"attn_gate_width": c["head_dim"], "attn_gate_kept": c["head_dim"]},
        },
    )  # fmt: skip
    return spec


BUILDERS = (llama_8b, qwen3_30b_a3b, qwen15_moe, deepseek_v2_lite, qwen35_9b)


# GPT-3 175B's layer shape as a gpt_neox config (Korthikanti et al.'s Table 2 model).
GPT3_175B_SHAPE = {
    "model_type": "gpt_neox", "hidden_size": 12288, "num_attention_heads": 96, "intermediate_size": 4 * 12288,
    "num_hidden_layers": 1, "hidden_act": "gelu", "rotary_pct": 1.0, "attention_dropout": 0.1,
    "hidden_dropout": 0.1, "use_parallel_residual": False, "vocab_size": 50432, "max_position_embeddings": 2048,
    "torch_dtype": "float16",
}  # fmt: skip

"""The spec's model-wide dimensions and flags from the views of its probed layers (docs/census.md,
"Dimensions and flags"): the main sizes, the MoE's, the linear attention's, the scans', RWKV's,
the RG-LRU's and the short conv's; the attention dims, model-wide and per layer where a layer's
differ; the sliding window; the flags.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from speccat.census.build.model import Built
from speccat.census.describe.layer_roles import has_bias
from speccat.census.describe.layer_view import LayerView
from speccat.census.spec import SpecError
from speccat.census.structure.predicates import expert_count, is_layer_norm
from speccat.census.structure.shapes import Shape


def _sliding_window(views: list[LayerView], layers: nn.ModuleList) -> int | None:
    windows = [k.window for v in views for k in v.attention_kernels() if k.window > 0]
    for layer in layers:
        for module in layer.modules():
            value = module.__dict__.get("sliding_window")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                windows.append(value)
    return max(windows) if windows else None


def _view_dims(view: LayerView) -> dict[str, int] | None:
    """One layer's attention dims (catalogue/vocabulary.yaml `kind_dims`) from its kernel calls and
    MLA projections; None for a layer that ran no attention kernel (a linear-attention layer)."""
    calls = view.attention_kernels()
    if not calls:
        return None
    first = calls[0]
    for call in calls[1:]:
        if (call["q"][1:2] + call["q"][3:], call["k"][1:2] + call["k"][3:], call["v"][3:]) != (first["q"][1:2] + first["q"][3:], first["k"][1:2] + first["k"][3:], first["v"][3:]):
            raise SpecError(
                "unsupported_layer",
                f"layer {view.index}: its attention calls differ in shape (q {first['q']} vs {call['q']}); one kind cannot state both",
            )
    dims = {"num_attention_heads": first["q"][1], "num_key_value_heads": first["k"][1], "head_dim": first["q"][3]}
    if first["v"][3] != first["q"][3]:
        dims["v_head_dim"] = first["v"][3]
    mla = view.mla()
    if mla:
        dims.update(mla)
        dims["qk_nope_head_dim"] = dims["head_dim"] - mla["qk_rope_head_dim"]
        dims.setdefault("v_head_dim", dims["head_dim"])
    return dims


def attention_dims(views: list[LayerView]) -> tuple[dict[str, int], dict[int, dict[str, int]]]:
    """(the model-wide attention dims: the first attention layer's, {probed layer index: its dims}
    for each layer whose attention differs in shape from them)."""
    dims = {v.index: d for v in views if (d := _view_dims(v)) is not None}
    if not dims:
        delta = next((k for v in views for k in v.delta_kernels()), None)
        # a stack of Mamba mixers has no heads: it states one (docs/census.md, "State-space mixers")
        return {"num_attention_heads": delta["v"][2] if delta is not None else 1}, {}
    model_wide = next(iter(dims.values()))
    return model_wide, {index: d for index, d in dims.items() if d != model_wide}


def model_facts(built: Built, views: list[LayerView], stack: list[tuple[int, Shape]]) -> dict[str, Any]:
    """The spec's dimensions and flags (everything but the structure); the attention dims are the
    first attention layer's (attention_dims gives the layers that differ)."""
    embedding = built.embedding.weight
    facts: dict[str, Any] = {
        "hidden_size": views[0].hidden,  # the layers' width (an embedding may be narrower and projected)
        "num_hidden_layers": len(built.layers),
        "vocab_size": int(embedding.shape[0]),
    }
    model_wide, _ = attention_dims(views)
    facts.update(model_wide)
    max_positions = getattr(built.config, "max_position_embeddings", None)
    if isinstance(max_positions, int) and max_positions > 0:
        facts["max_position_embeddings"] = max_positions
    dense = next((v for v in views if v.experts_path is None and v.shape.ffn != "none"), None)
    if dense is not None and dense.dense_width():
        facts["intermediate_size"] = dense.dense_width()
    moe = next((v for v in views if v.experts_path), None)
    if moe is not None:
        experts = moe.experts
        facts["num_experts"] = expert_count(experts)
        facts["moe_intermediate_size"] = moe.expert_width()
        top_k = moe.top_k()
        if not top_k:
            raise SpecError("unsupported_layer", f"layer {moe.index}: its experts were called with no index of the experts each token goes to, and its router chose none by top-k")
        facts["num_experts_per_tok"] = top_k
        shared = moe.shared_widths()
        if shared:
            total = sum(shared)
            facts["shared_expert_intermediate_size"] = total
            width = facts["moe_intermediate_size"]
            facts["num_shared_experts"] = total // width if total % width == 0 else len(shared)
        leading = next((i for i, shape in stack if shape.ffn == "moe"), 0)
        if leading and all(shape.ffn == "moe" for i, shape in stack if i >= leading):
            facts["first_k_dense_replace"] = leading
    linear = next((v for v in views if v.delta_kernels()), None)
    if linear is not None:
        delta = linear.delta_kernels()[0]
        facts["linear_num_key_heads"], facts["linear_key_head_dim"] = delta["k"][2], delta["k"][3]
        facts["linear_num_value_heads"], facts["linear_value_head_dim"] = delta["v"][2], delta["v"][3]
        conv = linear.conv_kernel()
        if conv:
            facts["linear_conv_kernel_dim"] = conv
    mamba = next((v for v in views if v.scan_kernels()), None)
    if mamba is not None:
        scan = mamba.scan_kernels()[0]
        heads = mamba.scan_heads()
        facts["ssm_inner_size"], facts["ssm_state_size"] = scan["A"][0] * max(heads, 1), scan["A"][1]
        if heads > 1:  # one scan per Mamba head, each over the head's share of the inner width
            facts["ssm_num_heads"] = heads
        facts["ssm_dt_rank"] = mamba.scan_dt_rank(scan)
        conv = mamba.conv_kernel()
        if conv:
            facts["ssm_conv_kernel"] = conv
    rwkv = next((v for v in views if v.wkv_kernels()), None)
    if rwkv is not None:
        facts["wkv_size"] = rwkv.wkv_kernels()[0]["key"][-1]
    lru = next((v for v in views if v.rglru_kernels()), None)
    if lru is not None:  # the RG-LRU's width (its recurrence's channels) and its block's depthwise conv width
        facts["lru_width"] = lru.rglru_kernels()[0]["x"][-1]
        conv = lru.conv_kernel()
        if conv:
            facts["lru_conv_kernel"] = conv
    eager = next((v for v in views if v.linear_eager_kernels()), None)
    if eager is not None:  # q of its first block (b, heads, block, head dim), or of every chunk (b, heads, chunks, block, head dim): the block is min(its size, s)
        q = eager.linear_eager_kernels()[0]["q"]
        facts["linear_eager_heads"], facts["linear_eager_block"], facts["linear_eager_head_dim"] = q[1], q[-2], q[-1]
    short = next((v for v in views if v.conv_kernels()), None)
    if short is not None:
        facts["short_conv_kernel"] = short.conv_kernels()[0]["weight"][-1]
    mamba2 = next((v for v in views if v.ssd_kernels()), None)
    if mamba2 is not None:
        ssd = mamba2.ssd_kernels()[0]
        facts["ssm_num_heads"], facts["ssm_head_dim"] = ssd["heads"]
        facts["ssm_n_groups"], facts["ssm_state_size"] = ssd["groups"]
        facts["ssm_inner_size"] = ssd["heads"][0] * ssd["heads"][1]
        conv = mamba2.conv_kernel()
        if conv:
            facts["ssm_conv_kernel"] = conv
    window = _sliding_window(views, built.layers)
    if window:
        facts["sliding_window"] = window
    full = [v for v in views if v.attention_kernels()]
    norms = [m for v in views for m in v.layer_norm_modules()]
    facts.update(
        qkv_bias=any(v.qkv_bias() for v in views),
        o_bias=any(v.o_bias() for v in views),
        mlp_bias=any(v.mlp_bias() for v in views),
        norm_bias=any(has_bias(m) for m in norms),
        qk_norm=any(v.qk_norm() for v in full if v.shape.mixer != "cross"),  # a cross kind's QK-norm: its qk_norm_per_head
        attn_output_gate=any(v.output_gate().width for v in full),
        shared_expert_gate=any(v.shared_gate() for v in views),
        tie_word_embeddings=built.tied,
        layer_norms=any(is_layer_norm(m) for m in norms),
        # transformers' own word on whether the model's attention may run through torch's sdpa
        sdpa_refused=not type(built.model)._supports_sdpa,
    )
    return facts

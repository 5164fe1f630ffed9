"""zaya's layer code the records price by facts of their own (census/describe/stream_router_qk.py):

- its residual scalings, (x + b)·s + (r + b')·s' after the attention and after the MoE block,
  modules of per-channel parameters only (census/measure/stream_code.py): booked after the child
  that ran before each, not to `other` (stream_code_attn_bytes, stream_code_ff_bytes);
- its CCA projection's depthwise and grouped Conv1d over q and k, run in torch, each keeping its
  input (attention_conv_bytes);
- its router, an MLP of its own: down to router_hidden_size, an RMS norm, fc1 and fc2 each with a
  GELU, out_proj to the scores (router_mlp_width, _layers, _acts, _norms);
- its QK-norm, an L2 norm to sqrt(head_dim) in bf16 with a learned scale per key head
  (qk_norm_half_stats, qk_norm_key_rows).

Each fact is checked against a real CPU forward and backward of the module that keeps it, the
default config's bytes are worked by hand from its dims, and the price against the census.
"""

from __future__ import annotations

import pytest
import torch
from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, saves_and_grads, tiny_model

from speccat.census import run_census

BF16, FP32, I64 = 2, 4, 8
SEQ = 64
TINY = dict(
    hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32, moe_intermediate_size=256, num_experts=4,
    router_hidden_size=32, num_hidden_layers=2, layer_types=["hybrid"] * 2, vocab_size=256,
)
FACTS = (
    "stream_code_attn_bytes", "stream_code_ff_bytes", "router_mlp_width", "router_mlp_layers", "router_mlp_acts", "router_mlp_norms",
    "qk_norm_half_stats", "qk_norm_key_rows", "attention_conv_bytes",
)



def facts(spec, kind: str) -> dict[str, int]:
    return {name: int(spec["variants"][kind][name]) for name in FACTS}


@pytest.fixture(scope="module")
def zaya():
    return run_census(default("zaya"), name="zaya", seq_length=256).to_dict()


@pytest.fixture(scope="module")
def tiny():
    config = default("zaya", **TINY)
    return config, run_census(config, name="tiny-zaya", seq_length=SEQ).to_dict()


def test_zaya_default_worked_by_hand(zaya):
    """ZAYA1's defaults: h 2048, 8 query heads and 2 key-value heads of 128, experts 2048 wide
    (top-1 of 16 and a skip expert), a router MLP 256 wide; per token at 256 tokens, bf16."""
    h, a, kv, dh, r, s = 2048, 8, 2, 128, 256, 256
    conv = (a + kv) * dh  # q and k side by side, the channels both convolutions run over
    for kind in ("full_moe", "full_moe_2"):  # layer 0, and the layers whose router adds the previous one's state
        assert facts(zaya, kind) == dict(
            stream_code_attn_bytes=BF16 + FP32, stream_code_ff_bytes=BF16 + FP32, router_mlp_width=r, router_mlp_layers=3,
            router_mlp_acts=2, router_mlp_norms=1, qk_norm_half_stats=3, qk_norm_key_rows=1, attention_conv_bytes=2 * conv * BF16,
        )
        measured = zaya["measured"][kind]["bytes_per_token"]
        assert measured["other"] == 0
        # the projections' input; the depthwise conv's input padded by its 2 columns, the grouped
        # conv's by 1; v_proj_delayed's one zero row a sequence; o_proj's copy of the kernel's
        # heads-major output; the residual scaling after the attention: its branch + bias (bf16)
        # and its residual + bias (the residual stream is fp32)
        assert measured["attMM"] == BF16 * h + BF16 * conv * (2 * s + 3) / s + BF16 * h / s + BF16 * a * dh + (BF16 + FP32) * h
        # two stream RMS norms and the router's (fp32 input, fp32 rstd, bf16 normalised input);
        # the QK-norm: q and k, 3 statistics per head, and the normalised keys the key scale keeps
        rms = (FP32 + BF16) * h + FP32
        assert measured["normOp"] == 2 * rms + (FP32 + BF16) * r + FP32 + BF16 * ((a + kv) * (dh + 3) + kv * dh)
        # the experts' gate_up output (their SiLU's input) and the router MLP's two GELUs' inputs
        assert measured["ffAct"] == BF16 * 2 * 2048 + 2 * BF16 * r
        priced, total = priced_vs_measured(zaya, s)[kind]
        assert priced == pytest.approx(total, rel=2e-3)


def test_each_fact_is_what_a_real_module_keeps(tiny):
    """A tiny zaya built with real bf16 weights on CPU: each module run forward and backward alone,
    what autograd saved (its parameters and the inputs it was given aside, unless the facts count
    them) equals what the facts say, per token."""
    config, spec = tiny
    kind = "full_moe"
    stated = facts(spec, kind)
    h, a, kv, dh, r = (config[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "router_hidden_size"))
    model = tiny_model(config, torch.bfloat16)
    layer = model.model.layers[0]
    torch.manual_seed(1)

    def leaf(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, dtype=dtype, requires_grad=True)

    def kept_bytes(module, *args, keep_inputs=False):
        """Bytes module(*args) saves, its parameters and (unless `keep_inputs`) its inputs aside."""
        saved = {}

        def pack(t):
            saved.setdefault(t.untyped_storage()._cdata, t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = module(*args)
        outs = out if isinstance(out, tuple) else (out,)
        sum(o.float().sum() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad).backward()
        aside = {t.untyped_storage()._cdata for t in module.parameters()} | {t.untyped_storage()._cdata for t in outs if isinstance(t, torch.Tensor)}
        if not keep_inputs:
            aside |= {t.untyped_storage()._cdata for t in args if isinstance(t, torch.Tensor)}
        return sum(t.untyped_storage().nbytes() for k, t in saved.items() if k not in aside)

    # the residual scaling: its branch (bf16) and the fp32 residual, each plus its bias
    assert kept_bytes(layer.post_attention_residual_scale, leaf(1, SEQ, h), leaf(1, SEQ, h, dtype=torch.float32)) == stated["stream_code_attn_bytes"] * h * SEQ
    assert kept_bytes(layer.post_mlp_residual_scale, leaf(1, SEQ, h), leaf(1, SEQ, h, dtype=torch.float32)) == stated["stream_code_ff_bytes"] * h * SEQ
    # the CCA projection: the two convolutions' inputs (padded by 2 and 1 columns) and
    # v_proj_delayed's zero row; the q, k and v projections' input is the one it was given
    conv = (a + kv) * dh
    assert stated["attention_conv_bytes"] == 2 * conv * BF16
    assert kept_bytes(layer.self_attn.qkv_proj, leaf(1, SEQ, h), None) == BF16 * conv * (2 * SEQ + 3) + BF16 * h
    # the QK-norm keeps q and k themselves, its statistics per head, and the normalised keys
    qk = kept_bytes(layer.self_attn.qk_norm, leaf(1, SEQ, a, dh), leaf(1, SEQ, kv, dh), keep_inputs=True)
    assert qk == BF16 * ((a + kv) * (dh + stated["qk_norm_half_stats"]) + stated["qk_norm_key_rows"] * kv * dh) * SEQ
    # the router (layer 0: no earlier router state): its MLP's norm (fp32 input, rstd, bf16
    # normalised input), its projections' inputs at its width and its GELUs' inputs; then the
    # softmax's output over the experts and the skip expert, the top-1 index and the skip mask
    assert (stated["router_mlp_width"], stated["router_mlp_layers"], stated["router_mlp_acts"], stated["router_mlp_norms"]) == (r, 3, 2, 1)
    router_mlp = stated["router_mlp_norms"] * ((FP32 + BF16) * r + FP32) + BF16 * r * (stated["router_mlp_layers"] + stated["router_mlp_acts"])
    scores = BF16 * (config["num_experts"] + 1) + I64 + 1
    assert kept_bytes(layer.mlp.gate, leaf(1, SEQ, h)) == (router_mlp + scores) * SEQ


def test_tiny_zaya_is_priced_at_every_point(tiny):
    """Across settings (a second length, cp 2, tp 2, each recompute switch and all): within 1% of
    what the census measured (the convolutions' padding and the zero row are a few columns a
    sequence, which the records leave out)."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.points import measured_per_token, price_points
    from speccat.catalogue.records.settings import load_settings

    config, _ = tiny
    spec = run_census(config, name="tiny-zaya", seq_length=SEQ, across=True).to_dict()
    rows = price_points(spec, load_records(), load_settings())
    measured = measured_per_token(spec)
    points = [row for row in rows if (row["kind"], row["point"]) in measured]
    assert {"census", "cp 2", "tp 2", "recompute normOp", "recompute all"} <= {row["point"] for row in points}
    for row in points:
        assert row["priced_per_token"] == pytest.approx(measured[row["kind"], row["point"]], rel=1e-2), (row["kind"], row["point"])


def test_a_llama_states_none_of_them():
    """A layer without these modules: every fact 0, and the price still the measurement."""
    config = default("llama", hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2, vocab_size=256)
    spec = run_census(config, name="tiny-llama", seq_length=SEQ).to_dict()
    (kind,) = {group["kind"] for group in spec["layers"]}
    assert set(facts(spec, kind).values()) == {0}
    priced, measured = priced_vs_measured(spec, SEQ)[kind]
    assert priced == measured

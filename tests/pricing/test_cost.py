"""Recompute cost (catalogue/records/cost.py, costs.yaml, accelerators.yaml): against torch's
FlopCounterMode on a real Llama-3.1-8B layer on fake tensors, against formulas worked by hand,
and Korthikanti et al.'s claim on their own GPT-3 175B layer."""

from __future__ import annotations

from speccat.catalogue.vocabulary import VARIANTS
from speccat.census.spec import FLAGS

import numpy as np
import pytest
from conftest import load_shipped

from support.pricing_specs import llama_8b

from speccat.catalogue.records.ends import load_ends
from speccat.catalogue.records.cost import CostError, load_accelerators, load_costs, op_costs, recomputed, stored_version


@pytest.fixture(scope="module")
def costs(records):
    return load_costs(records)


def llama_spec():
    spec = llama_8b()
    c = load_shipped("meta-llama/Llama-3.1-8B-Instruct")
    h, kv, dh, hff = c["hidden_size"], c["num_key_value_heads"], c["hidden_size"] // c["num_attention_heads"], c["intermediate_size"]
    spec["params"] = {"kinds": {"decoder": {"attention": 2 * h * h + 2 * h * kv * dh, "ffn_dense": 3 * h * hff, "norm": 2 * h}}}
    return spec


def flop_counter_on_a_fake_llama_layer(seq: int) -> dict[str, int]:
    """FlopCounterMode's forward FLOPs of one Llama-3.1-8B decoder layer (eager attention, so
    its two products are bmm ops FlopCounterMode counts), by the layer's direct children."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = LlamaConfig(**load_shipped("meta-llama/Llama-3.1-8B-Instruct"))
    config._attn_implementation = "eager"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # .to(bfloat16) cannot swap fake parameters
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            layer = LlamaDecoderLayer(config, layer_idx=0)
    finally:
        torch.set_default_dtype(previous)
    with FakeTensorMode(allow_non_fake_inputs=True):
        rotary = LlamaRotaryEmbedding(config)
        x = torch.empty(1, seq, config.hidden_size, dtype=torch.bfloat16)
        positions = torch.arange(seq)[None]
        cos, sin = rotary(x, positions)
        mask = torch.zeros(1, 1, seq, seq, dtype=torch.bfloat16)
        counter = FlopCounterMode(display=False)
        with counter:
            layer(x, attention_mask=mask, position_ids=positions, position_embeddings=(cos, sin))
    by_module = counter.get_flop_counts()
    names = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn", "mlp", "Global"}
    out = {}
    for name, ops in by_module.items():
        short = name.split(".", 1)[1] if name.startswith("LlamaDecoderLayer.") else name
        if short in names:
            out[short] = sum(ops.values())
    return out


def test_full_recompute_of_a_llama_8b_layer_is_its_forward_as_flop_counter_counts_it(records, grid, costs):
    seq = 1024
    counted = flop_counter_on_a_fake_llama_layer(seq)
    spec = llama_spec()
    one = grid.with_settings([grid.setting({"seq_length": seq})])
    oc = op_costs(spec, records, one, costs)
    per_op = dict(zip(oc.ops, oc.flops[0, 0]))
    h, a, kv, dh, hff, s = 4096, 32, 8, 128, 14336, seq
    # each op by hand from the dims; under flash attBMM keeps the kernel's inputs q, k, v (their
    # projections re-run), softmax its outputs (the kernel re-runs: both products), attMM the
    # norm's output and o_proj's input (o_proj)
    assert per_op["attMM"] == 2 * s * (a * dh) * h
    assert per_op["attBMM"] == 2 * s * h * (a * dh + 2 * kv * dh)
    assert per_op["softmax"] == 2 * a * s * s * dh + 2 * a * s * s * dh  # q·kᵀ, then probabilities · v
    assert per_op["ffMM"] == 2 * s * h * hff * 3
    # and what FlopCounterMode counts, module by module
    assert per_op["attMM"] == counted["self_attn.o_proj"]
    assert per_op["attBMM"] == sum(counted[f"self_attn.{p}_proj"] for p in "qkv")
    assert per_op["softmax"] == counted["self_attn"] - sum(counted[f"self_attn.{p}_proj"] for p in "qkvo")
    assert per_op["ffMM"] == counted["mlp"]
    assert oc.forward()[0][0, 0] == counted["Global"]  # full recompute = the layer's forward, FLOP for FLOP


def gpt3_layer() -> dict:
    """A GPT-3 175B layer as Korthikanti et al. (2022) model it: h 12288, 96 heads, 16-bit
    softmax output, 1-byte dropout masks, one softmax, two products, four projections."""
    h = 12288
    ops = {"attMM": 4, "attBMM": 2, "ffMM": 2, "softmax": 1, "dropout": 2, "normOp": 2, "gather": 0, "headCast": 1, "ffAct": 1, "linrec": 0}
    spec = {
        "arch": "gpt3", "hidden_size": h, "num_attention_heads": 96, "num_key_value_heads": 96, "intermediate_size": 4 * h,
        "layers": [{"kind": "decoder", "count": 96}], "ops": {"decoder": ops},
        "flavours": {"decoder": {"attention": "full", "ffn": "dense"}},
        "params": {"kinds": {"decoder": {"attention": 4 * h * h, "ffn_dense": 8 * h * h, "norm": 4 * h}}},
        **{flag: flag == "layer_norms" for flag in FLAGS},  # LayerNorm; the census states every flag
        # the variant facts the census states: attention dropout on, nothing else
        "variants": {"decoder": {name: name == "attention_dropout" for name in VARIANTS} | {"index_topk": 0, "act_saved": 1, "recurrent_cycles": 1}},
    }  # fmt: skip
    return spec


def test_korthikanti_selective_recompute_on_gpt3_175b(records, grid, costs):
    from speccat.catalogue.records.pricing import price_layers

    h, a, s, b, t = 12288, 96, 2048, 1, 8
    spec = gpt3_layer()
    setting = grid.setting({"stack": "megatron", "seq_length": s, "tp": t, "sequence_parallel": True, "flash_attention": False})
    one = grid.with_settings([setting])
    oc = op_costs(spec, records, one, costs)
    flops, _ = oc.masks(records)
    core = records.mask_of(["attBMM", "softmax", "dropout", "headCast"])
    forward = oc.forward()[0][0, 0]
    # the forward of a layer per rank, by hand: 24bsh² + 4bs²h, over t
    assert forward == pytest.approx((24 * b * s * h * h + 4 * b * s * s * h) / t, rel=1e-12)
    assert flops[0, 0, core] == 4 * b * s * s * h / t  # both products of the core
    share = flops[0, 0, core] / (costs.step_factor * forward)
    assert share == pytest.approx(4 * s / (3 * (24 * h + 4 * s)), rel=1e-12)
    assert 0.008 < share < 0.01  # 0.90 % of the step's FLOPs
    # The paper's 2.7 % (section 5) is (s/6h) / (1 + s/6h + V/(12hL)) with V 51200, L 96:
    # it books the core's forward and backward again (12bs²h per layer), three times our forward-only figure.
    paper = (s / (6 * h)) / (1 + s / (6 * h) + 51200 / (12 * h * 96))
    assert paper == pytest.approx(0.027, abs=0.0005) and share * 3 == pytest.approx(s / (6 * h) / (1 + s / (6 * h)), rel=1e-12)
    # and it saves the 5as²b/t term: softmax output, its dropout mask and dropout output
    prices = price_layers(spec, records, one)
    saved = prices.total[0, 0, 0] - prices.total[0, 0, records.mask_of(["softmax", "dropout", "headCast"])]
    hidden_masks = 2 * s * b * h * 1 / t  # the two dropouts after attention and MLP: bool masks, 1 byte per element
    assert saved - hidden_masks == 5 * a * s * s * b / t
    assert prices.total[0, 0, 0] - prices.total[0, 0, core] >= saved


def test_a_mask_recomputes_exactly_the_ops_it_drops(records, costs):
    ops = tuple(costs.ops)
    r = recomputed(records, ops)
    assert not r[0].any()
    for mask in range(records.n_masks):
        assert {op for op, on in zip(ops, r[mask]) if on} == set(ops) - set(records.kept(mask)) - {"attMM", "ffMM", "linrec"}


def test_time_is_the_slower_of_compute_and_memory(records, grid, costs):
    spec = llama_spec()
    one = grid.with_settings([grid.setting({"seq_length": 8192})])
    oc = op_costs(spec, records, one, costs)
    h100 = load_accelerators()["H100-SXM"]
    per_op = oc.seconds(h100)
    assert np.array_equal(per_op, np.maximum(oc.flops / 989e12, oc.moved / 3.35e12))
    assert oc.seconds(h100, records)[0, 0, records.mask_of(["ffAct"])] == oc.moved[0, 0, oc.ops.index("ffAct")] / 3.35e12


def test_costs_file_must_cover_every_op(records, tmp_path):
    bad = tmp_path / "costs.yaml"
    bad.write_text("step_factor: 3\nops:\n  attMM: {flops: 0, bytes: 0}\n")
    with pytest.raises(CostError) as err:
        load_costs(records, bad)
    assert err.value.reason == "missing_op"
    bad.write_text("step_factor: 3\nops:\n" + "".join(f"  {op}: {{flops: hidden, bytes: 0}}\n" for op in (*records.ops, *records.parts)))
    with pytest.raises(CostError) as err:
        load_costs(records, bad)
    assert err.value.reason == "unknown_name"


def test_a_change_of_costs_alone_changes_the_version_stored_prices_are_keyed_by(records, tmp_path, monkeypatch):
    """Stored costs are keyed by records_version: costs.yaml is hashed into it, so a night after a
    cost change prices every config again instead of keeping the old costs."""
    from speccat.catalogue.records import cost
    from speccat.flows.refresh import current_versions

    shipped = current_versions()["records"]
    assert shipped == stored_version(records, load_costs(records), load_ends(records))
    changed = tmp_path / "costs.yaml"
    changed.write_text(cost.COSTS_PATH.read_text().replace("step_factor: 3", "step_factor: 4"))
    assert load_costs(records, changed).step_factor == 4
    monkeypatch.setattr(cost, "COSTS_PATH", changed)
    assert current_versions()["records"] != shipped
    assert current_versions()["records"] == stored_version(records, load_costs(records, changed), load_ends(records))

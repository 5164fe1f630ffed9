"""A storage several switched ops keep is counted once and freed only when every op keeping it is
recomputed (census/measure/joint_storages.py; records.yaml `joint`, docs/pricing.md "Joints").

persimmon's attention splits query_key_value's output into q, k and v as views of one storage;
its QK-LayerNorms keep the q and k views as their inputs (normOp) and the flash kernel keeps the
v view (attBMM). Recomputing the norms alone or the kernel alone frees none of it: the census
states `qk_norm_in_projection` and the records price that storage as the joint `qkvShared`.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import saves_and_grads, tiny_model

from speccat.catalogue.records.oprecords import RecordsError, load_records, parse_records, records_content
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import load_settings
from speccat.catalogue.records import points
from speccat.census import run_census

SEQ = 64
HIDDEN, HEADS = 256, 4  # head_dim 64
BF16 = 2


def _persimmon() -> dict:
    from transformers import CONFIG_MAPPING

    return {**CONFIG_MAPPING["persimmon"]().to_dict(), "model_type": "persimmon", "hidden_size": HIDDEN,
            "num_attention_heads": HEADS, "intermediate_size": 4 * HIDDEN, "num_hidden_layers": 2, "vocab_size": 1000}  # fmt: skip


@pytest.fixture(scope="module")
def spec():
    return run_census(_persimmon(), name="persimmon", seq_length=SEQ, across=True)


def _graph_savers(root: torch.Tensor) -> dict[int, set[str]]:
    """storage -> the names of the autograd nodes behind `root` that hold a tensor of it."""
    holders: dict[int, set[str]] = {}
    seen, stack = set(), [root.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        values = [getattr(node, n) for n in dir(node) if n.startswith("_saved_") and _readable(node, n)]
        values += list(getattr(node, "saved_tensors", ()))
        for value in values:
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, torch.Tensor) and t.dim() > 0:
                    holders.setdefault(t.untyped_storage()._cdata, set()).add(type(node).__name__)
        stack.extend(n for n, _ in node.next_functions)
    return holders


def _readable(node, name: str) -> bool:
    try:
        getattr(node, name)
    except RuntimeError:
        return False
    return True


def test_a_real_persimmon_layer_keeps_the_fused_projection_output_in_its_norms_and_its_kernel():
    """A real bf16 forward of layer 0 on CPU, its attention through speccat's kernel: the storage
    of query_key_value's output (3 × hidden wide, bf16: 1536 B per token) is held by the
    QK-LayerNorms' backward nodes and by the attention kernel's, so dropping either's saves
    frees nothing of it."""
    from speccat.census.kernels.attention import ATTENTION_IMPL, register

    register()
    model = tiny_model({**_persimmon(), "attn_implementation": ATTENTION_IMPL}, torch.bfloat16)
    layer = model.model.layers[0]
    torch.manual_seed(1)
    x = torch.randn(1, SEQ, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    rotary = model.model.rotary_emb(x, torch.arange(SEQ).unsqueeze(0))
    fused = {}

    def note(module, args, out) -> None:
        fused["key"] = out.untyped_storage()._cdata

    handle = layer.self_attn.query_key_value.register_forward_hook(note)
    out = layer(x, position_embeddings=rotary)
    handle.remove()
    out = out[0] if isinstance(out, tuple) else out
    holders = _graph_savers(out)
    kept, _ = saves_and_grads(model, layer, x.detach().requires_grad_(), position_embeddings=rotary)
    assert any(t.untyped_storage().nbytes() == 3 * HIDDEN * BF16 * SEQ for t in kept.values())
    # the QK-norms' input (q and k views) and speccat's flash stand-in's v: nothing else holds it
    names = holders[fused["key"]]
    assert len(names) == 2 and "NativeLayerNormBackward0" in names
    assert any("flash_attention" in name for name in names)


def test_the_census_states_the_joint_storage_and_books_it_once(spec):
    """The census books the storage once (to the norms, its first saver), states
    qk_norm_in_projection, and the records price it once: the price at the census's point is
    what it measured."""
    assert spec["variants"]["decoder"]["qk_norm_in_projection"] is True
    booked = spec["measured"]["decoder"]["bytes_per_token"]
    # attBMM: q and k, each made anew by the rotary's cat (hidden wide, bf16); v adds nothing of its own
    assert booked["attBMM"] == 2 * HIDDEN * BF16
    rows = {r["point"]: r for r in points.price_points(spec, load_records(), load_settings())}
    measured = points.measured_per_token(spec)
    assert rows["census"]["priced_per_token"] == pytest.approx(measured[("decoder", "census")], rel=1e-12)


def test_the_joint_storage_is_freed_only_when_both_ops_are_recomputed(spec):
    """Priced at each of the four switch sets over normOp and attBMM: X + A + N + J with nothing
    recomputed, X + N + J recomputing the kernel, X + A + J the norms, X both; so the joint J is
    (attBMM alone) + (normOp alone) − (none) − (both): query_key_value's output, 3 × 256 bf16
    elements per token = 1536 B, and the kernel's own A its q and k, 2 × 256 × 2 = 1024 B."""
    records, grid = load_records(), load_settings()
    one = grid.with_settings([grid.setting({"seq_length": SEQ, "micro_batch": 1, "tp": 1, "cp": 1, "sequence_parallel": False, "attention_kernel": "flash"})])
    total = price_layers(spec, records, one).total[0, 0]

    def at(*switches: str) -> float:
        return float(total[records.mask_of(switches)]) / SEQ

    assert at("attBMM") + at("normOp") - at() - at("normOp", "attBMM") == pytest.approx(3 * HIDDEN * BF16)
    assert at() - at("attBMM") == pytest.approx(2 * HIDDEN * BF16)
    assert "qkvShared" in records.kept(records.mask_of(["normOp"])) and "qkvShared" in records.kept(records.mask_of(["attBMM"]))
    assert "qkvShared" not in records.kept(records.mask_of(["normOp", "attBMM"]))


def test_each_recompute_point_the_census_measured_is_priced_within_tolerance(spec):
    """The points across settings: each switch alone (normOp's and attBMM's keep the storage: the
    census's selective-checkpoint policy saves the projection while one op keeping it is not
    recomputed) and all of them, within the records' tolerance."""
    records = load_records()
    rows = points.price_points(spec, records, load_settings())
    measured = points.measured_per_token(spec)
    ratios = {r["point"]: r["priced_per_token"] / measured[(r["kind"], r["point"])] for r in rows if measured.get((r["kind"], r["point"]))}
    assert {"recompute normOp", "recompute attBMM", "recompute all"} <= ratios.keys()
    assert all(abs(ratio - 1) <= records.tolerance for ratio in ratios.values()), ratios
    # recomputing the norms alone frees at most what they were booked less the fused output
    # (3 × 256 bf16 per token, booked to the norms, their first saver), which the kernel still keeps
    booked = spec["measured"]["decoder"]["bytes_per_token"]
    kept = {p["point"]: sum(v for op, v in p["bytes_per_token"]["decoder"].items() if op != "cached") for p in spec["measured_at"]}
    assert kept["recompute normOp"] >= measured[("decoder", "census")] - booked["normOp"] + 3 * HIDDEN * BF16


@pytest.mark.parametrize(
    ("joint", "reason"),
    [({"normOp": ["normOp", "attBMM"]}, "bad_value"), ({"j": ["normOp"]}, "bad_value"), ({"j": ["normOp", "attMX"]}, "unknown_op")],
)
def test_the_loader_refuses_a_joint_that_names_no_ops_of_the_records(joint, reason):
    """A joint lists two or more distinct ops or parts of the records and is named apart from them."""
    from speccat.catalogue.datafile import read_yaml
    from speccat.catalogue.records.oprecords import RECORDS_PATH

    data = records_content({**read_yaml(RECORDS_PATH, lambda r, w: AssertionError(w)), "joint": joint})
    with pytest.raises(RecordsError) as err:
        parse_records(data)
    assert err.value.reason == reason

"""A latent MoE: routed experts run in a narrower width between a projection of the MoE block down
from the hidden size and one back up to it (nemotron_h's `fc1_latent_proj` and `fc2_latent_proj`
when `moe_latent_size` is set: NVIDIA-Nemotron-3-Super-120B-A12B; docs/census.md, "A latent MoE").

- a tiny latent layer's census bytes against a real CPU forward and backward of the same layer,
  storage by storage, each from a hand count;
- the shipped Super config: the latent width, the experts' width and matmuls, the parameters and
  the feed-forward's bytes read from its config by hand, priced within the records' tolerance at
  every point the census measures (the backward peak included);
- Nemotron-3-Nano (no latent: `moe_latent_size` null) states width 0 and keeps what it kept.
"""

from __future__ import annotations

import pytest
import torch
from conftest import load_shipped
from support.layer_runs import priced_vs_measured, saved_by_layer, signature, tiny_model

from speccat.census import run_census

B, F, L8 = 2, 4, 8  # bf16, fp32, int64 bytes
H, S, LAT, E, K, I, SH = 32, 16, 8, 4, 2, 16, 24  # hidden, tokens, latent width, experts, top-k, expert width, shared width
N = S * K  # the token slots
TINY = {
    "model_type": "nemotron_h", "hybrid_override_pattern": "EE", "hidden_size": H, "moe_latent_size": LAT,
    "n_routed_experts": E, "num_experts_per_tok": K, "moe_intermediate_size": I, "moe_shared_expert_intermediate_size": SH,
    "n_group": 1, "topk_group": 1, "mlp_hidden_act": "relu2", "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8,
    "mamba_num_heads": 4, "mamba_head_dim": 8, "n_groups": 1, "ssm_state_size": 8, "intermediate_size": 24,
    "vocab_size": 128, "max_position_embeddings": 64,
}  # fmt: skip
SUPER = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"
NANO = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"


# -- a real layer, storage by storage --------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    return run_census(TINY, name="tiny-latent-moe", seq_length=S).to_dict()


def _expected() -> dict[str, list[tuple[tuple[int, ...], torch.dtype, int]]]:
    """What layer 0 keeps, by the op the census books it to, counted by hand."""
    bf16, f32, i64 = torch.bfloat16, torch.float32, torch.int64
    # the block's RMSNorm, in fp32: its upcast input, rstd, the normalised input its weight
    # multiplies, the weight's fp32 copy
    norm = [((1, S, H), f32, S * H * F), ((1, S, 1), f32, S * F), ((1, S, H), f32, S * H * F), ((H,), f32, H * F)]
    # the router: its fp32 input, the sigmoid over every expert, the chosen indices (the gather's),
    # the chosen weights and their sum (the renormalising division's)
    router = [((S, H), f32, S * H * F), ((S, E), f32, S * E * F), ((S, K), i64, S * K * L8), ((S, K), f32, S * K * F), ((S, 1), f32, S * F)]
    # the shared expert (up, relu², down): its input, the block's normalised input, which the
    # down latent projection reads too (one storage, kept once); the square's output (down's input)
    shared = [((S, H), bf16, S * H * B), ((S, SH), bf16, S * SH * B)]
    shared_act = [((1, S, SH), bf16, S * SH * B)]  # relu's output, which the square reads
    # the routed experts (the interface's grouped_mm over the N slots) in the latent width: the
    # sort's permutation, its token index and the inverse permutation; grouped_mm's int32
    # offsets; the tokens gathered (up's input, LAT wide), the square's output (down's input),
    # down's output (LAT wide, the weighting product's) and the sorted fp32 weights
    routed = [((N,), i64, N * L8)] * 3 + [((E,), torch.int32, E * 4)]
    routed += [((N, LAT), bf16, N * LAT * B), ((N, I), bf16, N * I * B), ((N, LAT), bf16, N * LAT * B), ((N, 1), f32, N * F)]
    routed_act = [((N, I), bf16, N * I * B)]  # relu's output
    # the up latent projection's input: the experts' summed output, LAT wide
    latent = [((S, LAT), bf16, S * LAT * B)]
    return {"normOp": norm, "ffMM": router + shared + routed + latent, "ffAct": shared_act + routed_act}


def test_the_census_books_what_a_real_latent_layer_keeps(tiny):
    """A real bf16 forward of layer 0 on CPU: what its graph holds for backward (each save
    backward can still reach) is the hand count, and the census books the same bytes to each op."""
    model = tiny_model(TINY, torch.bfloat16)
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=torch.bfloat16, requires_grad=True)
    held = saved_by_layer(model, model.model.layers[0], x)
    real = signature(t for key, t in held.items() if key != x.untyped_storage()._cdata)
    expected = _expected()
    assert real == sorted((s for storages in expected.values() for s in storages), key=str)
    booked = {op: n * S for op, n in tiny["measured"]["moe"]["bytes_per_token"].items() if n}
    assert booked == {op: sum(n for *_, n in storages) for op, storages in expected.items()}


def test_the_real_layer_runs_its_experts_in_the_latent_width():
    """fp32 on CPU: the experts are called with the down projection's output and the up
    projection reads theirs, LAT wide; the backward reaches both projections' weights."""
    model = tiny_model(TINY, torch.float32)
    block = model.model.layers[0].mixer
    widths = {}

    def called(module, args):
        widths["in"] = args[0].shape[-1]

    def returned(module, args, out):
        widths["out"] = out.shape[-1]

    block.experts.register_forward_pre_hook(called)
    block.experts.register_forward_hook(returned)
    x = torch.randn(1, S, H, requires_grad=True)
    model.model.layers[0](x).square().sum().backward()
    assert widths == {"in": LAT, "out": LAT}
    assert block.fc1_latent_proj.weight.grad.abs().sum() > 0 and block.fc2_latent_proj.weight.grad.abs().sum() > 0


def test_the_tiny_layer_states_its_latent_width(tiny):
    assert tiny["layers"] == [{"kind": "moe", "count": 2}]
    assert tiny["variants"]["moe"]["moe_latent_width"] == LAT
    assert (tiny["num_experts"], tiny["num_experts_per_tok"], tiny["moe_intermediate_size"]) == (E, K, I)
    assert tiny["ops"]["moe"]["ffMM"] == 2  # up and down, each LAT × I
    # the latent projections are the MoE block's rest, beside the router (H → E)
    assert tiny["params"]["kinds"]["moe"] == {
        "attention": 0, "ffn_routed": E * 2 * LAT * I, "ffn_shared": 2 * H * SH, "ffn_router": E * H + 2 * H * LAT,
        "ffn_dense": 0, "norm": H, "other": 0,
    }  # fmt: skip


def test_without_its_up_projection_the_width_is_no_latent_width(monkeypatch):
    """The fact needs both projections to have run around the experts: a block whose experts'
    output reaches the stream without a projection back (fc2 replaced by a slice) states no
    latent width, and its experts' weights are then no whole number of hidden-wide projections."""
    from speccat.census.spec import SpecError
    from transformers.models.nemotron_h import modeling_nemotron_h

    original = modeling_nemotron_h.NemotronHMoE.__init__

    def no_up(self, config, layer_idx=None):
        original(self, config, layer_idx)
        self.fc2_latent_proj = torch.nn.ZeroPad1d((0, config.hidden_size - config.moe_latent_size))

    monkeypatch.setattr(modeling_nemotron_h.NemotronHMoE, "__init__", no_up)
    with pytest.raises(SpecError) as err:
        run_census(TINY, name="tiny-no-up", seq_length=S)
    assert err.value.reason == "unsupported_layer" and "not a whole number" in str(err.value)


# -- the shipped configs ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def super_spec():
    return run_census(load_shipped(SUPER), name=SUPER, across=True).to_dict()


def test_super_states_its_latent_moe(super_spec):
    """Super's config: hidden 4096, moe_latent_size 1024, 512 routed experts top 22 of width
    2688 (relu², up and down), one shared expert of 5376; hybrid_override_pattern of 40 M, 40 E
    and 8 * (88 blocks)."""
    spec = super_spec
    counts = {}
    for group in spec["layers"]:
        counts[group["kind"]] = counts.get(group["kind"], 0) + group["count"]
    assert counts == {"mamba2": 40, "moe": 40, "full": 8}
    assert spec["variants"]["moe"]["moe_latent_width"] == 1024
    assert not any(spec["variants"][kind]["moe_latent_width"] for kind in ("mamba2", "full"))
    assert (spec["num_experts"], spec["num_experts_per_tok"], spec["moe_intermediate_size"], spec["shared_expert_intermediate_size"]) == (512, 22, 2688, 5376)
    assert spec["ops"]["moe"]["ffMM"] == 2 and spec["ops"]["moe"]["ffAct"] == 1
    h, lat = 4096, 1024
    params = spec["params"]["kinds"]["moe"]
    assert params["ffn_routed"] == 512 * 2 * 2688 * lat  # up (2688 × 1024) and down (1024 × 2688) per expert
    assert params["ffn_router"] == 512 * h + 2 * h * lat  # the router, fc1_latent_proj (1024 × 4096) and fc2_latent_proj
    assert params["ffn_shared"] == 2 * h * 5376


def test_super_keeps_its_latent_parts_by_hand(super_spec):
    """The MoE block's bytes per token at the census's 4096 tokens, from the config's dims: each of
    the 22 slots keeps the gathered input and the down output in the latent width (2 × 2 × 1024)
    beside the expert's relu² output and square (2 × 2688 wide, one of them ffAct) and its
    indices and fp32 weight; the up latent projection keeps the experts' summed output (2 ×
    1024); the down one reads the shared expert's input (kept once)."""
    h, lat, k, width, shared, experts = 4096, 1024, 22, 2688, 5376, 512
    latent_slot = B * lat + B * lat  # the gathered tokens and down's output, latent wide
    routed = k * (B * width + latent_slot + F + 3 * L8)  # + the square's output, the fp32 weight, three indices
    shared_mlp = B * h + B * shared  # its input (the block's, fc1's too) and the square's output
    router = F * h + F * experts + L8 * k + F + F * k  # fp32 input, sigmoid scores, indices, the renormalising division
    offsets = experts * 4 / 4096  # grouped_mm's int32 offsets, one per expert, per sequence
    fc2_input = B * lat
    booked = super_spec["measured"]["moe"]["bytes_per_token"]
    assert booked["ffMM"] == routed + shared_mlp + router + offsets + fc2_input
    assert booked["ffAct"] == k * B * width + B * shared  # relu's output: each slot's and the shared expert's


def test_super_is_priced_at_every_point_the_census_measured(super_spec, records, grid):
    from speccat.catalogue.records.ends import load_ends
    from speccat.catalogue.records.points import check_prices, price_ends, price_points, worst_ratio

    rows = price_points(super_spec, records, grid) + price_ends(super_spec, records, grid, load_ends(records))
    check_prices(super_spec, rows, records)  # every point and the backward peaks (kinds peak:KIND)
    assert abs(worst_ratio(super_spec, rows)[2] - 1) < 0.001
    for kind, (priced, measured) in priced_vs_measured(super_spec, 4096).items():
        assert abs(priced / measured - 1) < 0.001, (kind, priced, measured)


def test_nano_states_no_latent_width_and_keeps_what_it_kept():
    """Nano: hidden 2688, 128 experts top 6 of width 1856 (relu²), one shared expert of 3712, no
    latent: its slots keep the gathered input and down output hidden wide, as before."""
    spec = run_census(load_shipped(NANO), name=NANO, seq_length=4096).to_dict()
    assert all(spec["variants"][kind]["moe_latent_width"] == 0 for kind in spec["variants"])
    h, k, width, shared, experts = 2688, 6, 1856, 3712, 128
    routed = k * (B * width + 2 * B * h + F + 3 * L8)
    router = F * h + F * experts + L8 * k + F + F * k
    assert spec["measured"]["moe"]["bytes_per_token"]["ffMM"] == routed + (B * h + B * shared) + router + experts * 4 / 4096
    assert spec["params"]["kinds"]["moe"]["ffn_router"] == experts * h  # the router alone
    for kind, (priced, measured) in priced_vs_measured(spec, 4096).items():
        assert abs(priced / measured - 1) < 0.001, (kind, priced, measured)

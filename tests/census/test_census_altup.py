"""gemma3n's side branches and activation sparsity (docs/census.md, "Side branches" and "Known
limits"): AltUp carries `altup_num_inputs` streams of the hidden states through each layer, and
its predict and correct steps, methods the layer calls between its children, keep the streams
(the prediction's matmul reads the layer's input), the innovation repeated over the streams and
the copy its output scale multiplies (`side_code_bytes`); its router and coefficient projections
and Laurel's rank-wide projection keep their inputs (`side_input_width`), but Laurel's first
projection reads what the attention's projections read, kept once; the first layers' gaussian
top-k keeps gate_proj's output for its standard deviation and that deviation (`ff_stats_kept`),
and its ReLU is a step before the GELU, which keeps the ReLU's output: one activation call.

Worked by hand from the tiny config's dims, checked against a real CPU forward and backward of
one layer of each kind (through speccat's flash kernel, as the census runs it), and the registry
default priced within the records' tolerance at every point the census measures.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest
import torch

from speccat.census import run_census
from speccat.census.measure.watcher import tokens_of

BF16, FP32 = 2, 4
S, H, A, KV, D, W, P, R, N = 32, 64, 4, 2, 16, 128, 16, 8, 4  # tokens, hidden, heads, kv heads, head dim, MLP width, per-layer input, Laurel rank, streams
TINY = {
    "model_type": "gemma3n_text", "hidden_size": H, "intermediate_size": [W] * 4, "num_hidden_layers": 4,
    "num_attention_heads": A, "num_key_value_heads": KV, "head_dim": D, "vocab_size": 128, "vocab_size_per_layer_input": 64,
    "hidden_size_per_layer_input": P, "laurel_rank": R, "altup_num_inputs": N, "num_kv_shared_layers": 2,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"], "sliding_window": 16,
    "activation_sparsity_pattern": [0.95, 0.0, 0.0, 0.0], "max_position_embeddings": 256, "torch_dtype": "bfloat16",
}  # fmt: skip
SPARSE, PLAIN = "sliding_dense", "full_dense"  # layer 0 runs the activation sparsity, layer 1 not

# What the side branches keep per token (bf16 compute), booked `other`:
SIDE_INPUTS = 2 * H + N + R  # the AltUp router's input in predict and in correct, prediction_coefs' (the modalities), Laurel's linear_right's
SIDE_CODE = BF16 * (N + N + 1)  # per hidden channel: the N streams the prediction's matmul reads, the innovation repeated N times, the copy the output scale multiplies
COEFFICIENTS = (
    2 * FP32 * N  # the router's fp32 tanh output, in predict and in correct
    + BF16 * N * N  # the prediction's N×N coefficients the matmul reads
    + BF16 * N  # the modalities the correction's clamped weight multiplies (a functional linear, no module)
    + BF16 * N  # the correction's coefficients the innovation's product reads
    + BF16 * N * N / S  # the clamped correction weight, one a layer call
)
LAUREL_LEFT = BF16 * H  # linear_left's input: input_layernorm's output, the attention's input too
# the sparse kind's gaussian top-k: gate_proj's output and its standard deviation, which the
# std keeps, and the deviation's bf16 multiplier (the normal's quantile, a 0-d tensor one a layer call)
SPARSITY = BF16 * (W + 1)
MULTIPLIER = BF16 / S


def test_the_tokens_of_streams_before_the_batch_are_the_sequences():
    assert tokens_of((N, 1, 256), 256) == 256  # AltUp's (streams, b, s)
    assert tokens_of((1, 256, N), 256) == 256  # hyper-connections' (b, s, streams)


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY, name="tiny-gemma3n", seq_length=S)


def test_the_side_branches_and_the_sparsity_state_their_facts(spec):
    for kind, facts in spec["variants"].items():
        assert facts["side_input_width"] == SIDE_INPUTS, kind
        assert facts["side_code_bytes"] == SIDE_CODE, kind
        assert facts["ff_stats_kept"] == (1 if kind == SPARSE else 0), kind
        # the GELU keeps its input (the ReLU's output in the sparse kind), the per-layer gate's its own
        assert facts["act_saved"] == 1 and spec["ops"][kind]["ffAct"] == 1, kind


def test_a_layer_without_side_branches_or_sparsity_states_none():
    """A llama layer: no side branch, no statistic in its MLP, one activation call keeping its input."""
    from transformers import CONFIG_MAPPING

    config = {
        **CONFIG_MAPPING["llama"]().to_dict(), "model_type": "llama", "hidden_size": H, "num_attention_heads": A,
        "num_key_value_heads": KV, "intermediate_size": W, "num_hidden_layers": 2, "vocab_size": 128,
    }  # fmt: skip
    llama = run_census(config, name="tiny-llama", seq_length=S)
    ((kind, facts),) = llama["variants"].items()
    assert (facts["side_input_width"], facts["side_code_bytes"], facts["ff_stats_kept"], facts["act_saved"]) == (0, 0, 0, 1)
    assert llama["ops"][kind]["ffAct"] == 1


def test_what_the_census_measures_worked_by_hand(spec):
    for kind in (SPARSE, PLAIN):
        measured = spec["measured"][kind]["bytes_per_token"]
        assert measured["other"] == pytest.approx(LAUREL_LEFT + BF16 * SIDE_INPUTS + SIDE_CODE * H + COEFFICIENTS, abs=1e-9)
        assert measured["attMM"] == 0  # the attention's input is Laurel's, which kept it first
        # the MLP's input, gate's GELU output, up's output and the product; the gate's input, product and GELU output
        mlp = BF16 * (H + 3 * W) + BF16 * (H + 2 * P)
        assert measured["ffMM"] == mlp + (SPARSITY + MULTIPLIER if kind == SPARSE else 0)
        assert measured["ffAct"] == BF16 * (W + P)  # GELU's input (in the sparse kind the ReLU's output), the gate's GELU input


def _real_layer_bytes(index: int) -> float:
    """A real bf16 forward and backward of the tiny model's layer `index` alone on CPU, through
    speccat's flash kernel: the bytes per token of the storages it saved, the parameters, buffers,
    rotary tables, per-layer input and output left out, its hidden-states input (the N streams,
    which AltUp's prediction keeps) counted, as the census counts it."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.cache_utils import KVSharingDict

    from speccat.census.kernels.attention import ATTENTION_IMPL, register

    register()
    config = AutoConfig.for_model(**{k: v for k, v in TINY.items() if k != "torch_dtype"})
    config._attn_implementation = ATTENTION_IMPL
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).train()
    x = torch.randn(N, 1, S, H, dtype=torch.bfloat16, requires_grad=True)
    per_layer = torch.randn(1, S, P, dtype=torch.bfloat16, requires_grad=True)  # made from the embeddings: the gate's product keeps its GELU output for it
    rotary = model.model.rotary_emb(x[0], torch.arange(S).unsqueeze(0), layer_type=TINY["layer_types"][index])
    saved = {}

    def pack(t):
        saved.setdefault(t.untyped_storage()._cdata, t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model.model.layers[index](x, position_embeddings=rotary, per_layer_input=per_layer, shared_kv_states=KVSharingDict())
    out.float().square().sum().backward()
    assert x.grad is not None
    left_out = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers(), per_layer, out, *rotary)}
    return sum(t.untyped_storage().nbytes() for key, t in saved.items() if key not in left_out) / S


@pytest.mark.parametrize("index, kind", [(0, SPARSE), (1, PLAIN)])
def test_a_real_layer_keeps_what_the_census_measured(spec, index, kind):
    assert _real_layer_bytes(index) == sum(spec["measured"][kind]["bytes_per_token"].values())


def _op_prices(spec) -> dict[tuple[str, str], float]:
    """(kind, op) -> the records' bytes per token at the census's point (flash, one rank)."""
    from speccat.catalogue.records import opsplit
    from speccat.flows.analysis import pricing_inputs

    records, grid, _, _ = pricing_inputs()
    point = grid.setting({"stack": "transformers", "seq_length": S, "tp": 1, "cp": 1, "sequence_parallel": False, "micro_batch": 1, "attention_kernel": "flash"})
    prices = defaultdict(float)
    for row in opsplit.op_prices(spec, records, dataclasses.replace(grid, curve=(point,))):
        prices[row["kind"], row["op"]] += row["kept_bytes"] / S
    return prices


def test_the_records_price_the_side_branches_and_the_sparsity(spec):
    """The records price the attention's input once (attMM), the side inputs and what AltUp's code
    keeps (the side slot, attMM: the census books them `other`); the MLP's and the activation's
    bytes as measured. Left unpriced: the coefficients, a few values a token, and the sparsity's
    multiplier, one a layer call."""
    prices = _op_prices(spec)
    for kind in (SPARSE, PLAIN):
        measured = spec["measured"][kind]["bytes_per_token"]
        assert prices[kind, "attMM"] == LAUREL_LEFT + BF16 * SIDE_INPUTS + SIDE_CODE * H
        assert prices[kind, "attMM"] == pytest.approx(measured["attMM"] + measured["other"] - COEFFICIENTS, abs=1e-9)
        assert prices[kind, "ffMM"] == measured["ffMM"] - (MULTIPLIER if kind == SPARSE else 0)
        assert prices[kind, "ffAct"] == measured["ffAct"]


def test_a_tensor_parallel_rank_divides_each_layers_mlp_width():
    """gemma3n's intermediate_size is a list, one per layer: a tp rank's config divides each."""
    from transformers import AutoConfig

    from speccat.census.across import _rank_configs

    config = AutoConfig.for_model(**{k: v for k, v in TINY.items() if k != "torch_dtype"})
    _, rank = _rank_configs(config, config, 2)
    assert (rank.intermediate_size, rank.num_attention_heads, rank.num_key_value_heads) == ([W // 2] * 4, A // 2, KV // 2)
    assert _rank_configs(config, config, 256) is None  # 256 divides no width


def test_the_registry_default_is_priced_within_tolerance_at_every_point():
    """Its default, across settings too: a tp rank divides each layer's MLP width, and its layers
    18 and 19, the sources of the reading layers' keys and values but no probed layer, run under
    selective recompute with no plain probe of their own (recomputed, not counted)."""
    from bench.bench_registry import default_config

    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.points import check_prices, price_points
    from speccat.catalogue.records.settings import load_settings

    spec = run_census(default_config("gemma3n_text"), name="gemma3n_text", seq_length=256, across=True)
    assert spec["variants"]["sliding_dense"]["ff_stats_kept"] == 1 and spec["variants"]["sliding_dense"]["side_code_bytes"] == 18
    assert {"tp 2", "tp 8", "cp 2", "recompute all"} <= {point["point"] for point in spec["measured_at"]}
    check_prices(spec, price_points(spec, load_records(), load_settings()), load_records())  # raises beyond the tolerance at any point

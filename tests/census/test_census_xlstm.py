"""xLSTM's mLSTM blocks (docs/census.md, "Linear attention run in torch"): a census run is a
training run (census/intake/training.yaml sets `mode` to train), the chunkwise mLSTM transformers runs
without the xlstm package is torch code run as written with autograd, and what the census books
for one block is checked against a real CPU forward and backward of the same block, storage by
storage. A config naming a kernel the census does not model (mlstm_kernels' Triton kernels) is
refused before anything is built.

The real run and the census's differ by one storage's bytes: log_sigmoid's buffer, which the CPU
kernel fills (exp(−|x|) of the forget gates) and the CUDA kernel leaves empty.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from support.layer_runs import priced_vs_measured, saves_and_grads, signature, tiny_model

from speccat.census import run_census
from speccat.census.spec import SpecError

BF16, FP32 = 2, 4
H, NH, L, S = 64, 2, 8, 32  # hidden, heads, chunk, tokens (four chunks)
QK, V, FF = H // 2, H, 192  # q and k width (qk_dim_factor 0.5), v width, the MLP's width (2.667·H rounded up to 64)
TINY_XLSTM = {
    "model_type": "xlstm", "hidden_size": H, "num_hidden_layers": 2, "num_heads": NH, "vocab_size": 128,
    "chunk_size": L, "mode": "inference", "torch_dtype": "bfloat16",
}  # fmt: skip
KIND = "linear_eager_gated_dense"


def _built(config):
    from speccat.census.build.model import build
    from speccat.census.intake.resolve import resolve_config

    top, text, _ = resolve_config(config)
    return build(top, text)


def _real_block(seq: int, route: bool = False):
    """A real bf16 forward and backward of block 0, as a training run builds it (mode train);
    with `route`, under the census's attention routing (census/kernels/routing.py)."""
    from speccat.census.kernels.routing import route_attention

    model = tiny_model({**TINY_XLSTM, "mode": "train"}, torch.bfloat16)
    torch.manual_seed(1)
    x = torch.randn(1, seq, H, dtype=torch.bfloat16, requires_grad=True)
    seen = []
    if route:
        with route_attention(seq, lambda *args: seen.append(args)):
            kept, grads = saves_and_grads(model, model.backbone.blocks[0], x)
    else:
        kept, grads = saves_and_grads(model, model.backbone.blocks[0], x)
    return kept, grads, seen


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY_XLSTM, name="tiny-xlstm", seq_length=S)


def test_a_census_run_is_a_training_run():
    built = _built(TINY_XLSTM)
    assert built.config.mode == "train"  # stated "inference" (its class default): census/intake/training.yaml
    assert _built({**TINY_XLSTM, "mode": "train_with_padding"}).config.mode == "train_with_padding"  # a training mode stays


@pytest.mark.parametrize("kernel", ["chunkwise--triton_xl_chunk", "chunkwise--triton_limit_chunk", "parallel--native_autograd"])
def test_a_kernel_the_census_does_not_model_is_refused_before_building(kernel):
    from speccat.census.intake.config import precheck

    config = {**TINY_XLSTM, "chunkwise_kernel": kernel}
    for refuse in (precheck, lambda c: run_census(c, name="x", seq_length=S)):
        with pytest.raises(SpecError) as err:
            refuse(config)
        assert err.value.reason == "unsupported_layer"
        assert f"chunkwise_kernel: {kernel!r} names a kernel the census does not model" in str(err.value)


@pytest.mark.parametrize("seq", [L, S])
def test_the_census_books_what_the_block_keeps_storage_by_storage(seq):
    from speccat.census.measure.probe import probe_layers

    probe = probe_layers(_built(TINY_XLSTM), [0], seq)[0]
    real = signature(_real_block(seq)[0].values())
    # storage by storage: the same storages, each first saved with the same last two dims and dtype
    census = Counter()
    for (_, tail, dtype), n in probe.kept_tails.items():
        census[(tail, dtype)] += n
    assert census == Counter((shape[-2:], dtype) for shape, dtype, _ in real)
    assert sum(probe.saved_storages.values()) == len(real)
    # the same bytes, but for log_sigmoid's buffer (one per head and token), empty on CUDA
    buffer = BF16 * NH * seq
    assert [n for shape, dtype, n in real if shape == (1, NH, seq // L, L) and dtype == torch.bfloat16].count(buffer) == 4
    assert sum(probe.saved_bytes.values()) == sum(n for *_, n in real) - buffer
    # by op, per token: the two stream RMSNorms (fp32 input, fp32 rstd, bf16 output) and the
    # mLSTM's multi-head LayerNorm over the value heads (fp32 input kept by var, fp32 centred
    # input, fp32 rstd per head, bf16 output); the MLP's SiLU input and the output gate's
    # sigmoid output; the MLP's input, SiLU output, up projection's output and down's input
    assert probe.saved_bytes["normOp"] == seq * (2 * (FP32 * H + FP32 + BF16 * H) + 2 * FP32 * V + FP32 * NH + BF16 * V)
    assert probe.saved_bytes["ffAct"] == seq * (BF16 * FF + BF16 * V)
    assert probe.saved_bytes["child:ffn"] == seq * (BF16 * H + 3 * BF16 * FF)
    # the rest is the mLSTM's own code (the mixer's child: attMM once described)
    assert set(probe.saved_bytes) == {"normOp", "ffAct", "child:ffn", "child:mlstm_layer"}


@pytest.mark.parametrize("seq", [L, S])
def test_the_routing_runs_the_chunkwise_mlstm_as_written(seq):
    """One chunk (its scores taken for softmax's, then remade with autograd where the values and
    the normaliser read them) and four: under the census's routing the block computes the same
    gradients and keeps the same storages, and the linear attention it reports is gated (its
    decay computed from the tokens)."""
    kept, grads, _ = _real_block(seq)
    routed, routed_grads, seen = _real_block(seq, route=True)
    # the same storages (the first to save q differs at one chunk: the remade score product runs
    # after q's product with its gate, and keeps q seen another way)
    assert Counter((dtype, n) for _, dtype, n in signature(routed.values())) == Counter((dtype, n) for _, dtype, n in signature(kept.values()))
    assert routed_grads.keys() == grads.keys()
    for name in grads:
        torch.testing.assert_close(routed_grads[name], grads[name], msg=name)
    assert seen and all(gated for *_, gated in seen)
    assert tuple(seen[0][0].shape) == (1, NH, seq // L, L, QK // NH)  # q of every chunk


def test_xlstm_gives_its_kind_counts_and_facts(spec):
    assert spec["layers"] == [{"kind": KIND, "count": 2}]
    assert spec["flavours"][KIND] == {"attention": "linear_eager_gated", "ffn": "dense"}
    assert spec["measured"][KIND]["attention_impl"] == "eager"
    assert (spec["linear_eager_heads"], spec["linear_eager_head_dim"], spec["linear_eager_block"]) == (NH, QK // NH, L)
    ops = spec["ops"][KIND]
    # q, k, v, the output gate, the input and forget gates, out_proj; one recurrence; the stream
    # norms only (the multi-head norm is the mixer's); the MLP's three projections and its SiLU
    assert {op: ops[op] for op in ("attMM", "attBMM", "softmax", "headCast", "linrec", "normOp", "ffMM", "ffAct")} == {
        "attMM": 7, "attBMM": 0, "softmax": 0, "headCast": 0, "linrec": 1, "normOp": 2, "ffMM": 3, "ffAct": 1,
    }  # fmt: skip
    assert spec["intermediate_size"] == FF


def _mixer_by_hand(seq: int) -> dict[str, float]:
    """What the block's mLSTM keeps per token, worked from the config's dims (a = NH heads, q and k
    DK wide, v DV wide, chunks of L tokens, one sequence), by op as the census books it."""
    a, dk, dv, chunks = NH, QK // NH, V // NH, seq // L
    # the 5-D products (1, a, chunks, L, d) fold their leading dims by a view when one chunk stands
    # beside the heads (one sequence): then they copy nothing contiguous
    copies = 1 if chunks > 1 else 0
    # per token: the projections' input; the input and forget gates' tanh soft-cap outputs and the
    # forget gates log-sigmoid reads (3 a); q, k and v (the projections' outputs); the intra-chunk
    # maxima's int64 indices (a) and the two maxima the combined max reads (2 a); the decay matrix,
    # the scores and their product (L per head each); q's gate (a); the normaliser's |q·n + row
    # sums| input and output, its exp(−m) floor and the floored sum (4 a) and the numerator it
    # divides (dv per head); the gate product's normalised factor and out_proj's input (V each)
    per_token = BF16 * H + BF16 * a * (3 + 2 * dk + dv) + 8 * a + BF16 * a * (2 + 3 * L + 1 + 4 + dv) + 2 * BF16 * V
    # the contiguous copies the products make of q and kᵀ, of q times its gate (twice) and of v; or,
    # folded, q times its gate kept as it is
    per_token += BF16 * a * (copies * (4 * dk + dv) + (1 - copies) * dk)
    # per chunk: the loop's chunk-maximum of the gates (int64 index and value), the sum the running
    # max reads and the state decay (a each); k's gate exponentials (L per head) and k times them,
    # copied transposed (dk L per head); the C (dk dv per head, the first chunk's zeros too) and n
    # (dk per head) states each chunk starts from, and their contiguous copies for q's products
    per_chunk = 8 * a + BF16 * a * (3 + L + dk * L + 2 * (dk * dv + dk))
    # folded, the states the products read are views of the whole tensor the loop filled: one
    # chunk's more (the last state's) than the copies would hold
    states = (1 - copies) * BF16 * a * (dk * dv + dk)
    mask = L * L  # one chunk's bool causal mask, per layer
    return {
        "attMM": per_token + (chunks * per_chunk + states + mask) / seq,
        # the multi-head LayerNorm: fp32 input and centred input, the bf16 normalised input its
        # weight multiplies (V each), an fp32 rstd per head
        "normOp": 2 * FP32 * V + BF16 * V + FP32 * a,
        "ffAct": BF16 * V,  # the output gate's Sigmoid keeps its output
    }


@pytest.mark.parametrize("seq", [L, S])
def test_the_gated_mlstm_is_priced_as_worked_by_hand_and_as_a_real_run_keeps(seq):
    """One chunk and four: the bytes worked by hand from the dims are what a real CPU forward and
    backward of the block keeps (but log-sigmoid's CPU buffer), what the census measures, and what
    the records price (records.yaml linear_eager_gated, linear_eager_gated_norm)."""
    mixer = _mixer_by_hand(seq)
    # the rest of the block: the two stream RMSNorms, the MLP's input, up projections and SiLU
    stream = 2 * (FP32 * H + FP32 + BF16 * H) + BF16 * H + 3 * BF16 * FF + BF16 * FF
    by_hand = sum(mixer.values()) + stream
    real = sum(n for *_, n in signature(_real_block(seq)[0].values())) - BF16 * NH * seq  # log-sigmoid's CPU buffer
    assert real == by_hand * seq
    spec = run_census(TINY_XLSTM, name="tiny-xlstm", seq_length=seq)
    measured = spec["measured"][KIND]["bytes_per_token"]
    assert measured["attMM"] == mixer["attMM"]
    assert measured["normOp"] == mixer["normOp"] + 2 * (FP32 * H + FP32 + BF16 * H)
    assert measured["ffAct"] == mixer["ffAct"] + BF16 * FF
    priced, census = priced_vs_measured(spec, seq)[KIND]
    assert census == by_hand
    assert priced == pytest.approx(by_hand, rel=1e-9)


@pytest.mark.parametrize("weight_mode", ["single", "fused"])
@pytest.mark.parametrize("heads", [1, NH])
@pytest.mark.parametrize("seq, batch", [(L, 1), (L, 2), (S, 1), (S, 2)])
def test_the_records_price_what_real_runs_keep_at_one_and_two_sequences(monkeypatch, weight_mode, heads, seq, batch):
    """The 5-D products fold (batch, heads, chunks) into one dim by a view where the strides allow,
    and copy their operands contiguous where not (records.yaml lin_fold, lin_states_fold): one
    head or one chunk of one sequence, or several of each. The census measures one sequence; the
    records' price at a micro-batch of two is checked against real CPU runs of two. With the
    projections fused, q, k and v are views of one output (the output gate's pre-activation in it),
    kept whole (mixer_qkv_width) beside the copies of v's chunks several sequences and heads make
    (mixer_qkv_joined, lin_loop_copy); log-sigmoid's forget gates are a view of both gates'
    soft-cap output, kept whole too: the input gates' share (one per head and token) is not priced."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.pricing import price_layers
    from speccat.catalogue.records.settings import load_settings

    from transformers.models.xlstm import modeling_xlstm

    config = {**TINY_XLSTM, "num_heads": heads, "weight_mode": weight_mode}
    # transformers' fused gate init slices a head's bias against both gates' (a broadcast error):
    # the modules' own init stands in, which keeps the same shapes
    monkeypatch.setattr(modeling_xlstm.xLSTMPreTrainedModel, "_init_weights", lambda self, module: None)
    model = tiny_model({**config, "mode": "train"}, torch.bfloat16)
    x = torch.randn(batch, seq, H, dtype=torch.bfloat16, requires_grad=True)
    kept, _ = saves_and_grads(model, model.backbone.blocks[0], x)
    real = sum(n for *_, n in signature(kept.values())) - BF16 * heads * seq * batch  # log-sigmoid's CPU buffer
    grid = load_settings()
    prices = price_layers(run_census(config, name="tiny-xlstm", seq_length=seq), load_records(), grid.with_settings([grid.setting({"seq_length": seq, "micro_batch": batch})]))
    unpriced = BF16 * heads * seq * batch if weight_mode == "fused" else 0  # the input gates beside the forget gates log-sigmoid keeps
    assert float(prices.total[0, 0, 0]) == pytest.approx(real - unpriced, rel=1e-9)


def test_the_gated_mlstm_states_its_value_heads_and_output_norm(spec):
    """v's head width (twice q's: v_dim_factor 1, qk_dim_factor 0.5) and the multi-head LayerNorm
    inside the mixer: a row per head, two fp32 tensors (upcast and centred input) and one bf16
    (the normalised input its weight multiplies) of the heads' width per call."""
    variants = spec["variants"][KIND]
    assert {v: variants[v] for v in ("mixer_v_head_dim", "mixer_out_norm_rows", "mixer_out_norm_fp32", "mixer_out_norm_half", "mixer_act")} == {
        "mixer_v_head_dim": V // NH, "mixer_out_norm_rows": NH, "mixer_out_norm_fp32": 2, "mixer_out_norm_half": 1, "mixer_act": 1,
    }  # fmt: skip
    # q, k and v each their own projection's output; fused, one projection's output whole (q, k, v
    # and the output gate's pre-activation, V wide)
    assert (variants["mixer_qkv_width"], variants["mixer_qkv_joined"]) == (2 * QK + V, False)
    fused = run_census({**TINY_XLSTM, "weight_mode": "fused"}, name="tiny-xlstm", seq_length=S)
    assert (fused["variants"][KIND]["mixer_qkv_width"], fused["variants"][KIND]["mixer_qkv_joined"]) == (2 * QK + 2 * V, True)


def test_a_constant_decay_is_not_gated():
    """minimax's decay is a constant of the module; xLSTM's is computed from the tokens."""
    from speccat.census.kernels.routing import route_attention

    q, k, v = (torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(3))
    constant, gates = torch.rand(4, 4), torch.rand(4, 4, requires_grad=True)
    for decay, gated in ((constant, False), (gates, True)):
        seen = []
        with route_attention(16, lambda *args: seen.append(args)):
            torch.matmul(torch.matmul(q, k.transpose(-1, -2)) * decay, v)
        assert [args[3] for args in seen] == [gated]


def test_the_registry_default_is_censused_in_training_mode():
    from transformers import xLSTMConfig

    config = {**xLSTMConfig().to_dict(), "model_type": "xlstm"}
    assert config["mode"] == "inference"
    spec = run_census(config, name="xlstm", seq_length=128)
    assert spec["layers"] == [{"kind": KIND, "count": 32}]
    assert (spec["linear_eager_heads"], spec["linear_eager_head_dim"], spec["linear_eager_block"]) == (8, 256, 64)

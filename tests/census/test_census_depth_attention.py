"""Attention run as written (docs/census.md, "Attention run as written"): inkling2's self-attention
with per-query sinks beside its relative position bias, and its block attention residuals, which
attend over the block states stored down the stack's depth. What the census books for every layer
of a tiny inkling2_text, each probed at its place in the stack, against a real CPU forward and
backward of the whole decoder, storage by storage; the kinds and what they keep against the
config, by hand; and every layer of a tiny inkling2_loop_text, whose looped layers run twice.

inkling2 supports neither flash nor SDPA attention (its sinks are one logit per head and query,
which no kernel takes): transformers trains it through its eager code, which is what the census
runs and measures.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from support.layer_runs import saves_by_layer, tiny_model

from speccat.census import run_census

BF16, FP32 = 2, 4
H, HEADS, KV, D, S = 64, 4, 2, 16, 32  # hidden, heads, kv heads, head dim, tokens
LAYERS, BLOCK = 12, 6  # layers, layers per attention-residual block
TINY_INKLING2 = {
    "model_type": "inkling2_text", "hidden_size": H, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
    "num_key_value_heads": KV, "head_dim": D, "swa_num_attention_heads": HEADS, "swa_num_key_value_heads": KV,
    "swa_head_dim": D, "sliding_window_size": 16, "d_rel": 4, "rel_extent": 24, "moe_intermediate_size": 32,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_layers_per_attn_res_block": BLOCK, "log_scaling_n_floor": 8,
    "vocab_size": 128, "unpadded_vocab_size": 128, "eos_token_id": 1, "torch_dtype": "bfloat16",
}  # fmt: skip
# the looped variant: layers 3-8 run twice in each forward, the second pass given messages from the first
TINY_LOOP = {
    **TINY_INKLING2, "model_type": "inkling2_loop_text", "n_layers_per_attn_res_block": 3, "loop_layer_index_start": 3,
    "loop_layer_index_end": 9, "loop_num_passes": 2, "loop_gate_rank": 8,
}  # fmt: skip


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY_INKLING2, name="tiny-inkling2", seq_length=S)


def _kind_of_layer(spec) -> list[str]:
    return [group["kind"] for group in spec["layers"] for _ in range(group["count"])]


def _real_run(config: dict) -> dict[int, list[tuple[tuple[int, ...], torch.dtype, int]]]:
    """A real bf16 forward and backward of the whole tiny decoder on CPU (eager, the model's only
    attention): per layer, (shape, dtype, bytes) of each storage first saved inside it, the
    parameters, buffers, the layer's inputs other than its hidden states (the block states, masks,
    distances, a looped layer's messages) and its output left out, as the census leaves them out;
    a looped layer's passes summed."""
    saved, given, fixed = saves_by_layer(tiny_model(config, torch.bfloat16), S)
    own = {index: {g.untyped_storage()._cdata for g in tensors} for index, tensors in given.items()}
    per_layer: dict[int, list] = {index: [] for index in range(LAYERS)}
    for key, (index, t) in saved.items():
        if key not in fixed and key not in own[index]:
            per_layer[index].append((tuple(t.shape), t.dtype, t.untyped_storage().nbytes()))
    return per_layer


@pytest.fixture(scope="module")
def real():
    return _real_run(TINY_INKLING2)


def _blocks_before(index: int) -> int:
    """Block states stored when layer `index` runs: the decoder appends the input of every block
    boundary (layers 0, BLOCK, 2·BLOCK...) after it ran."""
    return (index + BLOCK - 1) // BLOCK


def _depth_calls(index: int) -> list[tuple[int, int]]:
    """The attentions over the depth layer `index` runs, by hand: (states, learned queries) each.
    Its attention's input (none in layer 0; 3 queries in a full layer, one each for q's, k's and
    v's input) attends over the stored blocks and the partial one; its MLP's input over one more
    in a block boundary, which stores its input first."""
    stored = _blocks_before(index)
    full = (index + 1) % BLOCK == 0
    boundary = index % BLOCK == 0
    calls = [(stored + 1, 3 if full else 1)] if index > 0 else []
    return calls + [(stored + 1 + boundary, 1)]


def test_every_layer_books_what_a_real_run_keeps_at_its_place(spec, real):
    kinds = _kind_of_layer(spec)
    assert len(kinds) == LAYERS
    for index in range(LAYERS):
        booked = spec["measured"][kinds[index]]["bytes_per_token"]
        assert sum(booked.values()) * S == sum(n for *_, n in real[index]), index


@pytest.fixture(scope="module")
def loop_spec():
    return run_census(TINY_LOOP, name="tiny-inkling2-loop", seq_length=S)


def test_every_looped_layer_books_what_a_real_run_keeps_in_its_passes(loop_spec):
    """inkling2_loop_text: the census runs the decoder as it is written, each looped layer in every
    pass; what a layer keeps is what its passes keep together."""
    spec = loop_spec
    real = _real_run(TINY_LOOP)
    kinds = _kind_of_layer(spec)
    assert len(kinds) == LAYERS
    for index in range(LAYERS):
        booked = spec["measured"][kinds[index]]["bytes_per_token"]
        assert sum(booked.values()) * S == sum(n for *_, n in real[index]), index


def _looped(index: int) -> bool:
    return TINY_LOOP["loop_layer_index_start"] <= index < TINY_LOOP["loop_layer_index_end"]


@pytest.fixture(scope="module")
def loop_once():
    """The same model run in one pass (`loop_num_passes` 1): each layer at the same depth, since
    every pass restarts from the states before the loop."""
    return run_census({**TINY_LOOP, "loop_num_passes": 1}, name="tiny-inkling2-loop-once", seq_length=S)


def test_a_looped_layers_passes_are_stated_as_its_first_pass_run_twice(loop_spec, loop_once):
    """The second pass of a looped layer runs every op of the first, in order, and more beside
    them (it mixes the first's messages in through its message gates), so its kind states its
    passes (`recurrent_cycles` 2) and the first pass's facts, what both ran: each fact and op
    count the same as the one-pass model's, and the records price that pass twice (and what the
    second adds in its message gates and norms, worked by hand below). By hand, the
    stream norm calls of the first pass: 2 in a sliding layer (input_layernorm,
    post_attention_layernorm), 4 in a full one (its q, k and v inputs have a norm each), not the
    second pass's 12 (input_layernorm once on each of q's, k's and v's gated inputs in a sliding
    layer, and the two weightless norms of each of the four message gates). The other layers run
    once."""
    later = ("later_child_calls", "later_kept_fp32", "later_kept_half", "later_norm_calls", "later_norm_scaled", "later_norm_inputs")
    kinds, kinds_once = _kind_of_layer(loop_spec), _kind_of_layer(loop_once)
    priced, priced_once = _op_prices(loop_spec, "flash"), _op_prices(loop_once, "flash")
    for index in range(LAYERS):
        kind, kind_once = kinds[index], kinds_once[index]
        passes = 2 if _looped(index) else 1
        full = (index + 1) % BLOCK == 0
        assert loop_spec["variants"][kind]["recurrent_cycles"] == passes, index
        assert loop_spec["ops"][kind]["normOp"] == (4 if full else 2), index
        assert loop_spec["ops"][kind] == loop_once["ops"][kind_once], index
        stated = {name: n for name, n in loop_spec["variants"][kind].items() if name not in later}
        assert {**stated, "recurrent_cycles": 1} == {name: n for name, n in loop_once["variants"][kind_once].items() if name not in later}, index
        for op in set(loop_once["ops"][kind_once]) - {"ffMM", "normOp"}:
            assert priced.get((kind, op), 0.0) == pytest.approx(passes * priced_once.get((kind_once, op), 0.0)), (index, op)


def test_what_each_later_pass_adds_by_hand(loop_spec, loop_once):
    """What a looped layer keeps in each pass after the first beyond what its first keeps (the
    same model run in one pass: `loop_num_passes` 1, each layer at the same depth, since every
    pass restarts from the states before the loop), worked by hand per token, against what the
    census books and a real run keeps. The records price the first pass once a pass
    (`recurrent_cycles`) and this beside it: the message gates' (`later_child_calls` gate calls,
    each keeping `later_kept_fp32` and `later_kept_half` elements a token) and the norms'
    (`later_norm_calls` statistics, `later_norm_scaled` normalised inputs, `later_norm_inputs`
    inputs beyond the first pass's). Its four message gates (q's, k's, v's and the MLP's input, `(1 - forget) * hidden +
    message_gate * message`) each keep three fp32 rows of the hidden width (the two tanh outputs
    and 1 - forget), their down projection's bf16 input (the normalised hidden states and message
    side by side: 2·hidden) and their forget and message projections' fp32 input (the gate rank),
    all booked ffMM, and an fp32 statistic for each of their two weightless norms (normOp). The
    norms after them read the gates' outputs, their own inputs, where the first pass's read the
    depth attentions' outputs, which the gates' norms keep now (normOp): in a sliding layer the
    attention's input norm runs three times, on q's, k's and v's gated inputs (two more calls,
    an fp32 input, normalised input and statistic each), and the gates keep the two depth
    attentions' outputs (fp32, hidden wide each); in a full one, the q, k and v norms keep their
    own inputs in both passes, and the gates keep the attention input's three outputs, one fp32
    storage (3·hidden), and the MLP input's (hidden). The message itself is the layer's input
    (the decoder's `message_input` makes it), not the layer's to keep."""
    rank = TINY_LOOP["loop_gate_rank"]
    single = loop_once
    real_twice, real_once = _real_run(TINY_LOOP), _real_run({**TINY_LOOP, "loop_num_passes": 1})
    kinds, kinds_once = _kind_of_layer(loop_spec), _kind_of_layer(single)
    gates = 4 * (3 * FP32 * H + BF16 * 2 * H + FP32 * rank)
    priced, priced_once = _op_prices(loop_spec, "flash"), _op_prices(single, "flash")
    for index in range(LAYERS):
        full = (index + 1) % BLOCK == 0
        if not _looped(index):
            later = {}
        elif full:
            later = {"ffMM": gates, "normOp": 4 * 2 * FP32 + FP32 * (3 * H + H)}
        else:
            later = {"ffMM": gates, "normOp": 4 * 2 * FP32 + 2 * (2 * FP32 * H + FP32) + FP32 * (H + H)}
        twice, first = loop_spec["measured"][kinds[index]]["bytes_per_token"], single["measured"][kinds_once[index]]["bytes_per_token"]
        for op in twice:
            assert twice[op] - (2 if _looped(index) else 1) * first[op] == pytest.approx(later.get(op, 0)), (index, op)
        # the gates' facts by hand: 4 gate calls in the second pass, each keeping 3 fp32 rows of
        # the hidden width and the rank-wide fp32 input, and the 2·hidden bf16 input of down_proj
        stated = loop_spec["variants"][kinds[index]]
        facts = (4, 3 * H + rank, 2 * H) if _looped(index) else (0, 0, 0)
        assert (stated["later_child_calls"], stated["later_kept_fp32"], stated["later_kept_half"]) == facts, index
        # the norms' by hand: 8 gate norm calls (+2 of the sliding layer's attention input norm on
        # k's and v's gated inputs, which hold a weight), and 4 inputs beyond the first pass's
        # two (the gates' four outputs), the message each gate's norm reads being the layer's input
        norms = ((8 if full else 10), (0 if full else 2), 4) if _looped(index) else (0, 0, 0)
        assert (stated["later_norm_calls"], stated["later_norm_scaled"], stated["later_norm_inputs"]) == norms, index
        for op in ("ffMM", "normOp"):
            twice_priced, once_priced = priced[kinds[index], op], priced_once[kinds_once[index], op]
            assert twice_priced == pytest.approx((2 if _looped(index) else 1) * once_priced + later.get(op, 0)), (index, op)
        kept_twice, kept_once = (sum(n for *_, n in real[index]) for real in (real_twice, real_once))
        assert kept_twice - (2 if _looped(index) else 1) * kept_once == sum(later.values()) * S, index


def test_the_kinds_follow_the_depth_and_the_layer_types(spec):
    # by hand: a block boundary (layer 0, 6) stores one more state for its MLP's depth attention
    # and layer 0 has no attention input; layers 1-4 and 7-10 are sliding, 5 and 11 full
    # ("hybrid" every sixth layer); each block deeper keeps more: no two groups share a kind
    groups = [(group["kind"], group["count"]) for group in spec["layers"]]
    assert [count for _, count in groups] == [1, 4, 1, 1, 4, 1]
    assert len({kind for kind, _ in groups}) == 6
    assert [spec["flavours"][kind]["attention"] for kind, _ in groups] == ["full"] * 6


def test_the_depth_attention_is_stated_booked_and_priced(spec):
    """Each attention over the depth with n states and m queries keeps, per token, the fp32 stack
    (its norm's input: n·hidden·4) and the norm's fp32 rsqrt (n·4), booked normOp; the normalised
    stack, its keys and values (n·hidden·4), attBMM; the fp32 probabilities (m·n·4), softmax.
    Beside the self-attention's (q, k, v at every head; the softmax over s keys and the sink) and
    the stream norms' (an fp32 input and normalised input and an rsqrt each: 2 in a sliding
    layer, 4 in a full one, whose q, k and v inputs have a norm each), and the weightless norm on
    v (fp32 values and an rsqrt per kv head): the census books them so and the records price them
    so, by hand, at every layer's depth; nothing is left to `other`."""
    kinds = _kind_of_layer(spec)
    priced = _op_prices(spec, "flash")
    for index in range(LAYERS):
        kind = kinds[index]
        calls = _depth_calls(index)
        states, scores = sum(n for n, _ in calls), sum(n * m for n, m in calls)
        assert (spec["variants"][kind]["depth_states"], spec["variants"][kind]["depth_scores"]) == (states, scores), index
        stream_norms = 4 if (index + 1) % BLOCK == 0 else 2
        by_hand = {
            "normOp": FP32 * (H + 1) * states + stream_norms * FP32 * (2 * H + 1) + FP32 * KV * (D + 1),
            "attBMM": FP32 * H * states + 3 * BF16 * HEADS * D,
            "softmax": FP32 * scores + FP32 * HEADS * (S + 1),
        }
        booked = spec["measured"][kind]["bytes_per_token"]
        assert booked.get("other", 0) == 0, index
        for op, per_token in by_hand.items():
            assert booked[op] == pytest.approx(per_token), (index, op)
            assert priced[kind, op] == pytest.approx(per_token), (index, op)


def test_the_self_attention_keeps_its_eager_probabilities(spec, real):
    """The eager code keeps q, k and v repeated to every head (attBMM), the fp32 softmax over the
    keys and the sink (s + 1 per query: softmax), and the bf16 probabilities the value product
    reads, its cast (headCast)."""
    kinds = _kind_of_layer(spec)
    for index in (1, 5):
        kept = Counter(real[index])
        probabilities = ((1, HEADS, S, S + 1), torch.float32, FP32 * HEADS * S * (S + 1))
        assert kept[probabilities] == 1
        assert kept[((HEADS, S, S), torch.bfloat16, BF16 * HEADS * S * S)] == 1
        calls = _depth_calls(index)  # the attentions over the depth, booked beside it
        booked = spec["measured"][kinds[index]]["bytes_per_token"]
        assert booked["softmax"] * S == probabilities[2] + FP32 * S * sum(n * m for n, m in calls)
        assert booked["attBMM"] * S == 3 * BF16 * HEADS * S * D + FP32 * H * S * sum(n for n, _ in calls)
        assert booked["headCast"] * S == BF16 * HEADS * S * S
        assert spec["measured"][kinds[index]]["attention_impl"] == "eager"


def test_the_eager_attention_is_stated_and_priced_as_it_ran(spec):
    """The kinds state that their attention ran as the model's eager code, over one sink column
    beside the keys, and the records price its ops as eager attention at every attention kernel
    a setting names (the model supports none but its eager code), worked by hand per token: q, k
    and v at every head (bf16, 3·heads·d), the fp32 softmax output over s keys and the sink,
    heads·(s + 1)·4, and its bf16 cast, heads·s·2."""
    kinds = _kind_of_layer(spec)
    for kernel in ("flash", "efficient", "math", "auto"):
        priced = _op_prices(spec, kernel)
        for index in range(LAYERS):
            kind, calls = kinds[index], _depth_calls(index)
            assert spec["variants"][kind]["attention_as_written"] is True
            assert spec["variants"][kind]["score_sink_columns"] == 1
            depth = {"attBMM": FP32 * H * sum(n for n, _ in calls), "softmax": FP32 * sum(n * m for n, m in calls), "headCast": 0}
            by_hand = {"attBMM": 3 * BF16 * HEADS * D, "softmax": FP32 * HEADS * (S + 1), "headCast": BF16 * HEADS * S}
            for op, per_token in by_hand.items():
                assert priced[kind, op] - depth[op] == pytest.approx(per_token), (kernel, index, op)
                assert spec["measured"][kind]["bytes_per_token"][op] - depth[op] == pytest.approx(per_token), (index, op)


def test_the_attention_prices_what_its_clips_and_dynamic_convs_keep(spec, real):
    """What the attention's own code keeps beside the kernel, worked by hand per token and stated
    per head: q's L2 clip (no norm module) keeps its fp32 upcast and its product with the learned
    scale (the fp32 cast of that scale, heads × d, once a layer call) and four fp32 statistics per
    head (the norm, the norm plus eps, the quotient the clamp keeps, the clamped factor); the
    relative states' clip likewise over d_rel; k's clip its fp32 upcast and four statistics per kv
    head; the relative states themselves (bf16, d_rel a head), which the product with the distance
    profiles keeps; the bias's int64 gather index and its bool mask, one s × t table each. In a full
    layer also the k and v projections' own inputs (bf16, hidden wide: their own input norms'
    outputs) and the dynamic short convs' fp32 windows and per-token weights (kv · d ·
    conv_kernel each, for k and for v). The census states them so, the records price them so,
    and the real run keeps them so; only the two log scales of a full layer (fp32, one a token,
    8 bytes) are priced by none. What is priced includes the output gate's product taken on the
    attention's output cast to fp32 (attn_gate_factor_fp32), which keeps that copy."""
    d_rel, conv_kernel = TINY_INKLING2["d_rel"], 4
    kinds = _kind_of_layer(spec)
    priced = _op_prices(spec, "flash")
    for index in range(LAYERS):
        kind, full = kinds[index], (index + 1) % BLOCK == 0
        facts = spec["variants"][kind]
        assert facts["attn_gate_factor_fp32"] is True
        # per query head: q's clip (upcast, product, 4 statistics) and the relative states' clip
        assert facts["attn_head_fp32"] == (2 * D + 4) + (2 * d_rel + 4), index
        # per kv head: k's clip (upcast, 4 statistics); a full layer's windows and weights for k and v
        assert facts["attn_kv_head_fp32"] == D + 4 + (2 * 2 * D * conv_kernel if full else 0), index
        assert facts["attn_head_half"] == d_rel, index
        assert facts["attn_head_param_fp32"] == D + d_rel, index
        assert facts["attn_inputs_extra"] == (2 if full else 0), index
        assert facts["score_bias_tables"] == 8 + 1, index
        measured = spec["measured"][kind]["bytes_per_token"]["attMM"]
        log_scales = 2 * FP32 if full else 0
        assert priced[kind, "attMM"] == pytest.approx(measured - log_scales), index
    for index in (1, 5):  # a sliding and a full layer of the real run, storage by storage
        kept, full = Counter(real[index]), index == 5
        clip_rows = {D: 2, d_rel: 2, 1: 8}  # per query head: q's and the relative states' clips
        for width, storages in clip_rows.items():
            assert kept[((1, S, HEADS, width), torch.float32, FP32 * S * HEADS * width)] == storages, (index, width)
        for width in (D, d_rel):  # the scales' fp32 casts, once a call
            assert kept[((HEADS, width), torch.float32, FP32 * HEADS * width)] == 1, (index, width)
        # k's upcast, and v's: the weightless norm on v keeps its fp32 input (normOp's)
        assert kept[((1, S, KV, D), torch.float32, FP32 * S * KV * D)] == 2, index
        assert kept[((S * HEADS, d_rel), torch.bfloat16, BF16 * S * HEADS * d_rel)] == 1, index
        assert kept[((S, S), torch.bool, S * S)] == 1, index
        windows = ((1, S, KV, D, conv_kernel), torch.float32, FP32 * S * KV * D * conv_kernel)
        assert kept[windows] == (4 if full else 0), index
        assert kept[((1, S, 1, 1), torch.float32, FP32 * S)] == (2 if full else 0), index
    # a full layer's projections keep two more inputs of the hidden width than a sliding one's
    hidden_inputs = [Counter(real[index])[((S, H), torch.bfloat16, BF16 * S * H)] for index in (1, 5)]
    assert hidden_inputs[1] - hidden_inputs[0] == 2


def test_the_experts_keep_their_bf16_product_beside_the_fp32_activation(spec):
    """The MoE block, worked by hand per token: the router's fp32 input, its sigmoid scores over
    the experts, the chosen indices (int64), the sum and the gathered weights (fp32); per chosen
    slot, the gathered input, the product cast back to bf16 that down keeps (the activation is
    the experts' own code, act_inline, run in fp32: six fp32 tensors of the expert width), the
    fp32 routing weight, down's output and three int64 indices. Priced so; measured so beside
    the int32 count of tokens per expert, one per layer (unpriced)."""
    experts, chosen, width = TINY_INKLING2["n_routed_experts"], TINY_INKLING2["num_experts_per_tok"], TINY_INKLING2["moe_intermediate_size"]
    router = FP32 * H + FP32 * experts + 8 * chosen + FP32 * (1 + chosen)
    per_slot = BF16 * H + BF16 * width + FP32 + BF16 * H + 3 * 8 + 6 * FP32 * width
    priced = _op_prices(spec, "flash")
    for kind in spec["measured"]:
        booked = spec["measured"][kind]["bytes_per_token"]
        assert spec["variants"][kind]["act_inline"] is True and spec["variants"][kind]["experts_act_fp32"] == 6
        assert priced[kind, "ffMM"] + priced[kind, "ffAct"] == pytest.approx(router + chosen * per_slot), kind
        assert booked["ffMM"] + booked["ffAct"] == pytest.approx(router + chosen * per_slot + 4 * experts / S), kind


def _op_prices(spec, kernel: str) -> dict[tuple[str, str], float]:
    """(kind, op) -> the records' bytes per token at the census's setting with `kernel` named."""
    import dataclasses

    from speccat.catalogue.records.opsplit import op_prices
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.settings import load_settings

    records, grid = load_records(), load_settings()
    at = grid.setting({"seq_length": S, "micro_batch": 1, "tp": 1, "cp": 1, "sequence_parallel": False, "attention_kernel": kernel})
    priced: dict[tuple[str, str], float] = {}
    for row in op_prices(spec, records, dataclasses.replace(grid, curve=(at,))):
        priced[row["kind"], row["op"]] = priced.get((row["kind"], row["op"]), 0.0) + row["kept_bytes"] / S
    return priced


def test_the_attention_dims_and_counts_are_the_self_attention(spec):
    assert (spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"]) == (HEADS, KV, D)
    for kind in spec["ops"]:
        ops = spec["ops"][kind]
        assert (ops["attBMM"], ops["softmax"], ops["linrec"]) == (2, 1, 0)

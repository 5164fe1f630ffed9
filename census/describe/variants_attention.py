"""The variant facts of a layer's attention (docs/census.md, "Variant facts"): how its kernel was
called (q's layout, v and k as views of a projection, sparse indices, appended keys, k and v
shared or borrowed, dropout, a score bias), what its own code keeps beside a score bias or a
causal conv or of MLA's latents, its QK- and V-norms, and the attention modules the layer calls. Each reader is registered with `@variant`
(census/describe/variant_registry.py); its docstring is what docs/census.md's table says it
is read from.
"""

from __future__ import annotations

import torch

from speccat.census.describe.attention_facts import AttentionFacts
from speccat.census.describe.layer_roles import HALF
from speccat.census.describe.stream_router_qk import half_qk_norm, stream_code_bytes, torch_conv_bytes
from speccat.census.describe.variant_registry import variant
from speccat.census.measure.inner_norms import AFTER_ATTENTION
from speccat.census.structure.kernel_registry import KernelCall
from speccat.census.structure.predicates import QK_NORM_NAME, is_norm, is_projection


@variant
def q_heads_major(view: AttentionFacts, top_k: int | None) -> bool:
    """The attention kernel's arguments: q's strides, heads-major in any call."""
    return any(k.heads_major for k in view.attention_kernels())


@variant
def v_in_projection(view: AttentionFacts, top_k: int | None) -> bool:
    """The attention kernel's arguments: v a view into a larger storage (not for MLA's attention)."""
    return not view.mla() and any(k.v_is_view for k in view.attention_kernels())


@variant
def qk_in_projection(view: AttentionFacts, top_k: int | None) -> bool:
    """The attention kernel's arguments: v a view into a larger storage and q and k views of v's
    storage too (not for MLA's attention)."""
    return not view.mla() and any(k.v_is_view and k.qk_share_v for k in view.attention_kernels())


@variant
def index_topk(view: AttentionFacts, top_k: int | None) -> int:
    """The attention kernel's arguments: the sparse indices' width (the widest of the layer's calls), 0 without them."""
    return max((k.index_topk for k in view.attention_kernels()), default=0)


@variant
def index_borrowed(view: AttentionFacts, top_k: int | None) -> bool:
    """The attention kernel's arguments: sparse indices whose storage another probed layer made
    (census/kernels/flash_attention.py: the decoder hands them on from an earlier layer)."""
    return any(k.index_borrowed for k in view.attention_kernels())


@variant
def keys_appended_every(view: AttentionFacts, top_k: int | None) -> int:
    """The attention kernel's arguments: the queries over the keys beyond them (s / (t − s) for t
    keys, 0 when t = s; "Appended keys")."""
    return view.keys_appended_every()


@variant
def kv_same(view: AttentionFacts, top_k: int | None) -> bool:
    """The attention kernel's arguments: k and v one tensor (same storage, offset, shape and strides)."""
    return any(k.kv_same for k in view.attention_kernels())


@variant
def kv_shared(view: AttentionFacts, top_k: int | None) -> bool:
    """The attention kernel's k is a storage another probed layer made: the layer reads the keys
    and values an earlier layer stored (see "Layers reading another layer's keys and values")."""
    return any(k.kv_borrowed for k in view.attention_kernels())


@variant
def attention_dropout(view: AttentionFacts, top_k: int | None) -> bool:
    """The attention kernel's arguments: a dropout probability above 0."""
    return any(k.dropout > 0 for k in view.attention_kernels())


@variant
def attention_window(view: AttentionFacts, top_k: int | None) -> int:
    """The attention kernel's arguments: the sliding window (the widest of the layer's calls), 0 without one."""
    return max((k.window for k in view.attention_kernels()), default=0)


@variant
def score_bias_bytes(view: AttentionFacts, top_k: int | None) -> int:
    """The attention kernel's arguments: an additive score bias's element bytes, 0 without one."""
    return max((k.bias_bytes for k in view.attention_kernels()), default=0)


def _biased_kernel(view: AttentionFacts) -> KernelCall | None:
    """The first attention call given an additive score bias: a kernel that keeps it, or eager code that adds it."""
    return next((k for k in view.attention_kernels() if k.bias_bytes or k.bias_given), None)


@variant
def score_bias_source(view: AttentionFacts, top_k: int | None) -> int:
    """With a score bias (kept by the kernel or added by eager code): a gather outside the kernel, in an attention child, whose output has the
    scores' last two dims (s, t): its source's bytes per query head and token (inkling's relative
    logits: one per head and distance, rel_extent or the window wide, which the gather keeps). 0
    without a score bias."""
    kernel = _biased_kernel(view)
    if kernel is None:
        return 0
    s, t, heads = kernel["q"][2], kernel["k"][2], kernel["q"][1]
    sources = [
        (source, nbytes)
        for child, source, nbytes, out in view.probe.score_gathers
        if child in view.mixer_children and tuple(out[-2:]) == (s, t) and len(source) == 4 and source[2] == s
    ]
    return view.per_call(sum(source[1] * source[3] * nbytes // heads for source, nbytes in sources))


@variant
def score_bias_tables(view: AttentionFacts, top_k: int | None) -> int:
    """With a score bias (kept by the kernel or added by eager code): the storages booked to an attention child that were first saved 4-D, or
    2-D holding no floats, and hold one s × s matrix only (shared by batch and heads: inkling's gather index, int64,
    and the masked_fill mask of distances outside the bias's extent, bool, which inkling2's
    masked_fill keeps as the (s, t) matrix itself): their element bytes summed. 0 without a score
    bias."""
    kernel = _biased_kernel(view)
    if kernel is None or kernel["q"][2] != kernel["k"][2]:
        return 0
    ops = {f"child:{c}" for c in view.mixer_children}
    return view.per_call(sum(dtype.itemsize * n for (op, rows, dtype), n in view.probe.kept_square.items() if op in ops and rows == kernel["q"][2]))


def _beside_attention_convs(view: AttentionFacts, in_attention: bool) -> int:
    """Bytes per token of the inputs causal conv1d calls keep in a layer whose only other kernel is
    attention: in the attention kernel's child (`in_attention`) or in the layer's other children.
    0 in a layer whose mixer is the conv or runs a kernel of its own (its conv is priced with it).
    Per call of the layer (`recurrent_cycles`)."""
    kinds = {k.kind for k in view.probe.kernels}
    if "attention" not in kinds or kinds - {"attention", "conv"}:
        return 0
    homes = {k.child for k in view.attention_kernels()}
    convs = [k for k in view.probe.kernels if k.kind == "conv" and (k.child in homes) == in_attention]
    return view.per_call(sum(k["x"][1] * k.in_bytes for k in convs))


@variant
def attention_conv_bytes(view: AttentionFacts, top_k: int | None) -> int:
    """In a layer whose kernels are attention and causal conv1d only: each conv call's channels ×
    its input's element bytes, in the attention kernel's child (inkling's short convs on k and v,
    fp32: inside the tensor-parallel region), and each kept input of torch's own convolutions
    there, its module's input channels × its element bytes (zaya's depthwise and grouped Conv1d
    over q and k: census/describe/stream_router_qk.py)."""
    return _beside_attention_convs(view, in_attention=True) + view.per_call(torch_conv_bytes(view))


@variant
def stream_conv_bytes(view: AttentionFacts, top_k: int | None) -> int:
    """In a layer whose kernels are attention and causal conv1d only: each conv call's channels ×
    its input's element bytes, in the layer's other children (inkling's short convs on the
    attention's and the MLP's outputs, fp32: the hidden stream)."""
    return _beside_attention_convs(view, in_attention=False)


@variant
def qk_norm_per_head(view: AttentionFacts, top_k: int | None) -> bool:
    """QK-norm weights (a `q_norm`/`k_norm`-named norm held by the attention module) of one head's
    width, or such a norm with no weight whose ops ran on rows one head wide (nanochat's): each
    head normalised on its own."""
    kernels = view.attention_kernels()
    if not kernels:
        return False
    head_dim = kernels[0]["q"][3]

    def per_head(child: str, name: str, norm) -> bool:
        if getattr(norm, "weight", None) is not None:
            return norm.weight.shape[-1] == head_dim
        return any(op.out_last == head_dim for op in view.probe.norm_ops.get(f"{child}.{name}", []))

    return any(
        QK_NORM_NAME.match(n) and is_norm(m) and per_head(child, n, m)
        for child in view.mixer_children
        for n, m in view.module(child).named_children()
    )


@variant
def qk_norm_weightless(view: AttentionFacts, top_k: int | None) -> bool:
    """A norm with no parameters ran in the attention twice per attention kernel call (on q and on
    k) on rows one head wide and cast a half input to fp32 first (llama4's L2 QK-norm): it keeps
    that fp32 copy and a statistic per head, and no weighted product; false for llama4's NoPE
    layers, which skip it (gemma-4's weightless v_norm runs once per call, on v)."""
    kernels = view.attention_kernels()
    if not kernels:
        return False
    head_dim = kernels[0]["q"][3]
    for path, seen in view.probe.norm_ops.items():
        module = view.module(path)
        if view.part(path) not in view.mixer_children or any(True for _ in module.parameters()):
            continue
        if view.probe.norm_calls[path] != 2 * len(kernels):
            continue
        upcast = any(op.name == "_to_copy" and op.out_dtype == torch.float32 and op.in_dtype in HALF for op in seen)
        if upcast and any(op.out_last == head_dim for op in seen):
            return True
    return False


def _q_norms(view: AttentionFacts) -> list[str]:
    """The norm with no parameters in the attention, no QK-norm (`qk_norm`), that ran once per
    attention kernel call on rows one q head wide, as many a token as q has heads
    (LayerProbe.norm_rows), and cast a half input to fp32 first: a weightless norm of each q head
    (deepseek_v4's q_b_norm); none where two norms do (q's and k's, as many heads)."""
    kernels = view.attention_kernels()
    if not kernels:
        return []
    heads, head_dim = kernels[0]["q"][1], kernels[0]["q"][3]
    found = []
    for path, seen in view.probe.norm_ops.items():
        calls = view.probe.norm_calls[path]
        if view.part(path) not in view.mixer_children or any(True for _ in view.module(path).parameters()):
            continue
        if QK_NORM_NAME.match(path.rsplit(".", 1)[-1]):
            continue  # the attention's QK-norm (`qk_norm`: nanochat's weightless one per head, priced so)
        if calls != len(kernels) or view.probe.norm_rows[path] != heads * calls:
            continue
        upcast = any(op.name == "_to_copy" and op.out_dtype == torch.float32 and op.in_dtype in HALF for op in seen)
        if upcast and any(op.out_last == head_dim for op in seen):
            found.append(path)
    return found if len(found) == 1 else []  # two alike (q's and k's, as many heads): no norm of q alone


@variant
def q_norm_weightless(view: AttentionFacts, top_k: int | None) -> bool:
    """A norm with no parameters ran in the attention once per attention kernel call, on as many
    rows a token as q has heads, each one head wide (LayerProbe.norm_rows), and cast a half input
    to fp32 first (deepseek_v4's q_b_norm): it keeps that fp32 copy and a statistic per head, no
    weighted product (llama4's norm of q and k, twice a call, is `qk_norm_weightless`)."""
    return bool(_q_norms(view))


@variant
def q_norm_product_half(view: AttentionFacts, top_k: int | None) -> bool:
    """Of such a norm: its ops cast an fp32 statistic (one element a row) back to a half dtype and
    took a product of the head's width in a half dtype: the normalised q is its half input times
    that cast (deepseek_v4's x * rsqrt(...).to(x.dtype)), and the product keeps both."""
    for path in _q_norms(view):
        seen = view.probe.norm_ops[path]
        cast = any(op.name == "_to_copy" and op.in_dtype == torch.float32 and op.out_dtype in HALF and op.out_last == 1 for op in seen)
        if cast and any(op.name == "mul" and op.out_dtype in HALF and op.out_last > 1 for op in seen):
            return True
    return False


@variant
def attn_out_lowrank_width(view: AttentionFacts, top_k: int | None) -> int:
    """The input widths of the attention's output projections (LayerProbe.output_projections) that
    read another output projection's output through elementwise ops alone
    (LayerProbe.projections_fed), summed over their calls, per layer call: deepseek_v4's o_b_proj
    reads o_a_proj's grouped low-rank output (o_groups · o_lora_rank, 8192), copied contiguous;
    0 for a single output projection."""
    outputs = set(view.probe.output_projections)
    widths = [view.module(path).weight.shape[-1] for path in view.probe.output_projections if view.probe.projections_fed.get(path) in outputs - {path}]
    return view.per_call(int(sum(widths)))


def _latent_norms(view: AttentionFacts) -> list[str]:
    """The norms holding a weight that ran in an attention kernel's child on one row a token each
    call (LayerProbe.norm_rows), neither on the hidden stream nor after the kernel (an output
    norm: LayerProbe.inner_norms), nor the attention's QK-norms (`qk_norm`), in an attention that
    is no MLA (whose latent norms the records price from its ranks): norms of a latent or of a
    single shared key-value head (deepseek_v4's q_a_norm and kv_norm)."""
    if view.mla():
        return []
    children = {k.child for k in view.attention_kernels()}
    skipped = {path for path, _ in view.probe.stream_norms} | {path for path, *_ in view.probe.inner_norms}
    found = []
    for path, calls in view.probe.norm_calls.items():
        module = view.module(path)
        if view.part(path) not in children or path in skipped or QK_NORM_NAME.match(path.rsplit(".", 1)[-1]):
            continue
        if getattr(module, "weight", None) is not None and calls and view.probe.norm_rows[path] == calls:
            found.append(path)
    return found


@variant
def attn_norm_width(view: AttentionFacts, top_k: int | None) -> int:
    """The summed widths (their weights') of the norms of latents or of a single shared key-value
    head that ran in the attention before its kernel, one row a token (LayerProbe.norm_rows), no
    MLA's, no QK-norm, per layer call: deepseek_v4's q_a_norm (q_lora_rank, 1024) and kv_norm
    (head_dim, 512), 1536; 0 without."""
    widths = [view.module(path).weight.shape[-1] * view.probe.norm_calls[path] for path in _latent_norms(view)]
    return view.per_call(int(sum(widths)))


@variant
def attn_norms(view: AttentionFacts, top_k: int | None) -> int:
    """The calls of those norms per layer call (deepseek_v4's q_a_norm and kv_norm: 2); 0 without."""
    return view.per_call(sum(view.probe.norm_calls[path] for path in _latent_norms(view)))


@variant
def attn_norm_out_width(view: AttentionFacts, top_k: int | None) -> int:
    """Of those norms, the summed widths of the ones whose output a projection of the attention
    read (LayerProbe.norm_outputs, projection_inputs), which it keeps (deepseek_v4's q_a_norm's,
    read by q_b_proj: 1024; kv_norm's reaches the kernel through the rotation, not a projection)."""
    widths = []
    for path in _latent_norms(view):
        read = view.probe.projection_inputs.get(view.part(path), set())
        if view.probe.norm_outputs.get(path, set()) & read:
            widths.append(view.module(path).weight.shape[-1] * view.probe.norm_calls[path])
    return view.per_call(int(sum(widths)))


@variant
def v_norm_weightless(view: AttentionFacts, top_k: int | None) -> bool:
    """A norm with no parameters in the attention whose output is the v an attention kernel was
    given (gemma-4's `v_norm`, RMS over each value head in fp32): its fp32 input and its
    statistics per head, no weighted product."""
    return any(
        view.part(path) in view.mixer_children
        and not any(True for _ in view.module(path).parameters())
        and bool(outputs & view.probe.value_storages)
        for path, outputs in view.probe.norm_outputs.items()
    )


@variant
def attn_gate_width(view: AttentionFacts, top_k: int | None) -> int:
    """A product, after the attention kernel in its child, that a projection of that child reads,
    of a factor made from a projection's output by elementwise ops alone (views, casts, copies,
    an activation): that factor's elements per query head and token; 0 without one."""
    return view.output_gate().width


@variant
def attn_gate_kept(view: AttentionFacts, top_k: int | None) -> int:
    """With such a gate: the elements per query head and token of the outputs of its elementwise
    ops (and of its projection) that backward keeps, booked to the attention's child, in a half
    dtype (the compute dtype); 0 without one."""
    return view.output_gate().kept


@variant
def attn_gate_kept_fp32(view: AttentionFacts, top_k: int | None) -> int:
    """With such a gate: those elements kept in fp32 (the fp32 cast a softplus in fp32 reads); 0 without one."""
    return view.output_gate().kept_fp32


@variant
def attn_gate_before_copy(view: AttentionFacts, top_k: int | None) -> bool:
    """With such a gate: the product's other factor was not contiguous, a view of the attention
    kernel's output as the kernel laid it out (heads-major: dots3_note's, bailing_hybrid's), so
    the product is laid out so too and the token-major copy o_proj reads is made from it."""
    return view.output_gate().before_copy


@variant
def qkv_kept(view: AttentionFacts, top_k: int | None) -> int:
    """The storages booked to the attention kernel's child whose last dim is q's, k's and v's
    widths together (heads × d + kv heads × (d + dv), from the kernel's arguments), in a half
    dtype: the fused q, k, v projection's output kept by the attention's own code beside what
    the kernel keeps (dbrx's clamp of Wqkv's output, clip_qkv, keeps its input: 1); 0 for MLA's
    attention and the others."""
    kernels = [k for k in view.attention_kernels() if k.child]
    if not kernels or view.mla():
        return 0
    q, k, v = kernels[0]["q"], kernels[0]["k"], kernels[0]["v"]
    width = q[1] * q[3] + k[1] * k[3] + v[1] * v[3]
    children = {f"child:{call.child}" for call in kernels}
    return sum(n for (op, dims, dtype), n in view.probe.kept_tails.items() if op in children and dims[-1:] == (width,) and dtype in HALF)


@variant
def attn_out_norm(view: AttentionFacts, top_k: int | None) -> int:
    """Norm calls in the attention kernel's child after the kernel and before the child's next
    projection, the output projection (census/measure/inner_norms.py), over the heads' outputs
    (q's heads times v's head width, from the kernel's arguments) together or in groups of whole
    heads (`attn_out_norm_rows`), per attention over its own q and k (calls reading an earlier
    call's, `qk_reused`, are one attention): bitnet's `attn_sub_norm`, 1; diffllama's group
    norm over head pairs after its two calls, 1; 0 without one. They are no stream norms,
    whatever their width."""
    norms = _attention_out_norms(view)
    return len(norms) // max(len(view.attention_kernels()) - qk_reused(view, top_k), 1) if norms else 0


@variant
def attn_out_norm_rows(view: AttentionFacts, top_k: int | None) -> int:
    """The rows each of those norms (`attn_out_norm`) normalises per token: the heads' outputs
    over its width (the width its input's last dim): 1 over all heads together (bitnet's), 16
    for diffllama's group norm over pairs of its 32 heads; 0 without one."""
    norms = _attention_out_norms(view)
    return norms[0][1] if norms else 0


@variant
def attn_out_norm_weightless(view: AttentionFacts, top_k: int | None) -> bool:
    """Those norms (`attn_out_norm`) hold no parameters (diffllama's RMSNorm with no affine
    weight): each keeps its input and statistics, no normalised input for a weight to multiply."""
    return any(not any(True for _ in view.module(path).parameters()) for path, _ in _attention_out_norms(view))


def _attention_out_norms(view: AttentionFacts) -> list[tuple[str, int]]:
    """The norm calls after an attention kernel and before its output projection whose width is
    the heads' outputs or a whole number of heads dividing them: (the norm's path, the rows it
    normalises per token)."""
    kernels = view.attention_kernels()
    if not kernels:
        return []
    outputs = {k["q"][1] * k["v"][3]: k["v"][3] for k in kernels}  # the heads' outputs -> one head's width
    return [
        (path, whole // width)
        for path, _, follows, width in view.probe.inner_norms
        for whole, head in outputs.items()
        if follows == AFTER_ATTENTION and width and width % head == 0 and whole % width == 0
    ]


@variant
def qk_reused(view: AttentionFacts, top_k: int | None) -> int:
    """The attention kernel's arguments: calls given the very q and k (their storages) an earlier
    call of the layer was given, which the kernel keeps once (census/measure/repeated_attention.py:
    diffllama's second call, over the other half of v, 1); 0 where each call has its own."""
    seen: set[tuple[int, ...]] = set()
    reused = 0
    for query_key in view.probe.query_key_storages:
        reused += query_key in seen
        seen.add(query_key)
    return reused


@variant
def attn_out_joined(view: AttentionFacts, top_k: int | None) -> int:
    """The attention kernels' outputs held in joins of them (a torch.cat of the calls' outputs)
    that an op after the kernels keeps (census/measure/repeated_attention.py): diffllama's
    product of λ with one half of its two calls' joined outputs keeps the join, 2; 0 where no
    join is kept."""
    return view.probe.joined_outputs_kept


@variant
def stream_code_attn_bytes(view: AttentionFacts, top_k: int | None) -> int:
    """The storages of the hidden width kept by code on the stream in a module of its own (a
    child holding per-channel parameters only: census/measure/stream_code.py) that ran after an
    attention child, booked after it: their element bytes per token and hidden channel (zaya's
    post_attention_residual_scale: (attention output + bias) bf16 and (residual + bias) fp32, 6)."""
    return stream_code_bytes(view, view.mixer_children)


@variant
def qk_norm_half_stats(view: AttentionFacts, top_k: int | None) -> int:
    """A norm in an attention kernel's child, off the stream, holding no weight, that cast nothing
    to fp32 and ran on rows one head wide: the compute-dtype storages of one element per head
    it kept, per query and key head (zaya's L2 QK-norm: the norm, its reciprocal and the scale
    factor, 3); 0 for the others."""
    return half_qk_norm(view)[0]


@variant
def qk_norm_key_rows(view: AttentionFacts, top_k: int | None) -> int:
    """Of such a norm: the compute-dtype storages one head wide it kept beyond its input q and k,
    per key head (zaya's normalised keys, which the product with its per-head key scale keeps:
    1); 0 for the others."""
    return half_qk_norm(view)[1]


@variant
def attn_adapter_width(view: AttentionFacts, top_k: int | None) -> int:
    """The ranks of the low-rank adapters (census/structure/predicates.py `is_low_rank_pair`) in
    the attention kernel's children whose up projection ran (zamba2's on q, k and v: 3 ×
    adapter_rank), summed: each keeps its rank-wide input."""
    return view.adapter_ranks_ran({k.child for k in view.attention_kernels() if k.child})


@variant
def stream_concat_width(view: AttentionFacts, top_k: int | None) -> int:
    """The stream norms whose output a projection of the attention kernel's children read: the
    widest input their ops read beyond the layer's hidden width (zamba's and zamba2's norm over
    the hidden states concatenated with the embeddings: hidden_size), summed over their calls."""
    reads = view.projection_reads({k.child for k in view.attention_kernels() if k.child})
    extra = 0
    for path, _ in view.probe.stream_norms:
        if view.probe.norm_outputs.get(path, set()) & reads:
            extra += max(0, max((op.in_last for op in view.probe.norm_ops.get(path, [])), default=0) - view.hidden)
    return extra


@variant
def qk_norm_in_projection(view: AttentionFacts, top_k: int | None) -> bool:
    """The storage of a v an attention kernel was given, kept by the kernel (attBMM) and by norms
    (normOp) together (census/measure/joint_storages.py: the QK-norms' inputs are views of it as
    v is, persimmon's split of query_key_value's output)."""
    return any({"normOp", "attBMM"} <= view.probe.kept_jointly.get(key, frozenset()) for key in view.probe.value_storages)


@variant
def q_up_concat(view: AttentionFacts, top_k: int | None) -> int:
    """MLA with a q latent (`q_a_proj`): the projection its child called next after `q_a_proj`
    (q's up-projection) reads a whole multiple k ≥ 2 of the q latent's width (its weight's
    columns): k − 1, the q latent norm's output concatenated with k − 1 more latents (axk2's
    q_gate_proj over [q_resid, q_compressed]: 1), kept by the projection as one input; 0 for the
    others (DeepSeek's q_b_proj reads the norm's output alone)."""
    rank = view.mla().get("q_lora_rank", 0)
    for names in view.probe.projection_order.values() if rank else ():
        after = [names[i + 1] for i, name in enumerate(names[:-1]) if name.rsplit(".", 1)[-1] == "q_a_proj"]
        if after:
            columns = int(view.module(after[0]).weight.shape[1])
            return columns // rank - 1 if columns % rank == 0 and columns >= 2 * rank else 0
    return 0


@variant
def v_projected(view: AttentionFacts, top_k: int | None) -> bool:
    """The attention kernel's v (its storage, LayerProbe.value_storages) is what a projection of
    the kernel's child was called with: doge's dt_proj reads the values (a view of v_proj's
    output) before the kernel to build its dynamic mask, and keeps them as its input, a matmul's
    save no recompute switch frees, so v is the projection's (attMM) and not the kernel's. Only
    where backward reaches that save (LayerProbe.values_booked): a projection whose output feeds
    nothing backward runs through (doge's mask, which a flash kernel does not take) is freed with
    its saves after the forward, and v is the kernel's alone."""
    children = {k.child for k in view.attention_kernels() if k.child}
    ops = {f"child:{child}" for child in children}
    read = view.probe.value_storages & view.projection_reads(children)
    return any(view.probe.values_booked.get(key) in ops for key in read)


@variant
def attn_routed_slots(view: AttentionFacts, top_k: int | None) -> int:
    """The token slots per token that routed experts inside the attention kernel's child ran
    over (LayerProbe.experts_rows of stacked experts in that child, over the tokens): jetmoe's
    mixture of attention heads routes q's and o's projections to its top-k experts, 2; 0 for an
    attention with no experts of its own."""
    children = {k.child for k in view.attention_kernels() if k.child}
    tokens = view.probe.tokens
    rows = [n for path, n in view.probe.experts_rows.items() if view.part(path) in children]
    return max(rows) // tokens if rows and tokens else 0


@variant
def attn_calls_extra(view: AttentionFacts, top_k: int | None) -> int:
    """The layer's children in which an attention kernel ran (KernelCall.child: the members of a
    container in the layer stand for it, census/structure/predicates.py `part_blocks`), beyond the
    first: longcat_flash's `self_attn` holds two MLA attentions, one a sublayer, each with its own
    input, latents and output projection, 1; diffllama's two kernel calls in one attention, 0."""
    children = {k.child for k in view.attention_kernels() if k.child}
    return max(len(children) - 1, 0)


@variant
def latent_up_made(view: AttentionFacts, top_k: int | None) -> int:
    """MLA (`mla`: its latent ranks): the storages of a latent's width (kv_lora_rank,
    q_lora_rank), in the compute dtype, that an attention child's own code made and a projection
    of that child other than its output projection kept (census/measure/kept_modules.py), their
    elements per token summed over the attentions, per call of the layer: longcat_flash's
    `k_pass * mla_scale_kv_lora`, kv_b_proj's input, 512 in each of its two attentions, 1024;
    0 where the up-projections read their latent norms' outputs, made by the norms (DeepSeek's)."""
    dims = view.mla()
    latents = {dims[name] for name in ("kv_lora_rank", "q_lora_rank") if name in dims}
    children = {k.child for k in view.attention_kernels() if k.child}
    outputs = set(view.probe.output_projections)
    projections = {path for path, m in view.named(children) if is_projection(m) and path not in outputs}
    made = sum(
        n
        for (_, maker, saver, last, dtype), n in view.probe.kept_modules.items()
        if maker in children and saver in projections and last in latents and dtype in HALF
    )
    return view.per_call(made) if latents else 0


@variant
def attention_as_written(view: AttentionFacts, top_k: int | None) -> bool:
    """The attention calls: a softmax self-attention run as the model's own eager code
    (census/kernels/attention.py `_as_written`: per-query sinks, which no kernel takes), not the flash kernel."""
    return any(k.eager for k in view.attention_kernels())


@variant
def score_sink_columns(view: AttentionFacts, top_k: int | None) -> int:
    """Of such a call, the columns its softmax ran over (census/measure/eager_scores.py) beyond its
    keys (k's length): logits concatenated beside the scores (inkling2's per-query sinks, 1), the
    most of the layer's calls; 0 for the others."""
    return max((k.score_columns - k["k"][2] for k in view.attention_kernels() if k.eager and k.score_columns), default=0)


@variant
def attn_gate_factor_fp32(view: AttentionFacts, top_k: int | None) -> bool:
    """With such a gate: the product's other factor, the attention's output, was in fp32, a cast of
    the kernel's output (inkling2's attn_output.float() * gate), which the product keeps."""
    return view.output_gate().factor_fp32


def _kept_per_head(view: AttentionFacts, heads: int, dtypes: tuple) -> int:
    """Elements per head and token, of one call of the layer, that the attention kernels'
    children's own code keeps in tensors of those dtypes laid out over `heads` after their tokens
    (LayerProbe.kept_per_head, census/measure/head_rows.py)."""
    children = {f"child:{k.child}" for k in view.attention_kernels() if k.child}
    kept = sum(n for (op, over, dtype), n in view.probe.kept_per_head.items() if op in children and over == heads and dtype in dtypes)
    return view.per_call(kept) // heads if heads else 0


@variant
def attn_head_fp32(view: AttentionFacts, top_k: int | None) -> int:
    """The attention kernel's children's own code: the fp32 elements per query head and token it
    keeps in tensors laid out over the query heads after their tokens, outside the kernel, norm
    modules and an output gate's chain (census/measure/head_rows.py: inkling2's L2 clips on q and
    on the relative bias states, no norm modules, keep each one's fp32 upcast and its product with
    a learned scale and four fp32 statistics per head: 2·(head_dim + 2) + 2·(d_rel + 2)); 0 for the others."""
    kernels = view.attention_kernels()
    return _kept_per_head(view, kernels[0]["q"][1], (torch.float32,)) if kernels else 0


@variant
def attn_kv_head_fp32(view: AttentionFacts, top_k: int | None) -> int:
    """The same per key head, where the kernel's keys have fewer heads than its queries: the fp32
    elements per key head and token that code keeps in tensors laid out over the key heads
    (inkling2's L2 clip on k, its fp32 upcast and four statistics per head, and in its full layers
    the dynamic short convolutions' fp32 windows and per-token weights, head_dim × conv_kernel
    each, for k and for v); 0 for the others."""
    kernels = view.attention_kernels()
    if not kernels or kernels[0]["k"][1] == kernels[0]["q"][1]:
        return 0
    return _kept_per_head(view, kernels[0]["k"][1], (torch.float32,))


@variant
def attn_head_half(view: AttentionFacts, top_k: int | None) -> int:
    """The same per query head in a half dtype (the compute dtype): the elements per query head and
    token that code keeps in such tensors (inkling2's relative bias states, which the product with
    the distance profiles keeps as its input: d_rel); 0 for the others."""
    kernels = view.attention_kernels()
    return _kept_per_head(view, kernels[0]["q"][1], HALF) if kernels else 0


@variant
def attn_inputs_extra(view: AttentionFacts, top_k: int | None) -> int:
    """The projections of an attention kernel's child, its output projections aside, whose weight
    takes the layer's hidden width: the storages made outside that child, a row per token, that
    they read (LayerProbe.outer_row_inputs: not doge's values, v_proj's output its dt_proj reads,
    nor zaya's zero state a sequence) beyond one per attention call there, per call of the layer
    (inkling2's full layers give k's and v's projections inputs of their own, the outputs of their
    own input norms: 2); 0 where q, k and v read one input."""
    outputs = set(view.probe.output_projections)
    extra = 0
    for child in {k.child for k in view.attention_kernels() if k.child}:
        calls = sum(1 for k in view.attention_kernels() if k.child == child)
        named = zip(view.probe.projection_order.get(child, []), view.probe.projection_call_inputs.get(child, []))
        inputs = {
            key for name, key in named if key in view.probe.outer_row_inputs and name not in outputs and _input_width(view.module(name)) == view.hidden
        }
        extra += max(len(inputs) - calls, 0)
    return view.per_call(extra)


def _input_width(projection) -> int:
    """The width a projection takes: nn.Linear's in_features, else its 2-D weight's last dim."""
    return int(getattr(projection, "in_features", projection.weight.shape[-1]))


@variant
def attn_head_param_fp32(view: AttentionFacts, top_k: int | None) -> int:
    """Casts to fp32 of the attention kernel's children's parameters of one row per query head,
    (heads, w), that backward keeps (census/measure/param_casts.py: inkling2's learned scales of
    its L2 clips on q and on the relative bias states, each cast for its product with an fp32
    upcast: head_dim + d_rel): their w summed, per call of the layer; 0 for the others."""
    kernels = view.attention_kernels()
    if not kernels:
        return 0
    heads, children = kernels[0]["q"][1], {k.child for k in kernels if k.child}
    rows = sum(
        shape[1] * kept
        for (child, shape, dtype), kept in view.probe.param_casts_kept.items()
        if child in children and dtype == torch.float32 and len(shape) == 2 and shape[0] == heads
    )
    return view.per_call(rows)

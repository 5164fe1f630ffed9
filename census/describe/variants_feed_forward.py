"""The variant facts of a layer's feed-forward (docs/census.md, "Variant facts"): an input shared
with the attention, the dense MLP's fused gate and up, what its activation keeps, the router's
ops and the experts' dispatch, a per-layer input gate, token mixes, an output gate and dense MLPs
beside the MoE block. Each reader is registered with `@variant` (census/describe/variant_registry.py);
its docstring is what docs/census.md's table says it is read from.
"""

from __future__ import annotations

import math

import torch

from speccat.census.describe.feed_forward_facts import FeedForwardFacts
from speccat.census.describe.layer_roles import HALF
from speccat.census.describe.stream_router_qk import router_mlp_calls, router_mlp_width as router_width, stream_code_bytes
from speccat.census.describe.variant_registry import variant
from speccat.census.measure.inner_norms import AFTER_ACTIVATION
from speccat.census.structure.predicates import is_projection


@variant
def ff_input_shared(view: FeedForwardFacts, top_k: int | None) -> bool:
    """A projection of the feed-forward children read a storage a projection of the attention
    children read (the input storages each projection was called with): a parallel block's one
    normalised input (phi, gpt-j, falcon, cohere), kept once."""
    return bool(view.projection_reads(view.mixer_children) & view.projection_reads(view.ffn_children))


@variant
def ff_fused_gate_up(view: FeedForwardFacts, top_k: int | None) -> bool:
    """A dense projection twice the MLP's width (gate and up in one)."""
    dense = view.dense_width()
    return bool(dense) and any(m.weight.shape[0] == 2 * dense for _, m in view.dense_projections())


@variant
def act_inline(view: FeedForwardFacts, top_k: int | None) -> bool:
    """The experts compute their activation in their own code (wrapped as an activation region)."""
    experts = view.experts
    return experts is not None and any(getattr(m, "_speccat_activation", False) for m in experts.modules())


@variant
def act_saved(view: FeedForwardFacts, top_k: int | None) -> int:
    """The storages autograd keeps that the dense MLP's activation region made or took as input (a
    per-layer input gate's activation calls counted with it; an activation module in the mixer,
    the RG-LRU block's GELU, or in a stream norm's gate, axk2's, not), per activation call: a count of tensors with a token dimension
    its code keeps, bool masks apart (`act_masks`): 1 for one torch op, 4 for gelu_new's Python
    tanh chain (x, tanh's output, 0.5x and 1 + tanh), never their bytes; 0 without a dense MLP."""
    calls = _act_calls(view)
    if not calls:
        return 0
    elsewhere = set(view.mixer_children) | set(view.stream_norm_paths())
    mixers = sum(n for child, n in view.probe.mixer_act_kept.items() if child in elsewhere)
    return (_act_storages(view, masks=False) - mixers) // calls


@variant
def act_masks(view: FeedForwardFacts, top_k: int | None) -> int:
    """The bool storages with a token dimension that the dense MLP's activation region kept, per
    activation call: the conditions of a `where` written in Python (apertus' xIELU: 1), one byte
    an element; 0 for one torch op and without a dense MLP."""
    calls = _act_calls(view)
    return _act_storages(view, masks=True) // calls if calls else 0


def _act_calls(view: FeedForwardFacts) -> int:
    """The dense MLP's activation calls, a per-layer input gate's with them; 0 with routed experts."""
    calls = view.activations()
    if view.experts is not None or not calls:
        return 0
    return calls + (sum(view.probe.activations[owner] for owner in view.gate.activations) if view.gate else 0)


def _act_storages(view: FeedForwardFacts, masks: bool) -> int:
    """The storages booked to `ffAct` with a token dimension (at least two dims: the per-layer
    scalars xIELU derives from its parameters are not), bool ones or the others."""
    return _kept(view, {"ffAct"}, lambda tail, dtype: len(tail) == 2 and (dtype == torch.bool) == masks)


def _kept(view: FeedForwardFacts, ops: set[str], holds) -> int:
    """The storages booked to one of `ops` whose last two dims and dtype `holds` accepts
    (LayerProbe.kept_tails)."""
    return sum(n for (op, tail, dtype), n in view.probe.kept_tails.items() if op in ops and holds(tail, dtype))


@variant
def act_output_read(view: FeedForwardFacts, top_k: int | None) -> bool:
    """A storage booked to `ffAct` is one the dense MLP's projections read: the activation keeps its
    own output, which the down projection keeps too (ReLU)."""
    return view.experts is None and bool(view.probe.act_kept & view.projection_reads(view.ffn_children))


@variant
def router_fp32_input(view: FeedForwardFacts, top_k: int | None) -> bool:
    """The ops of the MoE block outside its experts and shared MLP: a cast of a half input of the
    hidden width to fp32."""
    return any(
        op.name == "_to_copy" and op.out_dtype == torch.float32 and op.in_dtype in HALF and op.out_last == view.hidden for op in view.router_ops()
    )


@variant
def router_scores_all(view: FeedForwardFacts, top_k: int | None) -> bool:
    """The ops of the MoE block outside its experts and shared MLP: a softmax or sigmoid over
    every candidate the router chooses among (zero experts too), or a gather of the chosen
    scores from fp32 scores of every candidate, which the gather keeps whole (kolibri1's
    logits, gathered before their sigmoid)."""
    router = view.router_ops()
    candidates = view.router_candidates(router) if view.experts is not None else -1
    scored = any(op.name in ("softmax", "_softmax", "sigmoid") and op.out_last == candidates for op in router)
    # a gather of the chosen logits from the fp32 logits of every candidate keeps its whole source
    gathered = any(op.name == "gather" and op.in_last == candidates and op.in_dtype == torch.float32 for op in router)
    return scored or gathered


@variant
def router_renorm(view: FeedForwardFacts, top_k: int | None) -> bool:
    """The ops of the MoE block outside its experts and shared MLP: a division over the model's
    experts per token (the chosen weights over their sum)."""
    return top_k is not None and any(op.name in ("div", "div_") and op.out_last == top_k for op in view.router_ops())


@variant
def routing_weights_fp32(view: FeedForwardFacts, top_k: int | None) -> bool:
    """The dtype of the weights the experts are called with: fp32."""
    return view.probe.routing_weights_dtype == torch.float32


@variant
def experts_dense(view: FeedForwardFacts, top_k: int | None) -> bool:
    """The token slots the routed experts ran over (the rows of the input stacked experts are
    called with, the index of the interface's) are the number of experts times the tokens, and
    the experts outnumber the top-k: every expert ran over every token (llama4's dense dispatch:
    the router's sigmoid scores scale a copy of the input per expert)."""
    return view.experts_dense()


@variant
def per_layer_gate_width(view: FeedForwardFacts, top_k: int | None) -> int:
    """The width p of a per-layer input gate after the MLP (`census/describe/layer_gate.py`): a pair
    of the feed-forward's projections h→p and p→h, where the layer's own code, between its
    children, multiplied a tensor p wide by one of the layer's other inputs (its slice of the
    per-layer inputs, census/measure/input_products.py `input_products`). gemma-4's layers end with one:
    `per_layer_input_gate` (2304→256), GELU, the product with the per-layer input,
    `per_layer_projection` (256→2304) and `post_per_layer_input_norm` on the stream. The MLP's
    width (`intermediate_size`), projections (`ffMM`) and activation calls (`ffAct`) stay its own;
    the gate's parameters are `ffn_dense`, its norm one of `normOp`, its saves `ffMM` (its input,
    the activation's output the product keeps, the product) and `ffAct` (the activation's input),
    priced from p. 0 without one."""
    return view.gate.width if view.gate else 0


@variant
def ff_token_mixes(view: FeedForwardFacts, top_k: int | None) -> int:
    """The products (`mul`) in the feed-forward's children that read a token-shifted copy of the
    hidden states (a pad of the layer's width that moves each row one token later): RWKV's
    channel mixing, x_{t−1}·(1 − μ) once per projection fed (2)."""
    return sum(n for child, n in view.probe.token_mixes.items() if child in view.ffn_children)


@variant
def ff_out_gate(view: FeedForwardFacts, top_k: int | None) -> bool:
    """The dense feed-forward holds a projection of the hidden width to itself whose output an
    inline sigmoid reads, and whose products with that sigmoid no projection of the feed-forward
    reads: the MLP's output is gated (RWKV's channel-mixing receptance)."""
    return bool(view.out_gates())


@variant
def moe_latent_width(view: FeedForwardFacts, top_k: int | None) -> int:
    """The width of the input the routed experts were called with, where a projection of the MoE
    block (outside its experts and shared experts) made it from the hidden size and another
    projection of the block read what the experts returned back up to the hidden size
    (census/measure/expert_links.py): Nemotron-3-Super's `fc1_latent_proj` (4096 → 1024) and
    `fc2_latent_proj`. The experts' weights are read in that width (their matmuls,
    `moe_intermediate_size`); the projections' parameters are `ffn_router`. 0 for experts that
    run in the hidden size."""
    return view.moe_latent_width()


@variant
def experts_loop(view: FeedForwardFacts, top_k: int | None) -> bool:
    """Stacked experts that ran over the chosen slots (not every token), and the ops of the MoE
    block outside its experts and shared MLP hold an `index_add`: the block's own code sums each
    expert's weighted output back into the tokens, one expert at a time (dbrx's loop over the
    experts hit, its slots taken by a `where`)."""
    if view.experts is None or view.experts_impl() != "stacked":
        return False
    return any(op.name in ("index_add", "index_add_") for op in view.router_ops())


@variant
def router_jitter(view: FeedForwardFacts, top_k: int | None) -> bool:
    """The ops of the MoE block outside its experts and shared MLP: a `uniform_` of the hidden
    width (a random factor the router's input is multiplied by: dbrx's moe_jitter_eps in
    training)."""
    return view.experts is not None and any(op.name == "uniform_" and op.out_last == view.hidden for op in view.router_ops())


@variant
def router_weight_fp32(view: FeedForwardFacts, top_k: int | None) -> int:
    """The rows of a parameter of the router's shape (the candidates the router chooses among by
    the hidden size) that the feed-forward's ops cast to fp32 and backward keeps
    (census/measure/param_casts.py): a half router weight cast for an fp32 matmul, its copy
    kept once a layer call whatever the tokens (kolibri1's F.linear(x.float(), weight.float()):
    384), its rows beyond the candidates too where it also scores the shared experts (inkling's
    256 routed and 2 shared: 258), and an fp32 weight cast to the compute dtype and back (ergo's
    weight.to(bf16).float(): 256). 0 without routed experts, and where the weight is used in fp32
    as it is (DeepSeek-V3's, kept in fp32: no copy)."""
    if view.experts is None:
        return 0
    candidates = view.router_candidates(view.router_ops())
    scored = candidates + sum(total // row for total, row in view.shared_parts())  # at most a logit per shared expert too
    rows = [
        shape[0]
        for (child, shape, dtype), kept in view.probe.param_casts_kept.items()
        if child in view.ffn_children and dtype == torch.float32 and candidates <= shape[0] <= scored and shape[1:] == (view.hidden,) and kept
    ]
    return max(rows, default=0)


@variant
def ff_down_norm(view: FeedForwardFacts, top_k: int | None) -> int:
    """Norm calls in the dense MLP's child after its activation (census/measure/inner_norms.py),
    over the MLP's width, whose output a projection of the MLP reads (the down projection), per
    activation call: bitnet's `ffn_sub_norm` on act(gate)·up, 1; 0 without one and without a
    dense MLP. A norm there of the hidden width is taken for a stream norm, one on the block's
    output (census/measure/inner_norms.py)."""
    calls, width = view.activations(), view.dense_width()
    if view.experts is not None or not calls or not width:
        return 0
    reads = view.projection_reads(view.ffn_children)
    norms = sum(
        1
        for path, child, follows, seen in view.probe.inner_norms
        if follows == AFTER_ACTIVATION and child in view.ffn_children and seen == width and view.probe.norm_outputs.get(path, set()) & reads
    )
    return norms // calls


@variant
def act_saved_fp32(view: FeedForwardFacts, top_k: int | None) -> int:
    """Of the storages the dense MLP's activation region keeps per call (`act_saved`), those in
    fp32: an activation run on an fp32 copy of its half input (beam's act_fn(gate.float())
    keeps that copy: 1); 0 for an activation run in the compute dtype and without a dense MLP."""
    calls = _act_calls(view)
    if not calls:
        return 0
    return _kept(view, {"ffAct"}, lambda tail, dtype: len(tail) == 2 and dtype == torch.float32) // calls


@variant
def ff_kept_fp32(view: FeedForwardFacts, top_k: int | None) -> int:
    """The fp32 storages of the MLP's width that the dense MLP's own code keeps outside its
    activation region (booked to its child), per activation call: the activation's output and
    up's output in fp32, which a product taken in fp32 keeps (beam's act_fn(gate.float()) *
    up.float(), cast back before down_proj: 2); 0 for an MLP run in the compute dtype."""
    calls, width = _act_calls(view), view.dense_width()
    rows = _token_rows(view)  # one row of the MLP's width a token
    if not calls or not width or not rows:
        return 0
    ops = {f"child:{child}" for child in view.ffn_children}
    return _kept(view, ops, lambda tail, dtype: tail == (rows, width) and dtype == torch.float32) // calls


def _token_rows(view: FeedForwardFacts) -> int:
    """The last dim of the tokens among the hidden states' dims (the rows before the width of a
    tensor made per token: the sequence's in (b, s), the batch's in (s, b)), not the streams
    after them (hy_v4's (b, s, streams)); 0 without hidden dims."""
    dims, tokens = view.probe.hidden_dims, view.probe.tokens
    ends = [i for i in range(len(dims)) if math.prod(dims[: i + 1]) == tokens]
    return dims[ends[-1]] if ends else 0


def _experts_fp32(view: FeedForwardFacts, activation: bool) -> int:
    """The fp32 storages that the routed experts kept one row of their width for each token slot
    they ran over (not the router's scores, one row a token, however wide), per activation call:
    booked to their activation region (`activation`), or to the MoE block's child."""
    calls, width = view.activations(), view.expert_width()
    slots = view.per_call(view.probe.experts_rows.get(view.experts_path, 0)) if view.experts_path else 0  # one call's (`recurrent_cycles`)
    if view.experts is None or not calls or not width or not slots:
        return 0
    ops = {"ffAct"} if activation else {f"child:{child}" for child in view.ffn_children}
    return _kept(view, ops, lambda tail, dtype: tail == (slots, width) and dtype == torch.float32) // calls


@variant
def experts_act_fp32(view: FeedForwardFacts, top_k: int | None) -> int:
    """The fp32 storages of one expert's width the routed experts' activation region keeps per
    call: an activation run on an fp32 copy of the gate (beam's act_fn(gate.float()) in its
    experts' gate function: 1), which its gate_up output is not kept beside; 0 for experts run in
    the compute dtype and without routed experts."""
    return _experts_fp32(view, activation=True)


@variant
def experts_kept_fp32(view: FeedForwardFacts, top_k: int | None) -> int:
    """The fp32 storages of one expert's width the routed experts' own code keeps outside their
    activation region (booked to the MoE block's child), per activation call: the activation's
    output and up's fp32 copy, which a product taken in fp32 keeps (beam's act_fn(gate.float()) *
    up.float(), cast back for down: 2); 0 for experts run in the compute dtype."""
    return _experts_fp32(view, activation=False)


def _shared_kept(view: FeedForwardFacts, activation: bool) -> int:
    """What the MoE block's shared experts made and kept in their own code (_kept_in), in widths
    of their total width per row they ran over (a token: a fused gate_up output counts 2)."""
    widths = [row for _, row in view.shared_parts()]  # one row of what each saves
    if view.experts is None or not widths:
        return 0
    return _kept_in(view, [path for path, _ in view.shared_children()], widths, activation)


def _kept_in(view: FeedForwardFacts, paths: list[str], widths: list[int], activation: bool) -> int:
    """The compute-dtype storages modules under `paths` made and kept in their own code
    (census/measure/kept_modules.py), in widths of the summed `widths` per row they ran over:
    booked to their activation region (`activation`), or to their child. Their input, made
    before them, and their output kept by a product outside them (a shared gate's) are not
    theirs; nor is a storage whose last dim none of `widths` divides."""

    def inside(module: str | None) -> bool:
        return module is not None and any(module == path or module.startswith(path + ".") for path in paths)

    elements = sum(
        n
        for (op, made, saved, last, dtype), n in view.probe.kept_modules.items()
        if (op == "ffAct" if activation else op.startswith("child:"))
        and inside(made)
        and inside(saved)
        and dtype in HALF
        and any(last % width == 0 for width in widths)
    )
    return elements // sum(widths)


@variant
def shared_kept(view: FeedForwardFacts, top_k: int | None) -> int:
    """The storages of the shared experts' width their own code keeps outside an activation
    region, in widths of their total width per token (census/measure/kept_modules.py: made and
    saved inside the MoE block's shared children, a fused gate_up output counting 2): 3 for a
    gated MLP with an activation module (its output, up's output, the product), minimax-m3's
    inline clamped SwiGLU 7 (gate_up, the clamped gate, the sigmoid, up + 1, the glu, the
    product), inkling's stacked shared experts 4 (the product scaled by the router's weight
    for each, too; counted per expert's row of their batched matmuls); 0 without shared experts."""
    return _shared_kept(view, activation=False)


@variant
def shared_act_saved(view: FeedForwardFacts, top_k: int | None) -> int:
    """The storages of the shared experts' width their activation region keeps (an activation
    module's, an inline F.silu's input), in widths of their total width per token: 1 for one
    torch op; 0 for an inline gate with no activation call (minimax-m3's, all `shared_kept`)
    and without shared experts."""
    return _shared_kept(view, activation=True)


@variant
def stream_code_ff_bytes(view: FeedForwardFacts, top_k: int | None) -> int:
    """The storages of the hidden width kept by code on the stream in a module of its own
    (census/measure/stream_code.py) that ran after a feed-forward child, booked after it: their
    element bytes per token and hidden channel (zaya's post_mlp_residual_scale, 6)."""
    return stream_code_bytes(view, view.ffn_children)


@variant
def router_mlp_width(view: FeedForwardFacts, top_k: int | None) -> int:
    """The input width of the MoE block's projections outside its routed and shared experts that
    read a width other than the hidden size, the widest: the router MLP's (zaya's fc1, fc2 and
    out_proj read 256); 0 for a router of projections from the hidden size only."""
    return router_width(view)


@variant
def router_mlp_layers(view: FeedForwardFacts, top_k: int | None) -> int:
    """The calls of those projections (the MoE block's projection order): zaya's fc1, fc2 and
    out_proj, 3; 0 without a router MLP."""
    return router_mlp_calls(view)[0]


@variant
def router_mlp_acts(view: FeedForwardFacts, top_k: int | None) -> int:
    """Activation calls in the MoE block outside its routed and shared experts, where it has a
    router MLP: zaya's GELU module called twice, 2; 0 without one."""
    return router_mlp_calls(view)[1]


@variant
def router_mlp_norms(view: FeedForwardFacts, top_k: int | None) -> int:
    """Calls of norms in the MoE block outside its experts whose weight is the router MLP's width:
    zaya's router_mlp.norm, 1; 0 without one."""
    return router_mlp_calls(view)[2]


@variant
def ff_adapter_width(view: FeedForwardFacts, top_k: int | None) -> int:
    """The ranks of the low-rank adapters (census/structure/predicates.py `is_low_rank_pair`) in
    the feed-forward's children whose up projection ran (zamba2's on gate_up_proj:
    adapter_rank), summed: each keeps its rank-wide input."""
    return view.adapter_ranks_ran(view.ffn_children)


@variant
def side_input_width(view: FeedForwardFacts, top_k: int | None) -> int:
    """The input widths of the projections called in the layer's side branches
    (census/describe/layer_roles.py `side_children`: zamba's and zamba2's linear after the shared
    block, hidden_size), each call counted: each keeps its input, booked as `other`; not a call
    given a storage the attention's or the MLP's projections read too, which their records price
    (gemma3n's Laurel linear_left reads the attention's input: its rank-wide linear_right counts)."""
    priced = view.projection_reads(view.mixer_children | view.ffn_children)
    called = [
        (path, read)
        for child in view.side_children
        for path, read in zip(view.probe.projection_order.get(child, []), view.probe.projection_call_inputs.get(child, []))
    ]
    return sum(int(view.module(path).weight.shape[1]) for path, read in called if read not in priced)


@variant
def side_code_bytes(view: FeedForwardFacts, top_k: int | None) -> int:
    """Bytes per token and hidden channel of the tensors spanning the hidden width that the side
    branches' own code keeps, outside their projections (LayerProbe.code_kept, booked to a side
    child: AltUp's predict and correct, methods the layer calls, keep its streams, the innovation
    repeated over them and the copy the output scale multiplies, 2·4 + 2·4 + 2 at 4 streams in
    bf16: 18; their coefficients, a few values a token, not); 0 without side branches."""
    tokens, hidden = view.probe.tokens, view.probe.hidden_width
    if not tokens or not hidden or not view.side_children:
        return 0
    kept = sum(n for op, n in view.probe.code_kept.items() if view.part(op.split(":", 1)[1]) in view.side_children)
    return kept // (tokens * hidden)


@variant
def experts_fused_gate_up(view: FeedForwardFacts, top_k: int | None) -> bool:
    """Routed experts stacked as a group of projections (experts_group) whose first weight's
    output is twice one expert's width (`expert_width`): gate and up in one projection (jetmoe's
    input_linear), whose output the activation and the product keep whole as views of it; false
    for separate gate and up weights (dbrx's w1 and v1) and for one module of experts."""
    if len(view.experts_group) < 2:
        return False
    width = view.expert_width()
    return bool(width) and 2 * width in view.experts_weights()[0][1:]


@variant
def experts_act_kept(view: FeedForwardFacts, top_k: int | None) -> int:
    """The elements a token slot of the storages booked to `ffAct` that a module inside the
    routed experts saved, where their activation is their own code (`act_inline`), over one
    expert's width (LayerProbe.kept_modules): tensors of that width a slot, the fused gate_up
    output kept whole counting two (gpt-oss's clamp, sigmoid and glu chain: 6; hy_v4's clamped
    SwiGLU: gate_up, the clamped gate and up and SiLU's output, 5); 0 for the others."""
    width = view.expert_width()
    if not act_inline(view, top_k) or not width:
        return 0
    kept = sum(n for (op, _, saved, _, _), n in view.probe.kept_modules.items() if op == "ffAct" and saved is not None and view.in_experts(saved))
    return view.per_call(kept) // width  # one call's (`recurrent_cycles`)


@variant
def dense_beside_width(view: FeedForwardFacts, top_k: int | None) -> int:
    """The MLPs the layer calls beside its MoE block (FeedForwardFacts.dense_beside: the layer's
    own MLP children other than the MoE block and its shared experts, longcat_flash's `mlps`):
    the input widths of their projections back to the hidden size, summed over the calls the
    probe saw, per call of the layer (`recurrent_cycles`); 0 without such MLPs."""
    return view.per_call(sum(view.dense_beside_call_widths()))


@variant
def dense_beside_calls(view: FeedForwardFacts, top_k: int | None) -> int:
    """The calls of those MLPs' projections back to the hidden size, one a call of an MLP, per
    call of the layer: longcat_flash's two MLPs, 2; 0 without such MLPs."""
    return view.per_call(len(view.dense_beside_call_widths()))


@variant
def dense_beside_kept(view: FeedForwardFacts, top_k: int | None) -> int:
    """The compute-dtype storages those MLPs made and kept in their own code outside their
    activation region (census/measure/kept_modules.py), in widths of their summed width per
    token: longcat_flash's SiLU output, up's output and the product, 3; 0 without such MLPs."""
    widths = view.dense_beside_call_widths()
    return _kept_in(view, view.dense_beside(), widths, activation=False) if widths else 0


@variant
def dense_beside_act_saved(view: FeedForwardFacts, top_k: int | None) -> int:
    """The same kept by their activation region (an activation module's input): 1 for one torch
    op; 0 without such MLPs."""
    widths = view.dense_beside_call_widths()
    return _kept_in(view, view.dense_beside(), widths, activation=True) if widths else 0


def _experts_norms(view: FeedForwardFacts) -> list[str]:
    """The norm modules inside the routed experts (one module, or a group's) that ran."""
    roots = view.experts_group
    return [path for path in view.probe.norm_calls if any(path.startswith(root + ".") for root in roots)]


@variant
def experts_out_norms(view: FeedForwardFacts, top_k: int | None) -> int:
    """Calls of norms inside the routed experts (one row per slot: ergo's post_expert_norm on each
    route's output, before the weighted sum), per layer call; 0 without one."""
    return view.per_call(sum(view.probe.norm_calls[path] for path in _experts_norms(view)))


@variant
def experts_norm_weight_bytes(view: FeedForwardFacts, top_k: int | None) -> int:
    """Of the first such norm: its weight's element bytes where the weight holds a row per expert
    (2-D, a row for each of the experts module's experts: ergo's fp32 (experts, hidden)), rows a
    slot's expert picks, which the product with the normalised rows keeps; 0 otherwise."""
    norms = _experts_norms(view)
    weight = getattr(view.module(norms[0]), "weight", None) if norms else None
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.shape[-1] != view.hidden:
        return 0
    return weight.dtype.itemsize


@variant
def ff_stats_kept(view: FeedForwardFacts, top_k: int | None) -> int:
    """Statistics over the dense MLP's width that its own code keeps, one value a token each
    (LayerProbe.kept_modules: made in the code of the module whose children are the MLP's
    projections of its width, one element a row), per activation call: gemma3n's activation
    sparsity sets the cutoff its ReLU applies from the mean and the standard deviation of
    gate_proj's output, and the std keeps its result and its input, that output: 1; 0 without
    a dense MLP (hy_v4's hyper-connection's per-stream mixes, (b, s, streams, 1) in a module of
    its own beside the MLP, are none)."""
    calls, width = view.activations(), view.dense_width()
    if view.experts is not None or not calls or not width:
        return 0
    ops = {f"child:{child}" for child in view.ffn_children}
    stats = sum(
        elements
        for (op, made_in, _, last, _), elements in view.probe.kept_modules.items()
        if op in ops and last == 1 and made_in is not None and _holds_mlp(view.module(made_in), width)
    )
    return stats // calls


def _holds_mlp(module, width: int) -> bool:
    """The MLP module itself: its children include projections of the MLP's width (a projection,
    a norm or an activation module holds none)."""
    return any(is_projection(child) and width in child.weight.shape for child in module.children())

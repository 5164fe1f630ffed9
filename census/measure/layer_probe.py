"""LayerProbe: what one probed layer did during the fake forward and backward (its kernels, norms,
activations, projections, and the bytes each op keeps), and OpSeen, one op seen where the census
states a variant.

The watcher (census/measure/watcher.py) fills one LayerProbe per probed layer; the describe
stage reads them (census/describe/).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from speccat.census.structure.kernel_registry import KernelCall


class GatedProduct(NamedTuple):
    """A product after its child's attention kernel of a tensor made from a projection's output
    by elementwise ops alone (census/measure/output_gates.py)."""

    projection: str  # the projection whose output the chain began with
    elements: int  # the chain's factor's elements
    lineage: frozenset[int]  # the chain's storages up to the factor
    before_copy: bool  # the other factor was the kernel's output in its own heads-major layout
    factor_fp32: bool  # the other factor was in fp32 (a cast of the attention's output: inkling2's)


@dataclass(frozen=True)
class OpSeen:
    """One op dispatched inside a region whose variant the census states (a norm, a router)."""

    name: str  # aten overload packet, e.g. "mul", "_to_copy", "softmax"
    out_dtype: torch.dtype | None
    out_last: int  # the output's last dim (0 for a 0-dim output)
    in_dtype: torch.dtype | None
    in_last: int = 0  # the first tensor input's last dim (0 for a 0-dim input): what a top-k chose among


@dataclass
class LayerProbe:
    """What one probed layer did during the fake forward and backward."""

    index: int
    kernels: list[KernelCall] = field(default_factory=list)
    dropouts: int = 0
    # the layer's norms on its hidden stream, per call: (module path, its input's storage). A
    # norm held by the layer itself, or nested anywhere (a post-norm in BERT's attention.output)
    # when it normalises the layer's width and is no QK-norm; never a norm inside a norm
    stream_norms: list[tuple[str, int]] = field(default_factory=list)
    activations: Counter = field(default_factory=Counter)  # module path of the activation region's owner -> calls
    output_projections: list[str] = field(default_factory=list)
    token_mixes: Counter = field(default_factory=Counter)  # top-level child -> products of a token-shifted copy of the hidden states (RWKV's x_{t-1}·(1 − μ))
    # a gated product (census/measure/output_gates.py), and what elementwise ops made of the
    # product (a norm's output too) -> the product
    gated_products: dict[int, GatedProduct] = field(default_factory=dict)
    # (projection, op, dtype) -> elements backward keeps of those chains' storages, booked to op
    # (an output gate's activation's saves)
    gate_kept: Counter = field(default_factory=Counter)
    sigmoid_gates: dict[str, set[int]] = field(default_factory=dict)  # projection whose output an inline sigmoid read next (RWKV's receptance) -> the products of that sigmoid's output
    projection_order: dict[str, list[str]] = field(default_factory=dict)  # top-level child -> projections in call order
    projection_inputs: dict[str, set[int]] = field(default_factory=dict)  # top-level child -> storages its projections read
    # top-level child -> the storage each of its projection calls read, in projection_order's order
    # (None for a call given no tensor): a side branch's projection reading what the attention's
    # projections read keeps nothing of its own (gemma3n's Laurel linear_left)
    projection_call_inputs: dict[str, list[int | None]] = field(default_factory=dict)
    # the storages projections read that were made outside the projection's child (by the layer's
    # code, another child, the decoder: not doge's values, v_proj's output that its dt_proj reads)
    # and hold one row per token (the tokens times the last dim: not zaya's zero state a sequence)
    outer_row_inputs: set[int] = field(default_factory=set)
    act_kept: set[int] = field(default_factory=set)  # storages booked to ffAct
    # MLP module path -> its inline activation calls whose kept tensor an activation module then
    # kept as its input (census/measure/inline_activations.py: gemma3n's sparsity ReLU before its
    # GELU): a step of that activation's, no activation call of its own
    act_chained: Counter = field(default_factory=Counter)
    mixer_act_kept: Counter = field(default_factory=Counter)  # top-level child -> storages an activation module in it keeps (ffAct's: the RG-LRU block's GELU among them)
    children_ran: set[str] = field(default_factory=set)  # top-level children whose forward ran (a cross-attention without encoder states does not)
    saved_bytes: Counter = field(default_factory=Counter)  # op -> bytes at seq_length
    saved_storages: Counter = field(default_factory=Counter)  # op -> storages booked to it
    norm_ops: dict[str, list[OpSeen]] = field(default_factory=dict)  # norm module path -> ops in its calls
    norm_calls: Counter = field(default_factory=Counter)  # norm module path -> its calls (outside other norms)
    # norm module path -> rows of the width it normalises per token of the inputs it was called
    # with, summed over its calls: one per token on the hidden stream, one per head for a norm of
    # each head (deepseek_v4's q_b_norm: q's heads)
    norm_rows: Counter = field(default_factory=Counter)
    norm_weight_copies: set[str] = field(default_factory=set)  # norm module paths that saved a tensor with no token dims
    norm_fp32_rows: Counter = field(default_factory=Counter)  # norm module path -> fp32 storages it saved, one row of its width per token
    router_ops: dict[str, list[OpSeen]] = field(default_factory=dict)  # top-level child -> ops outside experts and shared MLPs
    routing_weights_dtype: torch.dtype | None = None  # the dtype of the weights the experts multiply by
    experts_top_k: int = 0  # experts each token is sent to: the last dim of the index the experts are called with
    experts_rows: Counter = field(default_factory=Counter)  # experts' path -> token slots they ran over (the chosen ones, or every expert for every token)
    # the routed experts' path -> the width of the input they were called with (a latent MoE's
    # experts run narrower than the hidden size: census/measure/expert_links.py)
    experts_input_widths: dict[str, int] = field(default_factory=dict)
    # projection path -> the projection whose output, carried through elementwise ops alone
    # (views, casts, copies: Watcher.gate_chains), it read (deepseek_v4's o_b_proj reads o_a_proj's
    # grouped output, copied contiguous)
    projections_fed: dict[str, str] = field(default_factory=dict)
    experts_fed_by: set[str] = field(default_factory=set)  # projections whose output the routed experts were called with
    experts_read_by: set[str] = field(default_factory=set)  # projections called with what the routed experts returned
    calls: list[Any] = field(default_factory=list)  # the ops dispatched in the layer's forward, in order (selective-checkpoint's view)
    kept_by_call: dict[int, set[str]] = field(default_factory=dict)  # call index -> the ops (or part) that keep the storages it made
    booked_as: dict[int, str] = field(default_factory=dict)  # call index -> the op its first kept storage is booked to
    kept_outputs: dict[int, set[int]] = field(default_factory=dict)  # call index -> positions of its output tensors kept
    input_bytes: Counter = field(default_factory=Counter)  # op -> bytes of the layer's own input an op keeps
    hidden_width: int = 0  # the last dim of the hidden states the layer was called with
    ran: bool = False  # the decoder called the layer (mllama's skips a cross-attention layer without encoder states)
    # where each of the layer's calls in one forward that ran with grad begins in `calls` (one, or a
    # layer the decoder runs in several cycles: hrm_text's; calls without grad are not watched),
    # each keeping its activations for backward: what each call ran, told apart from the others'
    # (census/describe/layer_view.py `cycles`: calls that ran alike, or differently)
    call_starts: list[int] = field(default_factory=list)
    # where each of those calls' norms begin in `stream_norms`: the stream norms of one call, the
    # first (census/describe/layer_view.py `first_call_norms`)
    call_norm_starts: list[int] = field(default_factory=list)
    # the top-level children that ran in each of those calls: children only calls after the first
    # ran (inkling2_loop_text's message gates, census/describe/variants_layer.py `later_child_calls`)
    call_children: list[set[str]] = field(default_factory=list)
    # the storages each of those calls was given beside its hidden states, which it does not keep
    # (a looped layer's messages: census/describe/variants_layer.py `later_norm_inputs`)
    call_inputs: list[set[int]] = field(default_factory=list)
    tokens: int = 0  # the tokens of the hidden states the layer was called with: their dims up to the sequence's (watcher.tokens_of), not streams after it
    hidden_dims: tuple[int, ...] = ()  # their dims before the width: (b, s), (s, b), (tokens,), (b, s, streams)...
    backward_peak: int = 0  # the most bytes alive in its backward beyond those alive when it began (census/measure/backward_peak.py)
    working_set: dict = field(default_factory=dict)  # what is alive at that peak, by width and dtype (backward_peak.working_set)
    forward_flops: int = 0  # FLOPs of the layer's forward, as FlopCounterMode counts them (census/measure/flops.py), when asked
    # (op region, the kept tensor's last two dims, its dtype) -> storages booked so: which tensors of
    # a delta rule's per-channel gate shape (heads, key dim) a mixer's own code keeps
    kept_tails: Counter = field(default_factory=Counter)
    # a storage two or more ops keep that each have a recompute switch -> those ops: freed only when
    # every one is recomputed (census/measure/joint_storages.py: persimmon's QK-norms and kernel)
    kept_jointly: dict[int, frozenset[str]] = field(default_factory=dict)
    # (op region, the module that made it, the module whose code saved it, the saved tensor's last
    # dim, its dtype) -> elements per row of the saved tensor (a token's) of the storages booked so
    # (census/measure/kept_modules.py): what a part of a child written as plain code keeps (a MoE
    # block's shared experts' inline gate)
    kept_modules: Counter = field(default_factory=Counter)
    # (op region, n, dtype) -> storages first saved as a 4-D (…, n, n) tensor, or as the (n, n)
    # matrix itself holding no floats, that hold one (n, n) matrix only: tables shared by batch and
    # heads (a score bias's gather index and mask)
    kept_square: Counter = field(default_factory=Counter)
    # (op region, the heads a kept tensor is laid out over after its tokens, its dtype) -> elements
    # per token of the storages booked so, a child's (census/measure/head_rows.py): what an
    # attention's own code keeps per head (inkling2's L2 clips on q and k, its dynamic convs' windows)
    kept_per_head: Counter = field(default_factory=Counter)
    # (child, the source's shape, its element bytes, the output's shape) of each gather outside a
    # kernel whose output's last two dims are square: a score bias gathered from a per-query table
    score_gathers: list[tuple[str | None, tuple[int, ...], int, tuple[int, ...]]] = field(default_factory=list)
    # the last dims of products the layer's own code (between its children) took with one of its
    # other inputs: gemma-4's per-layer input times its gate's activation (census/describe/layer_gate.py)
    input_products: set[int] = field(default_factory=set)
    value_storages: set[int] = field(default_factory=set)  # the storages of the v the attention kernels were given
    # those of them backward reaches -> the op of their first saver it reaches: a projection's
    # (`child:NAME`) where one reading v keeps it, the kernel's where that save is freed unused
    values_booked: dict[int, str] = field(default_factory=dict)
    depth_calls: list[tuple[int, int]] = field(default_factory=list)  # each attention over the stack's depth: (the states it attends over, its learned queries) (census/kernels/attention.py)
    # the layer was called with a stack of hidden states beside its own, (…, n, width): states
    # stored down the stack's depth, n growing with the layer's place (census/measure/readers.py)
    reads_depth: bool = False
    norm_outputs: dict[str, set[int]] = field(default_factory=dict)  # norm module path -> its outputs' storages
    # (child, the parameter's shape, the cast's dtype) -> casts of a parameter to another dtype that
    # backward keeps (census/measure/param_casts.py: kolibri1's router weight cast to fp32)
    param_casts_kept: Counter = field(default_factory=Counter)
    # norm calls inside a child, after its attention kernel or its MLP's activation and before its
    # next projection (census/measure/inner_norms.py: bitnet's attn_sub_norm, ffn_sub_norm), never
    # stream norms -> (norm path, child, what it follows: "attention" or "activation", its width)
    inner_norms: list[tuple[str, str | None, str, int]] = field(default_factory=list)
    # the storages of each call's arguments before v, of a kernel taking values (an attention's q
    # and k), and the kernel outputs held in joins of them (torch.cat) that backward keeps outside
    # the kernels (census/measure/repeated_attention.py: diffllama's two calls over one q and k)
    query_key_storages: list[tuple[int, ...]] = field(default_factory=list)
    joined_outputs_kept: int = 0
    # op -> bytes of the factors the layer's own products with a per-channel scale keep
    # (census/measure/stream_scales.py: doge's scaled residuals, dory's residual rates)
    stream_scale_kept: Counter = field(default_factory=Counter)
    # (op, dtype) -> bytes of the factors products with a per-channel scale keep inside a child,
    # outside its norms and its output gate's chain (census/measure/stream_scales.py: dory's q
    # after rope times sqk², its MLP's projections' outputs times suv_gate and suv_up)
    channel_scale_kept: Counter = field(default_factory=Counter)
    # (op, the top-level child that made it, the one whose code saved it: None for the layer's own
    # code, its dtype, whether it holds the hidden width or more a token) -> elements per token of the storages booked so (census/measure/stream_kept.py:
    # what hyper-connections and the layer's code around its blocks keep)
    stream_kept: Counter = field(default_factory=Counter)
    # op -> bytes of the kept storages spanning the hidden width booked to a child (`child:NAME`)
    # that no projection saved: what the child's own code, or the layer's code after it, keeps
    # (census/measure/kept_modules.py: AltUp's predict and correct keep the streams, their
    # innovation and the scaled copy)
    code_kept: Counter = field(default_factory=Counter)

    def gate_holding(self, key: int) -> str | None:
        """The projection whose gate chain, up to its gated product, holds storage `key`; None for
        a storage on no gate's chain."""
        return next((product.projection for product in self.gated_products.values() if key in product.lineage), None)

    @property
    def kept_calls(self) -> int:
        """The layer's calls in one forward that ran with grad (`call_starts`)."""
        return len(self.call_starts)

    def ops_by_call(self) -> list[list[Any]]:
        """The ops each of those calls dispatched (`calls` split at `call_starts`)."""
        return by_call(self.calls, self.call_starts)

    def norms_by_call(self) -> list[list[tuple[str, int]]]:
        """The stream norm calls each of them ran (`stream_norms` split at `call_norm_starts`)."""
        return by_call(self.stream_norms, self.call_norm_starts)


def by_call(items: list, starts: list[int]) -> list[list]:
    """`items` recorded over a layer's calls, split where each call began (`starts`)."""
    return [items[start:end] for start, end in zip(starts, [*starts[1:], len(items)])]

"""Watcher: what the probe sees while the probed layers run, booked on each layer's LayerProbe.

Three kinds of watching, set up by census/measure/probe.py around the decoder's forward:

- a TorchDispatchMode (DispatchWatch) hands the watcher every op: each call is numbered as
  torch's selective-checkpoint policy sees it, the kernels book their calls (their inputs state
  heads and widths), norms' and routers' ops are kept as OpSeen, and the ops some architecture's
  code runs its own way (token shifts, dropouts, inline activations, sigmoid gates, a LayerNorm's
  statistics, ...) go to the notes of their topic (census/measure/op_notes.py);
- module hooks track which module runs: the layer, its top-level child, norms, activations,
  projections after the kernel (output projections);
- saved_tensors_hooks see every tensor autograd keeps; each storage is counted once (keyed by
  its storage object, kept alive so its identity cannot be reused), parameters, buffers and the
  layer's inputs and output are left out, and the storage is noted with the op of the region
  that saved it (census/measure/booking.py books it after the forward).
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections import Counter
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import SAC_IGNORED_OPS

from speccat.catalogue.vocabulary import OTHER
from speccat.census.kernels import attention
from speccat.census.kernels.flash_attention import heads_major
from speccat.census.kernels.scope import current_kernel
from speccat.census.measure import eager_scores, kept_modules, output_gates, readers, repeated_attention, stream_code, stream_scales
from speccat.census.measure.expert_links import ExpertLinks
from speccat.census.measure.inner_norms import AFTER_ACTIVATION, AFTER_ATTENTION, InnerNorms, norm_width
from speccat.census.measure.layer_probe import LayerProbe, OpSeen
from speccat.census.measure.op_notes import OP_NOTES
from speccat.census.structure.kernel_registry import CallSeen, KernelCall, kernel_named, kernel_of, shapes, storage_key
from speccat.census.structure.predicates import (
    is_activation_region,
    is_experts,
    is_experts_interface,
    is_learned_query_attention,
    is_norm,
    is_stacked_experts,
    is_projection,
    part_blocks,
    part_of,
    QK_NORM_NAME,
)

# The records' part (records.yaml `parts`) for a projection's input that a norm inside the same
# child made: MLA's up-projections keep their latent norms' outputs. Its bytes are booked to
# the child's op (attMM); the part matters only to what recomputing it frees (census/measure/recompute.py).
UP_INPUT = "attUp"
SOFTMAX_PACKETS = (torch.ops.aten._softmax, torch.ops.aten.softmax)


class Held:
    """What the pack hook hands autograd instead of a saved tensor.

    The graph node that saved the tensor owns it; when the node is freed (its output reaches
    nothing backward will run), the holder dies too. A weak reference to it tells, after the
    forward, whether backward can still reach the saved tensor. It holds a detached alias: a
    node that saves its own output (ReLU's, a softmax's) would otherwise hold, through the
    holder, a tensor whose grad_fn is that node, a cycle no collection frees, and a branch no
    output reaches (deepseek_v4's lightning indexer scoring the keys it picks the top-k of)
    would count as kept where a run without hooks frees it.
    """

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


def unpack(saved: Any) -> Any:
    """The tensor a holder (Held) stands for: the unpack hook beside Watcher.pack."""
    return saved.tensor if isinstance(saved, Held) else saved


class Made(NamedTuple):
    """Which call of which probe made a storage (Watcher.creator)."""

    storage: StorageWeakRef
    probe: LayerProbe
    call: int  # the call's index among the probe's calls
    nested_norm: bool  # made inside a norm nested in a child, not on the hidden stream (MLA's latent norms)
    position: int  # the tensor's position among the call's output tensors
    module: str | None = None  # the innermost module running when it was made (its path in the layer)


class DispatchWatch(TorchDispatchMode):
    """Sees every op below autograd; hands the interesting ones to the watcher."""

    def __init__(self, watcher: Watcher):
        super().__init__()
        self.watcher = watcher

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.watcher.on_op(func, args, kwargs, out)
        return out


def tokens_of(dims: tuple[int, ...], seq_length: int | None) -> int:
    """The tokens among the hidden states' dims before the width: the sequence's dim, the first of
    `seq_length`'s size, of the census's one sequence ((b, s) or (s, b), b 1). Other dims are
    streams of each token, after it (hy_v4's and deepseek_v4's hyper-connection copies of the
    stream, (b, s, streams)) or before it (gemma3n's AltUp streams, (streams, b, s)), not tokens;
    without such a dim, all of them."""
    return seq_length if seq_length in dims else math.prod(dims)


class Watcher:
    """Hooks, dispatch watching and saved-tensor accounting for the probed layers."""

    def __init__(self, layers: dict[int, nn.Module], excluded_storages: set[int]):
        self.layers = layers
        self.excluded = excluded_storages
        self.blocks = {index: part_blocks(layer) for index, layer in layers.items()}  # each layer's attention blocks and containers, whose children are its children
        self.probes = {index: LayerProbe(index) for index in layers}
        self.current: LayerProbe | None = None
        self.seq_length: int | None = None  # the tokens the decoder was given (census/measure/probe.py sets it): told apart from streams in the hidden states' dims
        self.path: list[tuple[str, nn.Module]] = []  # modules running inside the current layer
        self.last_child: str | None = None  # the layer's top-level child that ran last
        self.kernel_count_in_child: Counter = Counter()
        self.dropout_storages: set[int] = set()
        self.act_child: dict[int, str | None] = {}  # storage an activation module kept -> the layer's top-level child it ran in
        self.activation_inputs: set[int] = set()  # what inline activations in an MLP keep: F.silu's input (LFM2's), torch.relu's output (RWKV's)
        self.inline_owners: dict[int, str] = {}  # each of those storages -> the MLP module path whose inline activation kept it
        self.shifted: set[int] = set()  # token-shifted copies of the hidden states (census/measure/token_shift.py)
        self.last_projection: tuple[str, int, Any] | None = None  # the projection that returned last, its output's storage key and the storage (held: its key stays its own)
        self.gate_outputs: dict[int, str] = {}  # the output of a sigmoid of a projection -> that projection
        self.gate_chains: dict[int, tuple[str, int | None]] = {}  # a projection's output, and what elementwise ops made of it -> (that projection, the storage it was made from) (census/measure/output_gates.py)
        self.seen: dict[int, list[tuple[LayerProbe, str, int, Any]]] = {}  # storage -> its savers (probe, op, bytes, holder ref)
        self.tails: dict[int, tuple[tuple[int, ...], torch.dtype]] = {}  # storage -> the first saved tensor's last two dims and dtype
        self.saved_in: dict[int, list[tuple[str | None, int]]] = {}  # storage -> (the innermost module running, the saved tensor's rows) at each of its savers, in the savers' order (census/measure/kept_modules.py)
        self.four_d: set[int] = set()  # storages first saved as a 4-D tensor: (batch, heads, s, t) scores' shape
        self.first_shapes: dict[int, tuple[int, ...]] = {}  # storage -> the first saved tensor's shape (census/measure/head_rows.py)
        self.after_kernel: set[int] = set()  # storages first saved in a child after its kernel ran, in the layer's call (census/measure/head_rows.py)
        self.kept: list[Any] = []  # holds saved storages and masks so storage identities stay unique
        self.cuda_nbytes: dict[int, int] = {}  # storages the CUDA kernels keep in another dtype -> their CUDA bytes
        self.cuda_dtypes: dict[int, torch.dtype] = {}  # those of them CUDA keeps (not empty) -> their CUDA dtype
        self.excluded_outputs: set[int] = set()
        self.forward_done = False
        self.packing = False  # pack is making its holder's alias
        self.layer_inputs: set[int] = set()
        self.outputs: set[int] = set()  # the probed layers' outputs
        self.creator: dict[int, Made] = {}  # storage -> the call that made it
        self.linear_modules: dict[int, set[tuple[str, ...]]] = {}  # layer -> module paths a linear attention ran in
        self.fallbacks: list[str] = []  # kernel mixers that ran a depthwise convolution in torch (census/measure/kernel_fallback.py)
        self.expert_links = ExpertLinks()  # the projections feeding and reading the routed experts (census/measure/expert_links.py)
        self.inner_norms = InnerNorms()  # what each child's next projection awaits, for the norms between (census/measure/inner_norms.py)
        self.up_input_children: dict[int, str | None] = {}  # a storage booked UP_INPUT -> the child whose projection saved it
        self.param_casts: dict[int, tuple[str | None, tuple[int, ...], torch.dtype]] = {}  # a parameter's cast -> (child, the parameter's shape, the cast's dtype) (census/measure/param_casts.py)
        self.stream_scaled: set[int] = set()  # factors of the layer's own products with a per-channel scale, each kept by its product first (census/measure/stream_scales.py)
        self.channel_scaled: set[int] = set()  # factors of such products inside a child, outside its norms (census/measure/stream_scales.py)
        self.param_derived: set[int] = set()  # tensors computed from parameters and buffers alone: per-channel scales (census/measure/stream_scales.py)
        self.eager_scores: set[int] = set()  # softmax outputs of attention run as the model's eager code (census/measure/eager_scores.py)
        self.score_casts: set[int] = set()  # their casts to the compute dtype: the probabilities, booked to headCast
        self.joined_outputs: dict[int, tuple[int, Any]] = {}  # a kernel's output, or a torch.cat of them -> (the kernel outputs it holds, a weak reference to its storage) (census/measure/repeated_attention.py)

    # -- where are we -----------------------------------------------------------------------

    def child(self) -> str | None:
        """The layer's child running now: its top-level child, or inside an attention block the
        block's child (predicates.part_of)."""
        if not self.path:
            return None
        top = self.path[0][0]
        return part_of(self.path[-1][0], self.blocks[self.current.index]) if top in self.blocks[self.current.index] else top

    def made_in_child(self, probe: LayerProbe, key: int, child: str) -> bool:
        """Whether storage `key` was made in `probe`'s layer call by a module of `child` (the
        layer's child, predicates.part_of): the child's own code made it, it is no input handed
        to the child."""
        made = self.creator.get(key)
        return made is not None and made.probe is probe and made.module is not None and part_of(made.module, self.blocks[probe.index]) == child

    def _region_op(self, tensor: torch.Tensor, key: int) -> str:
        scope = current_kernel()
        depth = next((i for i, (_, module) in enumerate(self.path) if is_learned_query_attention(module)), None)
        if depth is not None:  # an attention over the stack's depth (census/kernels/attention.py): its norm's saves normOp's, its probabilities softmax's, the rest attBMM's
            if any(is_norm(module) for _, module in self.path[depth + 1 :]):
                return "normOp"
            made = self.creator.get(key)
            return "softmax" if made is not None and getattr(made.probe.calls[made.call], "overloadpacket", None) in SOFTMAX_PACKETS else "attBMM"
        if scope == attention.EAGER_ATTENTION:  # softmax attention run as written: its probabilities are softmax's, their cast headCast's, the rest attBMM's
            made = self.creator.get(key)
            if made is not None and getattr(made.probe.calls[made.call], "overloadpacket", None) in SOFTMAX_PACKETS:
                return "softmax"
            return "headCast" if key in self.score_casts else "attBMM"
        kernel = kernel_named(scope)
        if kernel is not None and kernel.keeps is not None:  # a kernel's stand-in runs: booked as its record says
            made = self.creator.get(key)
            return kernel.keeps.outputs if made is not None and made.probe.calls[made.call] is kernel.op else kernel.keeps.inputs
        for _, module in reversed(self.path):
            if is_norm(module):
                return "normOp"
            if is_activation_region(module):
                self.act_child.setdefault(key, self.child())
                return "ffAct"
        if key in self.dropout_storages:
            return "dropout"
        # the layer's own code between its children (a residual gate: mllama's cross-attention
        # layer multiplies each child's output by the tanh of a parameter) is the child's that ran last
        child = self.child() or self.last_child
        if self.path and stream_code.is_stream_code(self.path[0][1]):
            # code on the stream in a module of its own: the layer's code between its children,
            # the child's that ran last, told apart from that child's own (census/measure/stream_code.py)
            return OTHER if self.last_child is None else f"{stream_code.STREAM}{self.last_child}"
        if child is None:
            return OTHER
        return f"child:{child}"  # resolved to attMM / ffMM once the child's role is known

    # -- saved tensors ----------------------------------------------------------------------

    def pack(self, tensor: torch.Tensor) -> Any:
        """Book a storage a layer saves to the op of the region saving it; hand autograd a holder.

        Parameters, buffers and the layer's other inputs (rotary tables, masks) are left out;
        its hidden-states input counts when an op inside the layer keeps it (a LayerNorm).
        """
        probe = self.current
        if probe is None or self.forward_done or not isinstance(tensor, torch.Tensor):
            return tensor
        key = storage_key(tensor)
        if key in self.excluded or key in self.layer_inputs:
            return tensor
        self.packing = True  # the alias below is no op of the model's (on_op)
        try:
            held = Held(tensor.detach())
        finally:
            self.packing = False
        nbytes = self.cuda_nbytes.get(key, tensor.untyped_storage().nbytes())
        savers = self.seen.setdefault(key, [])
        if not savers:
            self.kept.append(tensor.untyped_storage())  # the storage, not the tensor: a tensor would keep its grad_fn alive
            self.tails[key] = (tuple(tensor.shape[-2:]), tensor.dtype)
            self.first_shapes[key] = tuple(int(d) for d in tensor.shape)
            if self.kernel_count_in_child[self.child()] > 0:
                self.after_kernel.add(key)
            if tensor.dim() == 4:
                self.four_d.add(key)
        op = self._region_op(tensor, key)
        if op == "normOp" and tensor.dim() == 1:  # a vector of the norm's width: a computed copy of its weight
            probe.norm_weight_copies.add(self._innermost_norm()[0])
        elif op == "normOp" and len(savers) == 0 and tensor.dtype == torch.float32 and tensor.dim() > 1:
            name, norm = self._innermost_norm()
            weight = getattr(norm, "weight", None)
            if isinstance(weight, torch.Tensor) and tensor.shape[-1] == weight.shape[-1]:  # a row of the norm's width per token
                probe.norm_fp32_rows[name] += 1
        savers.append((probe, op, nbytes, weakref.ref(held), self._part(key)))
        self.saved_in.setdefault(key, []).append(kept_modules.saver(self.path, tensor))
        return held

    def _innermost_norm(self) -> tuple[str | None, nn.Module | None]:
        """The path and module of the innermost norm the watched code runs in, (None, None) outside any."""
        return next(((name, m) for name, m in reversed(self.path) if is_norm(m)), (None, None))

    def _part(self, key: int) -> str | None:
        """UP_INPUT when a projection saves a norm's output made inside the same child before the
        child's kernel ran (MLA's up-projections keep their latent norms' outputs; a gated norm's
        output that the output projection keeps after the kernel is not one), else None."""
        made = self.creator.get(key)
        saver = self.path[-1][1] if self.path else None
        before_kernel = self.kernel_count_in_child[self.child()] == 0
        if made is not None and made.nested_norm and saver is not None and is_projection(saver) and before_kernel:
            self.up_input_children[key] = self.child()  # an UP_INPUT only in a child whose kernel runs after (booking.py)
            return UP_INPUT
        return None

    # -- dispatch ---------------------------------------------------------------------------

    def _note_variant_op(self, probe: LayerProbe, func, args, out) -> None:
        """Ops inside a norm, or in an ffn child outside its experts and shared MLPs (the router)."""
        first_out = out[0] if isinstance(out, (tuple, list)) and out else out
        first_in = next((a for a in args if isinstance(a, torch.Tensor)), None)
        seen = OpSeen(
            func.overloadpacket.__name__,
            first_out.dtype if isinstance(first_out, torch.Tensor) else None,
            int(first_out.shape[-1]) if isinstance(first_out, torch.Tensor) and first_out.dim() else 0,
            first_in.dtype if first_in is not None else None,
            int(first_in.shape[-1]) if first_in is not None and first_in.dim() else 0,
        )
        norm = self._innermost_norm()[0]
        if norm is not None:
            probe.norm_ops.setdefault(norm, []).append(seen)
        elif self.path and not any(is_experts(m) or "shared" in name.rsplit(".", 1)[-1] for name, m in self.path):
            probe.router_ops.setdefault(self.child(), []).append(seen)

    def _note_call(self, probe: LayerProbe, func, out) -> None:
        """Number the call as torch's selective-checkpoint policy sees it, and note the storages it made."""
        if func in SAC_IGNORED_OPS:
            return
        probe.calls.append(func)
        tensors = (leaf for leaf in tree_leaves(out) if isinstance(leaf, torch.Tensor))
        for position, tensor in enumerate(tensors):
            key = storage_key(tensor)
            known = self.creator.get(key)
            if known is None or known.storage.expired():  # new, or a dead storage's identity reused
                # a stream norm inside a child (dbrx's norm_attn_norm.norm_1) is no latent norm
                nested_norm = any(is_norm(m) and "." in name and all(name != path for path, _ in probe.stream_norms) for name, m in self.path)
                module = self.path[-1][0] if self.path else None
                self.creator[key] = Made(StorageWeakRef(tensor.untyped_storage()), probe, len(probe.calls) - 1, nested_norm, position, module)

    def _made_elsewhere(self, tensor: torch.Tensor, probe: LayerProbe) -> bool:
        """`tensor`'s storage was made by another probed layer (not this one, nor the decoder)."""
        made = self.creator.get(storage_key(tensor))
        return made is not None and not made.storage.expired() and made.probe is not probe

    def on_op(self, func, args, kwargs, out) -> None:
        """An op ran in a probed layer's forward: its call numbered, a kernel's call booked, and
        the op handed to the notes of its topic (census/measure/op_notes.py)."""
        probe = self.current
        if probe is None or self.forward_done or self.packing:
            return
        self._note_call(probe, func, out)
        if current_kernel() is None:
            self._note_variant_op(probe, func, args, out)
        kernel = kernel_of(func)
        if kernel is not None:
            child = self.child()
            probe.kernels.append(kernel.book(CallSeen(args, kwargs, child, lambda tensor: self._made_elsewhere(tensor, probe))))
            if kernel.value_arg is not None:
                probe.value_storages.add(storage_key(args[kernel.value_arg]))
            repeated_attention.kernel_called(self, probe, kernel, args, out)
            if kernel.per_child:  # the projections after it in its child are output projections
                self.kernel_count_in_child[child] += 1
                self.inner_norms.kernel_ran(child, kernel.kind)
            return
        for note in OP_NOTES.get(func, ()):
            note(self, probe, func, args, kwargs, out)
        output_gates.note_gate_op(self, probe, func, args, kwargs, out)  # any elementwise op: not one of OP_NOTES' keys
        stream_scales.note_param_derived(self, probe, func, args, kwargs, out)  # any op

    def note_eager_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, causal: bool, biased: bool = False) -> None:
        """A softmax self-attention ran as the model's eager code (census/kernels/attention.py): one
        call; `biased`: given an additive score bias."""
        if self.current is None or self.forward_done:
            return
        self.current.kernels.append(
            KernelCall(
                "attention", self.child(), shapes(q=q.shape, k=k.shape, v=v.shape), window, causal,
                heads_major=heads_major(q), eager=True, bias_given=biased,
            )
        )
        self.current.value_storages.add(storage_key(v))  # its v, as a kernel's: what a norm on the values made (v_norm_weightless)
        self.kernel_count_in_child[self.child()] += 1
        self.inner_norms.kernel_ran(self.child(), AFTER_ATTENTION)

    def note_depth_attention(self, q: torch.Tensor, k: torch.Tensor) -> None:
        """An attention over the stack's depth ran as the model's eager code (census/kernels/attention.py):
        its keys, (…, states, width), and its learned queries, (…, queries, width), per token."""
        if self.current is None or self.forward_done:
            return
        self.current.depth_calls.append((int(k.shape[-2]), int(q.shape[-2])))

    def note_linear_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gated: bool = False) -> None:
        """A linear attention's value matmul ran in torch (census/kernels/routing.py): one call per module
        that runs it, however many blocks of tokens it is written in; `gated`: its decay was
        computed from the tokens."""
        probe = self.current
        if probe is None or self.forward_done:
            return
        where = tuple(name for name, _ in self.path)
        if where in self.linear_modules.setdefault(probe.index, set()):
            return
        self.linear_modules[probe.index].add(where)
        # the storages q, k and v view, whole: a fused projection's output is kept whole by its views
        storages = {storage_key(t): t.untyped_storage().nbytes() // t.element_size() for t in (q, k, v)}
        row = sum(storages.values()) // max(probe.tokens, 1)
        # not counted per child: the projections around it are the mixer's own (describe.py scan_projections)
        shared = storage_key(q) == storage_key(k) == storage_key(v)
        probe.kernels.append(KernelCall("linear_eager", self.child(), shapes(q=q.shape, k=k.shape, v=v.shape), gated=gated, qkv_row=row, qk_share_v=shared))

    # -- module hooks -----------------------------------------------------------------------

    def _layer_pre(self, index: int):
        def hook(module, args, kwargs):
            if not torch.is_grad_enabled():
                # a call run without grad keeps nothing for backward (hrm_text's earlier cycles,
                # under torch.no_grad()): not watched, not counted
                self.current = None
                return
            self.current = self.probes[index]
            self.current.ran = True
            self.current.call_starts.append(len(self.current.calls))
            self.current.call_norm_starts.append(len(self.current.stream_norms))
            self.current.call_children.append(set())
            self.path = []
            self.last_child = None
            self.kernel_count_in_child = Counter()
            self.expert_links.clear()
            self.inner_norms.clear()
            hidden = args[0] if args else kwargs.get("hidden_states")
            hidden_key = storage_key(hidden) if isinstance(hidden, torch.Tensor) else None
            if isinstance(hidden, torch.Tensor) and hidden.dim() > 0:
                self.current.hidden_width = int(hidden.shape[-1])
                self.current.tokens = tokens_of(tuple(int(d) for d in hidden.shape[:-1]), self.seq_length)
                self.current.hidden_dims = tuple(int(d) for d in hidden.shape[:-1])
            self.layer_inputs = {storage_key(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)} - {hidden_key}
            self.current.call_inputs.append(set(self.layer_inputs))
            self.current.reads_depth = readers.reads_depth((args, kwargs), hidden)

        return hook

    def _layer_post(self, index: int):
        def hook(module, args, kwargs, output):
            # the hidden states it hands on (the next layer's input) are not the layer's to keep;
            # other outputs (xLSTM's recurrent states, which training drops) are kept only by
            # what saved them, and stay booked
            if not torch.is_grad_enabled():
                return  # a call run without grad: not watched (_layer_pre)
            probe = self.probes[index]
            hidden = (*probe.hidden_dims, probe.hidden_width)
            outputs = {storage_key(t) for t in tree_leaves(output) if isinstance(t, torch.Tensor) and tuple(t.shape) == hidden}
            self.outputs |= outputs
            for key in outputs:
                savers = self.seen.get(key)
                if savers and savers[0][0] is self.probes[index]:
                    self.excluded_outputs.add(key)
            self.current = None
            self.path = []

        return hook

    def _enter(self, name: str, module: nn.Module, depth_one: bool):
        def hook(mod, args):
            if self.current is None:
                return
            self.path.append((name, module))
            probe = self.current
            probe.children_ran.add(name.split(".", 1)[0])  # its own forward, or one of its modules' (code that calls self.mlp.fc1 directly)
            probe.call_children[-1].add(name.split(".", 1)[0])
            probe.children_ran.add(part_of(name, self.blocks[probe.index]))  # an attention block's child
            inner = None
            if is_norm(module) and not any(is_norm(m) for _, m in self.path[:-1]):
                probe.norm_calls[name] += 1
                if args and isinstance(args[0], torch.Tensor) and args[0].dim() > 0 and args[0].shape[-1] > 0:
                    probe.norm_rows[name] += args[0].numel() // int(args[0].shape[-1]) // max(probe.tokens, 1)
                inner = None if depth_one else self.inner_norms.follows(self.child())
                if inner == AFTER_ACTIVATION and self._on_stream(name, module, args, depth_one):
                    inner = None  # of the hidden width after an MLP: a norm on the block's output (axk1's post_mlp_layernorm)
                if inner is not None:
                    probe.inner_norms.append((name, self.child(), inner, norm_width(args)))
            if is_norm(module) and inner is None and self._on_stream(name, module, args, depth_one):
                probe.stream_norms.append((name, storage_key(args[0])))
            if is_experts(module) and args:
                self.expert_links.experts_called(probe, name, args[0])
            if is_experts_interface(module) and len(args) > 2 and isinstance(args[2], torch.Tensor):
                probe.routing_weights_dtype = args[2].dtype
                probe.experts_top_k = int(args[1].shape[-1])
                probe.experts_rows[name] += int(args[1].numel())
            elif is_stacked_experts(module) and args and isinstance(args[0], torch.Tensor) and args[0].dim() > 0:
                probe.experts_rows[name] += int(args[0].numel()) // int(args[0].shape[-1])  # the token slots the experts ran over
                if not depth_one and self.kernel_count_in_child[name.split(".", 1)[0]] > 0:
                    probe.output_projections.append(name)  # routed after the attention's kernel: its output projection (jetmoe's mixture of attention heads)
            if is_projection(module):
                child = part_of(name, self.blocks[probe.index])
                self.inner_norms.projection_called(self.child())
                probe.projection_order.setdefault(child, []).append(name)
                read = args[0] if args and isinstance(args[0], torch.Tensor) else None
                probe.projection_call_inputs.setdefault(child, []).append(None if read is None else storage_key(read))
                if read is not None:
                    probe.projection_inputs.setdefault(child, set()).add(storage_key(args[0]))
                    chain = self.gate_chains.get(storage_key(read))
                    if chain is not None:
                        probe.projections_fed[name] = chain[0]
                    if not self.made_in_child(probe, storage_key(read), child) and read.dim() > 0 and read.numel() == probe.tokens * read.shape[-1]:
                        probe.outer_row_inputs.add(storage_key(read))
                    self.expert_links.projection_called(probe, name, args[0])
                if not depth_one and self.kernel_count_in_child[child] > 0:
                    probe.output_projections.append(name)
            if is_activation_region(module) and not self._inside_activation():
                probe.activations[self._owner_of_activation()] += 1
                self.inner_norms.activation_ran(self.child(), self.kernel_count_in_child[self.child()])

        return hook

    def _leave(self, mod, args, output):
        if self.current is not None and self.path:
            name, module = self.path.pop()
            if is_projection(module) and isinstance(output, torch.Tensor):
                self.last_projection = (name, storage_key(output), output.untyped_storage())
                output_gates.projection_returned(self, name, output)
                self.expert_links.projection_returned(name, output)
            if is_experts(module):
                self.expert_links.experts_returned(output)
            if is_norm(module) and isinstance(output, torch.Tensor):
                self.current.norm_outputs.setdefault(name, set()).add(storage_key(output))
                output_gates.norm_returned(self, self.current, args, output)
            # a stream norm is never the child that ran last: the layer's code after a norm that
            # closes a branch (ergo's and dory's post-norms, then their residual gates) is that
            # branch's, as it is where no norm closes it
            if not self.path and not stream_code.is_stream_code(module) and not is_norm(module):
                self.last_child = name.split(".", 1)[0]

    def _on_stream(self, name: str, module: nn.Module, args: tuple, depth_one: bool) -> bool:
        """A norm call on the layer's hidden stream (see LayerProbe.stream_norms)."""
        if any(is_norm(m) for _, m in self.path[:-1]) or not args or not isinstance(args[0], torch.Tensor):
            return False
        if any(is_learned_query_attention(m) for _, m in self.path[:-1]):
            return False  # the norm of an attention over the stack's depth (census/kernels/attention.py)
        if any(is_experts(m) for _, m in self.path[:-1]):
            return False  # a norm inside the routed experts runs over their slots (ergo's post_expert_norm: experts_out_norms)
        if not depth_one and any(where[:1] == (name.split(".", 1)[0],) for where in self.linear_modules.get(self.current.index, ())):
            return False  # the output norm of a linear attention run in torch, whatever its width (census/kernels/routing.py)
        return depth_one or (args[0].shape[-1] == self.current.hidden_width and not QK_NORM_NAME.match(name.rsplit(".", 1)[-1]))

    def _inside_activation(self) -> bool:
        return any(is_activation_region(m) for _, m in self.path[:-1])

    def _owner_of_activation(self) -> str:
        """The path of the module an activation call belongs to: its experts or MLP (its parent);
        an activation that is itself a child of the layer (bart's activation_fn between fc1 and
        fc2, the layer's own children) is its own owner."""
        names = [n for n, _ in self.path]
        return names[-2] if len(names) > 1 else names[-1]

    @contextlib.contextmanager
    def hooks(self) -> Iterator[None]:
        handles = []
        try:
            for index, layer in self.layers.items():
                handles.append(layer.register_forward_pre_hook(self._layer_pre(index), with_kwargs=True))
                handles.append(layer.register_forward_hook(self._layer_post(index), with_kwargs=True))
                blocks = self.blocks[index]
                for name, module in layer.named_modules():
                    if not name:
                        continue
                    handles.append(module.register_forward_pre_hook(self._enter(name, module, part_of(name, blocks) == name)))
                    handles.append(module.register_forward_hook(self._leave))
            yield
        finally:
            for handle in handles:
                handle.remove()


"""Probing: one layer of each distinct shape run forward and backward on fake tensors, and
watched (docs/census.md, "How a config becomes a spec", step 4, and "Measured bytes").

The decoder's own forward runs (so masks, rotary positions, 3-axis positions and per-layer-type
rope are exactly what transformers gives a layer), but with only the probed layers in its stack
(census/measure/layer_subset.py), converted from meta to fake tensors. While it runs:

- a TorchDispatchMode sees every op: the kernels (their inputs state heads and widths), the
  router's top-k, dropouts;
- module hooks track which module runs: the layer, its top-level child, norms, activations,
  projections after the kernel (output projections);
- saved_tensors_hooks see every tensor autograd keeps; each storage is counted once (keyed by
  its storage object, kept alive so its identity cannot be reused), parameters, buffers and the
  layer's inputs and output are left out, and the storage is booked to the op of the region
  that first saved it.

The kernels are the registered ones (census/structure/kernel_registry.py): each function of a
layer's forward that a kernel stands in for is pointed at its stand-in while the layers run
(census/measure/kernel_stand_ins.py), each call of a kernel's op is booked as its record's `book`
says, and what is saved while its stand-in runs as its `keeps` says.

What one layer did is its `LayerProbe` (census/measure/layer_probe.py). Nothing here is global:
hooks are removed, the swapped kernel functions restored and the modes popped when the probe
ends, whatever happens.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch import nn
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import SAC_IGNORED_OPS

from speccat.catalogue.vocabulary import OTHER
from speccat.census.kernels import attention
from speccat.census.kernels.flash_attention import heads_major
from speccat.census.kernels.scope import current_kernel
from speccat.census.build import inputs
from speccat.census.measure import readers
from speccat.census.build.model import Built
from speccat.census.measure.flops import LayerFlops
from speccat.census.measure.layer_probe import LayerProbe, OpSeen
from speccat.census.measure.kernel_stand_ins import kernels_swapped
from speccat.census.measure.layer_subset import config_subset, index_keyed_subset, index_lists_subset
from speccat.census.measure.model_code import ModelCodeError, failing_model_code, model_code
from speccat.census.structure.kernel_registry import CallSeen, KernelCall, kernel_named, kernel_of, storage_key
from speccat.census.structure.predicates import (
    expects_conv_kernel,
    is_activation,
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
from speccat.census.measure.expert_counts import assumed_routing
from speccat.census.build.fake import fake_mode_of, make_fake, make_meta_fake
from speccat.census.kernels.routing import route_attention
from speccat.census.spec import SpecError

CONVOLUTION = torch.ops.aten.convolution.default
# The records' part (records.yaml `parts`) for a projection's input that a norm inside the same
# child made: MLA's up-projections keep their latent norms' outputs. Its bytes are booked to
# the child's op (attMM); the part matters only to what recomputing it frees (census/measure/recompute.py).
UP_INPUT = "attUp"
INLINE_ACTIVATIONS = {torch.ops.aten.silu.default, torch.ops.aten.gelu.default, torch.ops.aten.relu.default}
# Inline activations whose backward reads their result, so autograd keeps their output (ReLU's
# threshold_backward), where SiLU and GELU keep their input.
OUTPUT_KEEPING_ACTIVATIONS = {torch.ops.aten.relu.default}
# A token shift (RWKV's time_shift, ZeroPad2d((0, 0, 1, -1))): each position takes the previous
# token's row, as a pad of the token dim by one in front and one less behind; a token mix is a
# product of that shifted copy (x_{t-1}·(1 − μ)).
TOKEN_SHIFT_OP = torch.ops.aten.constant_pad_nd.default
TOKEN_MIX_OP = torch.ops.aten.mul.Tensor
SIGMOID_OP = torch.ops.aten.sigmoid.default
SOFTMAX_PACKETS = (torch.ops.aten._softmax, torch.ops.aten.softmax)
DROPOUT_OPS = {
    torch.ops.aten.bernoulli_.float: lambda args, kwargs: args[1] if len(args) > 1 else kwargs.get("p", 0.5),
    torch.ops.aten.native_dropout.default: lambda args, kwargs: 1.0 - args[1],
}


_storage_key = storage_key  # the key every storage is booked by (census/structure/kernel_registry.py)


def _shifts_tokens(x: Any, pad: Any, out: Any, hidden: int) -> bool:
    """A pad of hidden states (b, s, hidden) that moves every row one token later: the token dim
    padded by k in front and cut by k behind, the hidden dim untouched (TOKEN_SHIFT_OP)."""
    return (
        isinstance(x, torch.Tensor)
        and x.dim() == 3
        and int(x.shape[-1]) == hidden
        and tuple(out.shape) == tuple(x.shape)
        and len(pad) == 4
        and pad[0] == pad[1] == 0
        and pad[2] > 0
        and pad[3] == -pad[2]
    )


class _Held:
    """What the pack hook hands autograd instead of a saved tensor.

    The graph node that saved the tensor owns it; when the node is freed (its output reaches
    nothing backward will run), the holder dies too. A weak reference to it tells, after the
    forward, whether backward can still reach the saved tensor.
    """

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


def _unpack(saved: Any) -> Any:
    return saved.tensor if isinstance(saved, _Held) else saved


# The CUDA dtypes of tensors the CPU kernels keep in another dtype: a dropout mask is bool, a
# LayerNorm's mean and rstd are in the accumulation dtype (fp32 for half inputs).
_CUDA_MASK_DTYPE = torch.bool
_LAYER_NORM_OPS = {torch.ops.aten.native_layer_norm.default}
# Outputs a CPU kernel fills that the CUDA kernel leaves empty, by op and output position:
# log_sigmoid's buffer (exp(−|x|), which the CUDA backward recomputes; torch's own decomposition
# of log_sigmoid_forward makes it empty on CUDA), kept by its backward: 0 bytes on CUDA.
_EMPTY_ON_CUDA = {torch.ops.aten.log_sigmoid_forward.default: 1}


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32) if dtype.is_floating_point else dtype


def layer_norm_stats_cuda_nbytes(func, args, out) -> dict[int, int]:
    """A LayerNorm call's mean and rstd storages → their bytes in CUDA's accumulation dtype
    (the CPU kernel keeps them in the input's dtype); empty for any other op."""
    if func not in _LAYER_NORM_OPS:
        return {}
    return {_storage_key(stat): stat.numel() * _acc_dtype(args[0].dtype).itemsize for stat in out[1:]}


class Made(NamedTuple):
    """Which call of which probe made a storage (Watcher.creator)."""

    storage: StorageWeakRef
    probe: LayerProbe
    call: int  # the call's index among the probe's calls
    nested_norm: bool  # made inside a norm nested in a child (MLA's latent norms)
    position: int  # the tensor's position among the call's output tensors


class _DispatchWatch(TorchDispatchMode):
    """Sees every op below autograd; hands the interesting ones to the watcher."""

    def __init__(self, watcher: Watcher):
        super().__init__()
        self.watcher = watcher

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.watcher.on_op(func, args, kwargs, out)
        return out


class Watcher:
    """Hooks, dispatch watching and saved-tensor accounting for the probed layers."""

    def __init__(self, layers: dict[int, nn.Module], excluded_storages: set[int]):
        self.layers = layers
        self.excluded = excluded_storages
        self.blocks = {index: part_blocks(layer) for index, layer in layers.items()}  # each layer's attention blocks and containers, whose children are its children
        self.probes = {index: LayerProbe(index) for index in layers}
        self.current: LayerProbe | None = None
        self.path: list[tuple[str, nn.Module]] = []  # modules running inside the current layer
        self.last_child: str | None = None  # the layer's top-level child that ran last
        self.kernel_count_in_child: Counter = Counter()
        self.dropout_storages: set[int] = set()
        self.act_child: dict[int, str | None] = {}  # storage an activation module kept -> the layer's top-level child it ran in
        self.activation_inputs: set[int] = set()  # what inline activations in an MLP keep: F.silu's input (LFM2's), torch.relu's output (RWKV's)
        self.shifted: set[int] = set()  # token-shifted copies of the hidden states (TOKEN_SHIFT_OP)
        self.last_projection: tuple[str, int, Any] | None = None  # the projection that returned last, its output's storage key and the storage (held: its key stays its own)
        self.gate_outputs: dict[int, str] = {}  # the output of a sigmoid of a projection -> that projection
        self.seen: dict[int, list[tuple[LayerProbe, str, int, Any]]] = {}  # storage -> its savers (probe, op, bytes, holder ref)
        self.tails: dict[int, tuple[tuple[int, ...], torch.dtype]] = {}  # storage -> the first saved tensor's last two dims and dtype
        self.four_d: set[int] = set()  # storages first saved as a 4-D tensor: (batch, heads, s, t) scores' shape
        self.kept: list[Any] = []  # holds saved storages and masks so storage identities stay unique
        self.cuda_nbytes: dict[int, int] = {}  # storages the CUDA kernels keep in another dtype -> their CUDA bytes
        self.excluded_outputs: set[int] = set()
        self.forward_done = False
        self.layer_inputs: set[int] = set()
        self.outputs: set[int] = set()  # the probed layers' outputs
        self.creator: dict[int, Made] = {}  # storage -> the call that made it
        self.linear_modules: dict[int, set[tuple[str, ...]]] = {}  # layer -> module paths a linear attention ran in
        self.fallbacks: list[str] = []  # kernel mixers that ran a depthwise convolution in torch (see _note_fallback)

    # -- where are we -----------------------------------------------------------------------

    def _child(self) -> str | None:
        """The layer's child running now: its top-level child, or inside an attention block the
        block's child (predicates.part_of)."""
        if not self.path:
            return None
        top = self.path[0][0]
        return part_of(self.path[-1][0], self.blocks[self.current.index]) if top in self.blocks[self.current.index] else top

    def _region_op(self, tensor: torch.Tensor, key: int) -> str:
        if any(is_learned_query_attention(module) for _, module in self.path):
            return OTHER  # an attention over the stack's depth, its norm included: no op the records price (census/kernels/attention.py)
        scope = current_kernel()
        if scope == attention.EAGER_ATTENTION:  # softmax attention run as written: its probabilities are softmax's, the rest attBMM's
            made = self.creator.get(key)
            return "softmax" if made is not None and getattr(made.probe.calls[made.call], "overloadpacket", None) in SOFTMAX_PACKETS else "attBMM"
        kernel = kernel_named(scope)
        if kernel is not None and kernel.keeps is not None:  # a kernel's stand-in runs: booked as its record says
            made = self.creator.get(key)
            return kernel.keeps.outputs if made is not None and made.probe.calls[made.call] is kernel.op else kernel.keeps.inputs
        for _, module in reversed(self.path):
            if is_norm(module):
                return "normOp"
            if is_activation_region(module):
                self.act_child.setdefault(key, self._child())
                return "ffAct"
        if key in self.dropout_storages:
            return "dropout"
        # the layer's own code between its children (a residual gate: mllama's cross-attention
        # layer multiplies each child's output by the tanh of a parameter) is the child's that ran last
        child = self._child() or self.last_child
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
        key = _storage_key(tensor)
        if key in self.excluded or key in self.layer_inputs:
            return tensor
        held = _Held(tensor)
        nbytes = self.cuda_nbytes.get(key, tensor.untyped_storage().nbytes())
        savers = self.seen.setdefault(key, [])
        if not savers:
            self.kept.append(tensor.untyped_storage())  # the storage, not the tensor: a tensor would keep its grad_fn alive
            self.tails[key] = (tuple(tensor.shape[-2:]), tensor.dtype)
            if tensor.dim() == 4:
                self.four_d.add(key)
        op = self._region_op(tensor, key)
        if op == "normOp" and tensor.dim() == 1:  # a vector of the norm's width: a computed copy of its weight
            probe.norm_weight_copies.add(next(name for name, m in reversed(self.path) if is_norm(m)))
        savers.append((probe, op, nbytes, weakref.ref(held), self._part(key)))
        return held

    def _part(self, key: int) -> str | None:
        """UP_INPUT when a projection saves a norm's output made inside the same child before the
        child's kernel ran (MLA's up-projections keep their latent norms' outputs; a gated norm's
        output that the output projection keeps after the kernel is not one), else None."""
        made = self.creator.get(key)
        saver = self.path[-1][1] if self.path else None
        before_kernel = self.kernel_count_in_child[self._child()] == 0
        return UP_INPUT if made is not None and made.nested_norm and saver is not None and is_projection(saver) and before_kernel else None

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
        norm = next((name for name, m in reversed(self.path) if is_norm(m)), None)
        if norm is not None:
            probe.norm_ops.setdefault(norm, []).append(seen)
        elif self.path and not any(is_experts(m) or "shared" in name.rsplit(".", 1)[-1] for name, m in self.path):
            probe.router_ops.setdefault(self._child(), []).append(seen)

    def _note_call(self, probe: LayerProbe, func, out) -> None:
        """Number the call as torch's selective-checkpoint policy sees it, and note the storages it made."""
        if func in SAC_IGNORED_OPS:
            return
        probe.calls.append(func)
        tensors = (leaf for leaf in tree_leaves(out) if isinstance(leaf, torch.Tensor))
        for position, tensor in enumerate(tensors):
            key = _storage_key(tensor)
            known = self.creator.get(key)
            if known is None or known.storage.expired():  # new, or a dead storage's identity reused
                nested_norm = any(is_norm(m) and "." in name for name, m in self.path)
                self.creator[key] = Made(StorageWeakRef(tensor.untyped_storage()), probe, len(probe.calls) - 1, nested_norm, position)

    def _made_elsewhere(self, tensor: torch.Tensor, probe: LayerProbe) -> bool:
        """`tensor`'s storage was made by another probed layer (not this one, nor the decoder)."""
        made = self.creator.get(_storage_key(tensor))
        return made is not None and not made.storage.expired() and made.probe is not probe

    def on_op(self, func, args, kwargs, out) -> None:
        probe = self.current
        if probe is None or self.forward_done:
            return
        self._note_call(probe, func, out)
        if func is CONVOLUTION:
            self._note_fallback(args)
        if current_kernel() is None:
            self._note_variant_op(probe, func, args, out)
            if func is torch.ops.aten.gather.default and out.dim() >= 2 and out.shape[-1] == out.shape[-2]:
                probe.score_gathers.append((self._child(), tuple(args[0].shape), args[0].element_size(), tuple(out.shape)))
        kernel = kernel_of(func)
        if kernel is not None:
            child = self._child()
            probe.kernels.append(kernel.book(CallSeen(args, kwargs, child, lambda tensor: self._made_elsewhere(tensor, probe))))
            if kernel.value_arg is not None:
                probe.value_storages.add(_storage_key(args[kernel.value_arg]))
            if kernel.per_child:  # the projections after it in its child are output projections
                self.kernel_count_in_child[child] += 1
        elif func in INLINE_ACTIVATIONS and current_kernel() is None and self._in_mlp():
            probe.activations[self.path[-1][0]] += 1
            kept = out if func in OUTPUT_KEEPING_ACTIVATIONS else args[0]
            self.activation_inputs.add(_storage_key(kept))
            self.kept.append(kept.untyped_storage())
        elif func in DROPOUT_OPS and current_kernel() is None:
            keep = DROPOUT_OPS[func](args, kwargs)
            if keep < 1.0:
                probe.dropouts += 1
                mask = args[0] if func is torch.ops.aten.bernoulli_.float else out[1]
                key = _storage_key(mask)
                self.dropout_storages.add(key)
                self.cuda_nbytes[key] = mask.numel() * _CUDA_MASK_DTYPE.itemsize
                self.kept.append(mask.untyped_storage())  # alive, so no later storage can take its identity
        elif func in _EMPTY_ON_CUDA:
            buffer = out[_EMPTY_ON_CUDA[func]]
            self.cuda_nbytes[_storage_key(buffer)] = 0
            self.kept.append(buffer.untyped_storage())  # alive, so no later storage can take its identity
        elif func in _LAYER_NORM_OPS:
            self.cuda_nbytes.update(layer_norm_stats_cuda_nbytes(func, args, out))
            self.kept.extend(stat.untyped_storage() for stat in out[1:])
        elif func is TOKEN_SHIFT_OP and _shifts_tokens(args[0], args[1], out, probe.hidden_width):
            self.shifted.add(_storage_key(out))
            self.kept.append(out.untyped_storage())
        elif func is TOKEN_MIX_OP:
            read = {_storage_key(a) for a in args if isinstance(a, torch.Tensor)}
            if read & self.shifted:
                probe.token_mixes[self._child()] += 1
            if not self.path and out.dim() and read & self.layer_inputs:  # the layer's own code, with one of its other inputs
                probe.input_products.add(int(out.shape[-1]))
            for key in read & self.gate_outputs.keys():
                probe.sigmoid_gates[self.gate_outputs[key]].add(_storage_key(out))
        elif func is SIGMOID_OP and current_kernel() is None and self._sigmoid_of_projection(args[0]):
            path = self.last_projection[0]
            probe.sigmoid_gates.setdefault(path, set())
            self.gate_outputs[_storage_key(out)] = path
            self.kept.append(out.untyped_storage())

    def _note_fallback(self, args: tuple) -> None:
        """A depthwise 1-D convolution run in torch inside a mixer whose causal conv runs in a
        kernel (predicates.expects_conv_kernel): the census's stand-in did not see the kernel
        function (renamed, or moved where no hook lists it), so what ran is the torch fallback,
        which keeps other tensors. Noted here, refused after the forward."""
        x, weight, groups = args[0], args[1], args[8]
        if weight.dim() != 3 or groups <= 1 or groups != x.shape[1]:
            return
        mixer = next((name for name, module in self.path if expects_conv_kernel(module)), None)
        if mixer is not None:
            self.fallbacks.append(f"{mixer} ({type(dict(self.path)[mixer]).__name__})")

    def _sigmoid_of_projection(self, x: Any) -> bool:
        """An inline sigmoid (outside any activation module) of the output the last projection returned."""
        return (
            self.last_projection is not None
            and isinstance(x, torch.Tensor)
            and _storage_key(x) == self.last_projection[1]
            and not any(is_activation_region(m) for _, m in self.path)
        )

    def note_eager_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, causal: bool) -> None:
        """A softmax self-attention ran as the model's eager code (census/kernels/attention.py): one call."""
        if self.current is None or self.forward_done:
            return
        self.current.kernels.append(
            KernelCall(
                "attention", self._child(), tuple(q.shape), tuple(k.shape), tuple(v.shape), window, causal,
                heads_major=heads_major(q), eager=True,
            )
        )
        self.kernel_count_in_child[self._child()] += 1

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
        # not counted per child: the projections around it are the mixer's own (describe.py scan_projections)
        probe.kernels.append(KernelCall("linear_eager", self._child(), tuple(q.shape), tuple(k.shape), tuple(v.shape), gated=gated))

    def _in_mlp(self) -> bool:
        """The op runs in an MLP's own code (its module holds two or more projections, is no
        attention module and no experts), outside any norm or activation module: an activation
        written inline (F.silu)."""
        if not self.path:
            return False
        module = self.path[-1][1]
        if is_experts(module) or "Attention" in type(module).__name__ or any(is_norm(m) or is_activation_region(m) for _, m in self.path):
            return False
        return sum(1 for c in module.children() if is_projection(c)) >= 2

    # -- module hooks -----------------------------------------------------------------------

    def _layer_pre(self, index: int):
        def hook(module, args, kwargs):
            self.current = self.probes[index]
            self.current.ran = True
            self.path = []
            self.last_child = None
            self.kernel_count_in_child = Counter()
            hidden = args[0] if args else kwargs.get("hidden_states")
            hidden_key = _storage_key(hidden) if isinstance(hidden, torch.Tensor) else None
            if isinstance(hidden, torch.Tensor) and hidden.dim() > 0:
                self.current.hidden_width = int(hidden.shape[-1])
                self.current.tokens = hidden.numel() // max(int(hidden.shape[-1]), 1)
                self.current.hidden_dims = tuple(int(d) for d in hidden.shape[:-1])
            self.layer_inputs = {_storage_key(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)} - {hidden_key}
            self.current.reads_depth = readers.reads_depth((args, kwargs), hidden)

        return hook

    def _layer_post(self, index: int):
        def hook(module, args, kwargs, output):
            # the hidden states it hands on (the next layer's input) are not the layer's to keep;
            # other outputs (xLSTM's recurrent states, which training drops) are kept only by
            # what saved them, and stay booked
            probe = self.probes[index]
            hidden = (*probe.hidden_dims, probe.hidden_width)
            outputs = {_storage_key(t) for t in tree_leaves(output) if isinstance(t, torch.Tensor) and tuple(t.shape) == hidden}
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
            probe.children_ran.add(part_of(name, self.blocks[probe.index]))  # an attention block's child
            if is_norm(module) and not any(is_norm(m) for _, m in self.path[:-1]):
                probe.norm_calls[name] += 1
            if is_norm(module) and self._on_stream(name, module, args, depth_one):
                probe.stream_norms.append((name, _storage_key(args[0])))
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
                probe.projection_order.setdefault(child, []).append(name)
                if args and isinstance(args[0], torch.Tensor):
                    probe.projection_inputs.setdefault(child, set()).add(_storage_key(args[0]))
                if not depth_one and self.kernel_count_in_child[child] > 0:
                    probe.output_projections.append(name)
            if is_activation_region(module) and not self._inside_activation():
                probe.activations[self._owner_of_activation()] += 1

        return hook

    def _leave(self, mod, args, output):
        if self.current is not None and self.path:
            name, module = self.path.pop()
            if is_projection(module) and isinstance(output, torch.Tensor):
                self.last_projection = (name, _storage_key(output), output.untyped_storage())
            if is_norm(module) and isinstance(output, torch.Tensor):
                self.current.norm_outputs.setdefault(name, set()).add(_storage_key(output))
            if not self.path:
                self.last_child = name.split(".", 1)[0]

    def _on_stream(self, name: str, module: nn.Module, args: tuple, depth_one: bool) -> bool:
        """A norm call on the layer's hidden stream (see LayerProbe.stream_norms)."""
        if any(is_norm(m) for _, m in self.path[:-1]) or not args or not isinstance(args[0], torch.Tensor):
            return False
        if any(is_learned_query_attention(m) for _, m in self.path[:-1]):
            return False  # the norm of an attention over the stack's depth (census/kernels/attention.py)
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


class _ActivationRegion(nn.Module):
    """Runs an experts module's own gate function as an activation region (gpt-oss's clamped SwiGLU)."""

    _speccat_activation = True  # what predicates.is_activation_region looks for

    def __init__(self, gate):
        super().__init__()
        self.gate = gate

    def forward(self, x):
        return self.gate(x)


def _mark_inline_activations(layer: nn.Module) -> None:
    """Experts whose activation is inline code rather than a module get their gate wrapped as one.

    The wrapper is an instance attribute of this fake layer only; the class is untouched.
    """
    for module in layer.modules():
        if is_experts_interface(module) and module.has_gate and not any(is_activation(m) for m in module.modules()):
            module.add_module("_speccat_gate", _ActivationRegion(module._apply_gate))
            object.__setattr__(module, "_apply_gate", module._speccat_gate)  # the instance wins over the class method


def probe_layers(
    built: Built,
    indices: list[int],
    seq_length: int,
    fake_mode: FakeTensorMode | None = None,
    backward: bool = True,
    encoder_tokens: int = 0,
    flops: bool = False,
) -> dict[int, LayerProbe]:
    """Probe the layers `indices`: the decoder forward and backward with only them in its stack, on fake tensors.

    The model is on meta and its needed parts are converted to fake tensors, unless `fake_mode`
    is given: then the model was built under that mode and is fake already. Without
    `backward`, the saved bytes are booked after the forward alone (a second measurement of
    layers whose backward the census has run). With `encoder_tokens`, the decoder is also given
    encoder states of that many tokens (encoder_input names its argument). With `flops`, each
    probe's `forward_flops` is counted in the same forward (census/measure/flops.py).
    """
    return run_layers(built, indices, seq_length, Watcher, fake_mode=fake_mode, backward=backward, encoder_tokens=encoder_tokens, flops=flops).probes


# The names under which a decoder's forward takes encoder states (mllama's text model:
# cross_attention_states; an encoder-decoder's decoder: encoder_hidden_states).
ENCODER_INPUTS = ("cross_attention_states", "encoder_hidden_states")


def encoder_input(module: nn.Module) -> str | None:
    """The argument of `module`'s forward that takes encoder states, or None."""
    try:
        takes = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return None
    return next((name for name in ENCODER_INPUTS if name in takes), None)


def run_layers(
    built: Built,
    indices: list[int],
    seq_length: int,
    make_watcher: Callable[[dict[int, nn.Module], set[int]], Watcher],
    around: Callable[[dict[int, nn.Module], Watcher], contextlib.AbstractContextManager] | None = None,
    fake_mode: FakeTensorMode | None = None,
    backward: bool = True,
    encoder_tokens: int = 0,
    flops: bool = False,
) -> Watcher:
    """Run the decoder with only the layers `indices` in its stack, watched by `make_watcher(...)`.

    Plain probing (no `around`) books what backward can reach after the forward and runs the
    backward; with `around` (a context wrapping the layers' forwards, census/measure/recompute.py) the
    forward alone runs and the watcher counts. With `flops`, FlopCounterMode counts the forward
    (below the watcher's dispatch mode, so the watcher sees the ops as they were called) and
    each probe gets its layer's FLOPs.

    The decoder runs the first of census/build/inputs.py's ways that its own code does not fail
    (`ModelCodeError`), tried in turn on a model's first run; the way that worked is kept on
    `built` for every later run. When every way fails, the first way's error is raised, with
    the last's.
    """
    args = (seq_length, make_watcher, around, fake_mode, backward, encoder_tokens, flops)
    try:
        watcher = _run_some_way(built, readers.with_sources(indices, built.sources or {}), *args)
    except ModelCodeError:
        if built.sources is not None or len(indices) == len(built.layers):
            raise
        built.sources = _find_sources(built, seq_length)
        wider = readers.with_sources(indices, built.sources)
        if wider == sorted(indices):
            raise
        watcher = _run_some_way(built, wider, *args)
    if any(probe.reads_depth for probe in watcher.probes.values()):
        # layers that read the states stored down the stack's depth run with every layer before them
        built.sources = readers.with_earlier(built.sources or {}, len(built.layers))
        wider = readers.with_sources(indices, built.sources)
        if wider != sorted(watcher.probes):
            watcher = _run_some_way(built, wider, *args)
    # the layers run only for what they store (a source another probed layer reads) are not probed
    watcher.probes = {index: watcher.probes[index] for index in indices}
    return watcher


def _run_some_way(built: Built, indices: list[int], *args: Any) -> Watcher:
    """_run_layers, the way kept on `built`, else each of census/build/inputs.py's ways in turn."""
    run = functools.partial(_run_layers, built, indices, *args)
    if built.way is not None:
        return run(built.way)
    tried = inputs.ways(built.decoder)
    first = None
    for way in tried:
        try:
            watcher = run(way)
        except ModelCodeError as err:
            first = first or err
            last = err
            continue
        built.way = way
        return watcher
    if last is first:
        raise first
    raise ModelCodeError(first.reason, f"{first}; {tried[-1].words()}: {last}") from last


def _find_sources(built: Built, seq_length: int) -> dict[int, set[int]]:
    """Which earlier layers each layer reads from (census/measure/readers.py): the decoder's forward
    with its whole stack, watched, the first of census/build/inputs.py's ways that runs; {} when none
    does (the probe's own error stands then)."""
    decoder = built.decoder
    every = list(range(len(built.layers)))
    fake_mode = fake_mode_of(decoder) or FakeTensorMode(allow_non_fake_inputs=True)
    make_meta_fake(decoder, fake_mode)
    for way in inputs.ways(decoder):
        tracker = readers.StoredReads(built.layers)
        try:
            with fake_mode, torch.no_grad(), config_subset(built.config, every, len(every), way.probed_count), kernels_swapped(dict(enumerate(built.layers))), route_attention(seq_length), assumed_routing(built.layers), tracker.hooks():
                decoder(use_cache=False, **inputs.decoder_inputs(way.feed, built.embedding, seq_length))
        except Exception:  # the model's code fails this way too: the next
            continue
        return readers.with_earlier(tracker.sources, len(every)) if tracker.depth else tracker.sources
    return {}


def _run_layers(
    built: Built,
    indices: list[int],
    seq_length: int,
    make_watcher: Callable[[dict[int, nn.Module], set[int]], Watcher],
    around: Callable[[dict[int, nn.Module], Watcher], contextlib.AbstractContextManager] | None,
    fake_mode: FakeTensorMode | None,
    backward: bool,
    encoder_tokens: int,
    flops: bool,
    way: inputs.Way,
) -> Watcher:
    """run_layers, the decoder run `way` (census/build/inputs.py)."""
    decoder = built.decoder
    config = built.config
    total = len(built.layers)
    holder, stack_name = built.stack.parent
    kept = {index: built.layers[index] for index in indices}
    setattr(holder, stack_name, nn.ModuleList([kept[i] for i in indices]))  # the decoder now holds only the kept layers
    try:
        fake_mode = fake_mode or fake_mode_of(decoder)
        if fake_mode is None:
            fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
            make_fake(decoder, fake_mode)
        for layer in kept.values():  # layers an earlier probe of this decoder left on meta (run now with the layers after them)
            make_meta_fake(layer, fake_mode)
        for layer in kept.values():
            _mark_inline_activations(layer)
        # Held alive through the forward: a model may replace a buffer as it runs (ctrl casts its
        # pos_encoding and assigns the copy), and a dead storage's identity can be taken by an
        # activation, which would then be left out as a parameter.
        fixed = [t.untyped_storage() for t in (*decoder.parameters(), *decoder.buffers())]
        watcher = make_watcher(kept, {storage._cdata for storage in fixed})
        watcher.kept.extend(fixed)
        wrapped = around(kept, watcher) if around is not None else contextlib.nullcontext()
        # Everything alive now (the model, transformers, torch) is not this forward's garbage:
        # frozen, the collection after the forward scans only what the forward made (a full
        # collection of the whole heap costs ~0.2 s, most of a probe).
        gc.freeze()
        with fake_mode, config_subset(config, indices, total, way.probed_count), index_lists_subset(config, decoder, indices), index_keyed_subset(config, kept, indices, total), kernels_swapped(kept), watcher.hooks(), wrapped:
            width = built.embedding.weight.shape[1]
            extra = inputs.decoder_inputs(way.feed, built.embedding, seq_length)
            if encoder_tokens:  # encoder states of the layers' width (mllama's projected vision tokens), trained through
                name = encoder_input(decoder)
                if name is None:
                    raise SpecError("unsupported_layer", f"{type(decoder).__name__}: its forward takes no encoder states ({', '.join(ENCODER_INPUTS)})")
                extra[name] = torch.empty(1, encoder_tokens, width, dtype=built.embedding.weight.dtype, requires_grad=True)
            counted = LayerFlops(decoder) if flops else None
            with counted.counting() if counted else contextlib.nullcontext(), _DispatchWatch(watcher), torch.autograd.graph.saved_tensors_hooks(watcher.pack, _unpack), route_attention(seq_length, watcher.note_linear_attention), assumed_routing(kept.values()), attention.eager_seen(watcher.note_eager_attention):
                output = decoder(use_cache=False, **extra)
            watcher.forward_done = True
            if watcher.fallbacks:
                raise SpecError(
                    "kernel_fallback",
                    f"{watcher.fallbacks[0]}: a depthwise convolution ran in torch where the causal-conv1d kernel runs in training; "
                    "the census found no kernel function to stand in for (renamed or moved without a kernel hook), so it would measure the torch fallback",
                )
            if counted:
                for index, layer in kept.items():
                    watcher.probes[index].forward_flops = counted.of(layer)
            hidden_out = output[0] if isinstance(output, tuple) else output.last_hidden_state
            del output
            gc.collect()  # graph nodes no output reaches are freed now, with what they saved
            if around is not None:
                watcher.count()
                return watcher
            _book_bytes(watcher)
            if backward:
                # back to the stack's input: every probed layer's backward runs (each kernel's
                # too); the weights' own gradients, which read only what the forward saved, are
                # not asked for (docs/census.md, "Measured bytes")
                torch.autograd.backward(hidden_out.float().sum(), inputs=_stack_inputs(extra, built))
    except (DynamicOutputShapeException, DataDependentOutputException) as err:
        raise ModelCodeError(
            "unsupported_layer",
            f"{model_code(err)}: {err.func} needs the tensors' values (a data-dependent shape or scalar), which fake tensors do not have",
        ) from err
    except (SpecError, MemoryError):
        raise
    except Exception as err:
        where = failing_model_code(err)
        if where is None:  # the census's own code failed: not the model's limit
            raise
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ModelCodeError(
            "unsupported_layer",
            f"{where}: {type(err).__name__}: {first_line[:200]} (the model's own code fails where the census runs it: its decoder {way.words()}, in bf16, on fake tensors)",
        ) from err
    finally:
        gc.unfreeze()
        setattr(holder, stack_name, built.layers)
    return watcher


def _stack_inputs(given: dict[str, Any], built: Built) -> list[torch.Tensor]:
    """What the decoder was given that the backward runs back to: the input embeddings (and
    encoder states), or, from token ids, the embedding's weight."""
    return [t for t in given.values() if isinstance(t, torch.Tensor) and t.requires_grad] or [built.embedding.weight]


def _book_bytes(watcher: Watcher) -> None:
    """Book each storage backward can still reach to the op of its first saver still alive."""
    for key, savers in watcher.seen.items():
        if key in watcher.excluded_outputs:
            continue
        alive = next(((probe, op, nbytes, part) for probe, op, nbytes, held, part in savers if held() is not None), None)
        if alive is not None:
            probe, op, nbytes, part = alive
            if key in watcher.activation_inputs and op.startswith("child:"):
                op = "ffAct"  # autograd saves an op's inputs before the op dispatches: an inline activation's input is told after
            probe.saved_bytes[op] += nbytes
            probe.saved_storages[op] += 1
            probe.kept_tails[(op, *watcher.tails[key])] += 1
            tail, dtype = watcher.tails[key]
            if key in watcher.four_d and tail[0] == tail[1] and nbytes == tail[0] * tail[1] * dtype.itemsize:
                probe.kept_square[(op, tail[0], dtype)] += 1
            if op == "ffAct":
                probe.act_kept.add(key)
                if key in watcher.act_child:
                    probe.mixer_act_kept[watcher.act_child[key]] += 1
            made = watcher.creator.get(key)
            if made is not None and made.probe is probe:
                probe.kept_by_call.setdefault(made.call, set()).add(part or op)
                probe.booked_as.setdefault(made.call, op)
                probe.kept_outputs.setdefault(made.call, set()).add(made.position)
            else:
                probe.input_bytes[op] += nbytes  # a storage the layer did not make: its input

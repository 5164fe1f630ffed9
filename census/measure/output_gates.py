"""Output gates: a projection's output carried through elementwise ops alone (views, a cast, a
copy, an activation, the add of a bias or the product with a per-layer scale: beam's
gate_bias per head) to a product taken after the attention kernel of the same child (lfm3's
sigmoid of one gate per head, laguna's softplus in fp32, Qwen3-Next's sigmoid of q_proj's
second half). The watcher follows each projection's output through such ops (its gate chain:
Watcher.gate_chains), notes each product that reads a chain after its child's kernel ran
(LayerProbe.gated_products), and booking notes what backward keeps of each chain
(LayerProbe.gate_kept), which census/describe/attention_facts.py reads as the gate's facts.
"""

from __future__ import annotations

from typing import Any

import torch

from speccat.census.kernels.scope import current_kernel
from speccat.census.measure.layer_probe import GatedProduct
from speccat.census.structure.kernel_registry import storage_key
from speccat.census.structure.predicates import is_norm

CAST_OP = torch.ops.aten._to_copy.default
PRODUCT_OP = torch.ops.aten.mul.Tensor


def projection_returned(watcher, path: str, output: Any) -> None:
    """A projection's output starts a gate chain of its own (held: its storage's identity stays its own)."""
    if isinstance(output, torch.Tensor):
        watcher.gate_chains[storage_key(output)] = (path, None)
        watcher.kept.append(output.untyped_storage())


def layer_constant(watcher, tensor: torch.Tensor, out: torch.Tensor) -> bool:
    """`tensor` is the same for every token: a parameter or buffer (or a view of one: beam's
    per-head gate_bias[None, None, :, None]), or a tensor with no more elements than one token's
    share of the op's output (a per-layer scale computed from parameters, a 0-dim scalar)."""
    tokens = watcher.current.tokens if watcher.current is not None else 0
    return storage_key(tensor) in watcher.excluded or (tokens > 0 and tensor.numel() * tokens <= out.numel())


def _elementwise_of_one(watcher, func, args: tuple, out: torch.Tensor) -> torch.Tensor | None:
    """The one tensor an elementwise op read beside layer constants (layer_constant: an
    activation, a copy, a scalar product, the add of a bias or the product with a per-layer
    scale), or a cast's input; None for any other op."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    varying = [a for a in tensors if not layer_constant(watcher, a, out)] if len(tensors) > 1 else tensors
    if len(varying) != 1:
        return None
    return varying[0] if func is CAST_OP or torch.Tag.pointwise in func.tags else None


def note_gate_op(watcher, probe, func, args, kwargs, out) -> None:
    """An op outside any kernel and norm (called for every op: the cheap tests first): an
    elementwise op of one tensor carries a gate chain to its output (each storage noting the one
    it was made from), and a gated product to its output (axk2's product in fp32 cast back
    before o_proj); a product of a chain with a tensor of no chain, after the kernel of the
    child it runs in, is a gated product."""
    if not isinstance(out, torch.Tensor) or current_kernel() is not None:
        return
    if not any(isinstance(a, torch.Tensor) and (storage_key(a) in watcher.gate_chains or storage_key(a) in probe.gated_products) for a in args):
        return  # no input on a gate's chain: nothing to follow (most ops)
    if func is PRODUCT_OP and _note_product(watcher, probe, args, out):
        return
    read = _elementwise_of_one(watcher, func, args, out)
    key = storage_key(read) if read is not None else None
    if (key not in watcher.gate_chains and key not in probe.gated_products) or _in_norm(watcher):
        return
    made = storage_key(out)
    if key in watcher.gate_chains:
        watcher.gate_chains[made] = (watcher.gate_chains[key][0], key)
    if key in probe.gated_products:
        probe.gated_products[made] = probe.gated_products[key]
    watcher.kept.append(out.untyped_storage())


def _in_norm(watcher) -> bool:
    """The op runs inside a norm (whose saves are the norm's, not a gate's)."""
    return any(is_norm(m) for _, m in watcher.path)


def _lineage(watcher, key: int) -> frozenset[int]:
    """The storages of a gate chain from its projection's output to `key`, each made from the one before."""
    keys = []
    while key is not None:
        keys.append(key)
        key = watcher.gate_chains[key][1]
    return frozenset(keys)


def _note_product(watcher, probe, args: tuple, out: torch.Tensor) -> bool:
    """A product of two tensors: noted with the chain's projection, the factor's elements, the
    chain's storages up to the factor, whether the other factor is laid out as the kernel left
    it (not contiguous: a view of its heads-major output, so the product is too and the copy
    o_proj reads is made after it) and whether it is in fp32 (a cast of the attention's output:
    inkling2's attn_output.float() * gate) when it is a gated product; false for a scalar product."""
    factors = [a for a in args if isinstance(a, torch.Tensor)]
    gated = [a for a in factors if storage_key(a) in watcher.gate_chains]
    if len(factors) == 2 and len(gated) == 1 and any(layer_constant(watcher, a, out) for a in factors if a is not gated[0]):
        return False  # a chain times a per-layer scale: the chain goes on (note_gate_op)
    if len(factors) != 2 or len(gated) != 1 or _in_norm(watcher):
        return len(factors) == 2
    child = watcher.child()
    if child is not None and watcher.kernel_count_in_child[child] > 0:
        key = storage_key(gated[0])
        other = next(a for a in factors if a is not gated[0])
        probe.gated_products[storage_key(out)] = GatedProduct(
            watcher.gate_chains[key][0], int(gated[0].numel()), _lineage(watcher, key), not other.is_contiguous(), other.dtype == torch.float32
        )
        watcher.kept.append(out.untyped_storage())
    return len(factors) == 2


def book_gate_kept(watcher, probe, key: int, op: str, nbytes: int) -> None:
    """A storage backward keeps, booked to `op`: counted among a gate's kept elements, by dtype,
    when it lies on the gate's chain up to its product (LayerProbe.gate_kept)."""
    projection = probe.gate_holding(key)
    if projection is not None:
        dtype = watcher.tails[key][1]
        probe.gate_kept[(projection, op, dtype)] += nbytes // dtype.itemsize


def norm_returned(watcher, probe, args: tuple, output: Any) -> None:
    """A norm called on a gated product, between it and the projection that reads it (dory's
    attn_sub_norm before o_proj): the norm's output carries the gated product on, as an
    elementwise op's does; what the norm keeps is its own (normOp)."""
    read = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if read is None or not isinstance(output, torch.Tensor):
        return
    product = probe.gated_products.get(storage_key(read))
    if product is not None:
        probe.gated_products[storage_key(output)] = product
        watcher.kept.append(output.untyped_storage())

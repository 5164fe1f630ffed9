"""Activations written inline rather than as modules: an MLP's own F.silu, F.gelu or torch.relu
counted as its activation call with what autograd keeps of it, and an experts module's gate
function run as an activation region (gpt-oss's clamped SwiGLU)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from speccat.census.kernels.scope import current_kernel
from speccat.census.structure.kernel_registry import storage_key
from speccat.census.structure.predicates import is_activation, is_activation_region, is_experts, is_experts_interface, is_norm, is_projection

INLINE_ACTIVATIONS = {torch.ops.aten.silu.default, torch.ops.aten.gelu.default, torch.ops.aten.relu.default}
# Inline activations whose backward reads their result, so autograd keeps their output (ReLU's
# threshold_backward), where SiLU and GELU keep their input.
OUTPUT_KEEPING_ACTIVATIONS = {torch.ops.aten.relu.default}


def in_mlp(path: list[tuple[str, nn.Module]]) -> bool:
    """The op runs in an MLP's own code (the innermost module of `path`, the modules running,
    holds two or more projections, is no attention module and no experts), outside any norm or
    activation module: an activation written inline (F.silu)."""
    if not path:
        return False
    module = path[-1][1]
    if is_experts(module) or "Attention" in type(module).__name__ or any(is_norm(m) or is_activation_region(m) for _, m in path):
        return False
    return sum(1 for c in module.children() if is_projection(c)) >= 2


def note_inline_activation(watcher, probe, func, args, kwargs, out) -> None:
    """An inline activation in an MLP's own code, outside any kernel: one activation call of the
    MLP, and the tensor autograd keeps of it noted (booked to ffAct: census/measure/booking.py)."""
    if current_kernel() is None and in_mlp(watcher.path):
        probe.activations[watcher.path[-1][0]] += 1
        kept = out if func in OUTPUT_KEEPING_ACTIVATIONS else args[0]
        watcher.activation_inputs.add(storage_key(kept))
        watcher.inline_owners[storage_key(kept)] = watcher.path[-1][0]
        watcher.kept.append(kept.untyped_storage())


class _ActivationRegion(nn.Module):
    """Runs an experts module's own gate function as an activation region (gpt-oss's clamped SwiGLU)."""

    _speccat_activation = True  # what predicates.is_activation_region looks for

    def __init__(self, gate: Any):
        super().__init__()
        self.gate = gate

    def forward(self, x):
        return self.gate(x)


def mark_inline_activations(layer: nn.Module) -> None:
    """Experts whose activation is inline code rather than a module, or whose gate function keeps
    tensors before it calls their activation module (deepseek_v4's clamps of gate and up before
    its SiLU module), get their gate wrapped as one: what that code keeps is the activation's, as
    an inline gate's is (hy_v4's clamped SwiGLU).

    The wrapper is an instance attribute of this fake layer only; the class is untouched.
    """
    for module in layer.modules():
        if is_experts_interface(module) and module.has_gate:
            has_module = any(is_activation(m) for m in module.modules())
            if not has_module or _keeps_before_activation(module):
                module.add_module("_speccat_gate", _ActivationRegion(module._apply_gate))
                object.__setattr__(module, "_apply_gate", module._speccat_gate)  # the instance wins over the class method


def _keeps_before_activation(experts: nn.Module) -> bool:
    """A trial of the experts' gate function on a meta input (one token slot, gate's and up's
    halves one channel each): whether autograd keeps a tensor before their activation module
    runs. deepseek_v4's clamp of gate keeps gate_up before its SiLU module; the interface's
    default gate, act_fn(gate) * up, and beam's fp32 cast of gate before its SiLU keep nothing
    before it (its fp32 copy is the activation's input: `experts_act_fp32`). A gate function the
    trial cannot run is left as it is."""
    dtype = next((p.dtype for p in experts.parameters()), torch.float32)
    entered, kept_before = [], []
    hooks = [m.register_forward_pre_hook(lambda *_: entered.append(True)) for m in experts.modules() if is_activation(m)]

    def pack(tensor):
        if not entered:
            kept_before.append(True)
        return tensor

    try:
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            experts._apply_gate(torch.zeros(1, 2, dtype=dtype, device="meta", requires_grad=True))
    except Exception:  # the model's own code on a trial input: any failure means no trial
        return False
    finally:
        for hook in hooks:
            hook.remove()
    return bool(entered) and bool(kept_before)


def note_chained(watcher, probe, key: int) -> None:
    """A kept storage an inline activation kept that an activation module saved after it, as its
    input: the inline op is a step before that activation (gemma3n's activation sparsity,
    relu(gate - cutoff), whose output its GELU reads), not an activation call of the MLP's own
    (LayerProbe.act_chained): the two keep one tensor between them."""
    owner = watcher.inline_owners.get(key)
    if owner is None:
        return
    layer = watcher.layers[probe.index]
    if any(path is not None and is_activation_region(layer.get_submodule(path)) for path, _ in watcher.saved_in[key][1:]):
        probe.act_chained[owner] += 1

"""Finding the layer stack of a built language model by structure, not by attribute name.

Models name their stack differently (`model.layers`, `transformer.h`, `bert.encoder.layer`,
`rwkv.blocks`, `decoder.layers`...). The stack is the longest ModuleList of blocks (modules
with children of their own, never a list of plain projections) under the module that runs
the language model, outside vision towers, and not nested inside another such list (a list
of expert MLPs inside a layer is not a stack). Ties go to the shallowest list.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

from torch import nn

from speccat.census.spec import SpecError

_VISION = re.compile(r"vision|visual")


@dataclass(frozen=True)
class Stack:
    runner: nn.Module  # the module whose forward runs the stack (takes inputs_embeds)
    path: str  # dotted path from the runner to the ModuleList
    layers: nn.ModuleList

    @property
    def parent(self) -> tuple[nn.Module, str]:
        """(module holding the list, attribute name), to swap the list while layers run."""
        owner, _, name = self.path.rpartition(".")
        return (self.runner.get_submodule(owner) if owner else self.runner), name


def runner_of(model: nn.Module) -> nn.Module:
    """The module that runs the language model from input embeddings: get_decoder(), else the
    base model, else the model itself, whichever first holds a list of blocks (ModernBERT's
    get_decoder() answers with its output projection, named `decoder`)."""
    candidates = [model.get_decoder() if hasattr(model, "get_decoder") else None, getattr(model, "base_model", None), model]
    for runner in candidates:
        if isinstance(runner, nn.Module) and runner is not model and any(_is_block_list(m) for m in runner.modules()):
            return runner
    return model


def _is_block_list(module: nn.Module) -> bool:
    return isinstance(module, nn.ModuleList) and len(module) > 0 and all(any(True for _ in item.children()) for item in module)


def find_stack(model: nn.Module) -> Stack:
    """The longest outermost ModuleList of blocks under the model's runner."""
    runner = runner_of(model)
    candidates = [(name, m) for name, m in runner.named_modules() if name and _is_block_list(m) and not _VISION.search(name)]
    outermost = [(n, m) for n, m in candidates if not any(n.startswith(other + ".") for other, _ in candidates)]
    if not outermost:
        raise SpecError("unsupported_layer", f"{type(model).__name__}: no stack of decoder layers found (no list of blocks under {type(runner).__name__})")
    path, layers = max(outermost, key=lambda item: (len(item[1]), -item[0].count(".")))
    while runner is model and "." in path:  # a causal LM that is its own decoder: run its base model
        head, _, rest = path.partition(".")
        child = runner.get_submodule(head)
        if "inputs_embeds" not in inspect.signature(child.forward).parameters:
            break
        runner, path = child, rest
    return Stack(runner, path, layers)

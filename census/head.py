"""The model's ends on fake tensors: the embedding's output, the final norm, and the logits
with the loss's fp32 upcast (docs/planning.md): the spec's `ends`.

`probe_head` converts the embedding, the final norm and the output head of a model built on meta
(census/build.py) to fake tensors, runs them as the causal LM's forward does (ids → embedding;
the stack's output → final norm → head → the model's own loss function), and books every
storage autograd saves, once, to the part that saved it, parameters left out, at its CUDA width
(a LayerNorm's statistics are fp32 there, bf16 in the CPU kernel). The embedding's
part also holds its output: the first layer's input, which the layers' prices leave out.
Final-logit softcapping (Gemma 2 and 3) is applied by the causal LM's forward, not by these
parts, and is not measured.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from speccat.catalogue.vocabulary import END_PARTS
from speccat.census.build import Built
from speccat.census.predicates import is_norm
from speccat.census.probe import fake_mode_of, layer_norm_stats_cuda_nbytes



class _CudaWidths(TorchDispatchMode):
    """Notes the CUDA bytes of storages the CPU kernels keep in another dtype."""

    def __init__(self):
        super().__init__()
        self.nbytes: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.nbytes.update(layer_norm_stats_cuda_nbytes(func, args, out))
        return out


def probe_head(built: Built, seq_length: int, hidden_width: int) -> dict[str, float] | None:
    """Bytes per token each end of the model keeps for backward, at `seq_length` tokens, micro-batch 1
    (`hidden_width`: the layers' width, which the stack's output has); None for a model with no
    output head or no final norm beside its layers, whose ends head.yaml does not describe."""
    head = built.model.get_output_embeddings()
    norms = [m for m in built.decoder.children() if is_norm(m)]
    if head is None or not norms:
        return None
    norm = norms[-1]
    fake = fake_mode_of(built.decoder) or FakeTensorMode(allow_non_fake_inputs=True)  # the layers' probes made the decoder fake already
    with fake:
        for module in (built.embedding, norm, head):
            if not all(isinstance(p, FakeTensor) for p in module.parameters()):
                module.to_empty(device="cpu")
    params = {p.untyped_storage()._cdata for m in (built.embedding, norm, head) for p in m.parameters()}
    saved: Counter = Counter()
    seen: dict[int, torch.Tensor] = {}  # kept alive so a storage's identity cannot be reused
    part = ["embedding"]
    widths = _CudaWidths()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        key = tensor.untyped_storage()._cdata
        if key not in params and key not in seen:
            seen[key] = tensor
            saved[part[0]] += widths.nbytes.get(key, tensor.untyped_storage().nbytes())
        return tensor

    with fake, widths, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        ids = torch.zeros(1, seq_length, dtype=torch.long)
        embeds = built.embedding(ids)
        saved["embedding"] += embeds.untyped_storage().nbytes()  # the first layer's input
        hidden = torch.empty(1, seq_length, hidden_width, dtype=embeds.dtype, requires_grad=True)  # the stack's output
        part[0] = "final_norm"
        normed = norm(hidden)
        part[0] = "logits"
        logits = head(normed)
        built.model.loss_function(logits=logits, labels=ids, vocab_size=logits.shape[-1])
    return {name: saved[name] / seq_length for name in END_PARTS}

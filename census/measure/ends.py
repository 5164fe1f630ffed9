"""The model's ends on fake tensors: the embedding's output, the final norm, and the logits
with the loss's fp32 upcast (docs/planning.md): the spec's `ends`.

`probe_ends` converts the embedding, the final norm and the output head of a model built on meta
(census/build/model.py) to fake tensors, runs them as the causal LM's forward does (ids → embedding;
the stack's output → final norm → head → the model's own loss function), and books every
storage autograd saves, once, to the part that saved it, parameters left out, at its CUDA width
(a LayerNorm's statistics are fp32 there, bf16 in the CPU kernel). The embedding's output is
not its part: it is the first layer's input, which that layer's price holds where the layer
keeps it (a LayerNorm's input; a checkpointed layer's) and which nothing keeps where it does not
(an RMSNorm that keeps its fp32 copy instead); what the embedding keeps is the ids its backward
reads (and Gemma's scale), and what a norm inside the embedding module keeps of its output
(inkling's embed_norm: `embedding_norms`, each kept as the layers' norms are).

The logits run through the causal LM's own forward, with its layer stack stood in for by the
final norm's output, so what that forward does between the head and the loss is measured too,
and counted by dtype as tensors over the vocabulary: Gemma 2's final-logit softcapping keeps
tanh's output (one more in the compute dtype, `logit_saved`); the loss keeps its
log-probabilities in fp32 where it upcasts the logits first (`logit_saved_fp32`, transformers'
causal-LM loss) and in the compute dtype where it does not (bart's and whisper's
CrossEntropyLoss on the bf16 logits). Only tensors over the tokens and the vocabulary are
counted so: what the head keeps once whatever the tokens is counted apart, an fp32 copy of its
weight (ergo's `weight.float()`, `head_weight_fp32`) and fp32 vectors over the vocabulary (dory's
logit scale, `vocab_vectors_fp32`), and so is an input the head keeps in fp32 (ergo's
`hidden_states.float()`, `head_input_fp32`), told by the storages saved while the head module
ran. A model whose forward cannot run that way (none of transformers' registry today) has no
measured ends: ends.yaml prices them unchecked, as for a model with no final norm.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from speccat.catalogue.vocabulary import END_PARTS
from speccat.census.build.model import BUILD_DTYPE, Built
from speccat.census.structure.predicates import is_norm
from speccat.census.build.fake import fake_mode_of, make_fake, on_meta
from speccat.census.measure.cuda_widths import layer_norm_stats_cuda_nbytes


class _CudaWidths(TorchDispatchMode):
    """Notes the CUDA bytes of storages the CPU kernels keep in another dtype."""

    def __init__(self):
        super().__init__()
        self.nbytes: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.nbytes.update(layer_norm_stats_cuda_nbytes(func, args, out))
        return out


class _StackOutput:
    """What the causal LM's forward gets from its stand-in stack: the last hidden state (by
    name or as item 0), and None for anything else a forward may look up (caches, aux losses)."""

    def __init__(self, hidden: torch.Tensor):
        self.last_hidden_state = hidden

    def __getitem__(self, index):
        return (self.last_hidden_state,)[index]

    def __getattr__(self, name):
        return None


def _run_logits(built: Built, normed: torch.Tensor, ids: torch.Tensor) -> bool:
    """The causal LM's own forward from the stack's output to the loss, its decoder stood in for
    by `normed`; False where that forward cannot run so (one that reads more of the decoder's
    outputs than its last hidden state)."""
    built.decoder.forward = lambda *args, **kwargs: _StackOutput(normed)
    try:
        built.model(input_ids=ids, labels=ids)
    except MemoryError:
        raise
    except Exception:
        return False
    finally:
        del built.decoder.forward  # the class's forward again
    return True


def _width(norm: torch.nn.Module) -> int | None:
    """The width a norm normalises, from its weight (None for a norm without one)."""
    weight = getattr(norm, "weight", None)
    return int(weight.shape[-1]) if isinstance(weight, torch.Tensor) and weight.dim() else None


def probe_ends(built: Built, seq_length: int, hidden_width: int) -> dict | None:
    """What each end of the model keeps for backward, at `seq_length` tokens, micro-batch 1
    (`hidden_width`: the layers' width, which the stack's output has): {"bytes_per_token": per
    end, "logit_saved" and "logit_saved_fp32": the tensors over the vocabulary the head's
    forward and loss keep in the compute dtype and in fp32; "transform_saved" and
    "transform_rows_fp32": the hidden-wide tensors in the compute dtype and fp32 values per token
    that a transform before the head keeps; "embedding_norms": the norm calls inside the
    embedding module on its output; "head_input_fp32", "head_weight_fp32" and
    "vocab_vectors_fp32": what the head keeps in fp32, its input, copies of its weight, vectors
    over the vocabulary}; None for a model with no output
    head or no final norm beside its layers (ends that ends.yaml does not describe), or whose
    causal LM's forward cannot run on a stand-in decoder."""
    head = built.model.get_output_embeddings()
    # the final norm normalises the stack's output: a norm beside the layers of another width
    # (gemma4's per-layer projection norm, after the final norm) is not it
    norms = [m for m in built.decoder.children() if is_norm(m) and _width(m) in (None, hidden_width)]
    if head is None or not norms:
        return None
    norm = norms[-1]
    fake = fake_mode_of(built.decoder) or FakeTensorMode(allow_non_fake_inputs=True)  # the layers' probes made the decoder fake already
    params: set[int] = set()  # the storages of the parameters of every module the ends run

    def faked(module: torch.nn.Module, *_) -> None:
        if on_meta(module):
            make_fake(module, fake, recurse=False)
        params.update(p.untyped_storage()._cdata for p in module.parameters(recurse=False))

    for module in (*built.embedding.modules(), *norm.modules(), *head.modules()):
        faked(module)
    # part -> storage -> (the tensor, kept alive so a storage's identity cannot be reused; its bytes)
    booked: dict[str, dict[int, tuple[torch.Tensor, int]]] = {name: {} for name in END_PARTS}
    part = ["embedding"]
    widths = _CudaWidths()

    in_head = [False]  # whether the head module is running
    head_saved: set[int] = set()  # the storages first saved while it ran

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        key = tensor.untyped_storage()._cdata
        if key not in params and not any(key in held for held in booked.values()):
            booked[part[0]][key] = (tensor, widths.nbytes.get(key, tensor.untyped_storage().nbytes()))
            if in_head[0]:
                head_saved.add(key)
        return tensor

    inner_norms = [m for m in built.embedding.modules() if m is not built.embedding and is_norm(m) and not isinstance(m, torch.nn.Embedding)]
    calls = [0]  # the calls of norms inside the embedding, on its output (embedding_norms)

    def ran(module: torch.nn.Module, _args, output) -> None:
        if isinstance(output, torch.Tensor) and output.shape[-1:] == (hidden_width,):
            calls[0] += 1

    with fake, widths, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        ids = torch.zeros(1, seq_length, dtype=torch.long)
        norm_hooks = [m.register_forward_hook(ran) for m in inner_norms]
        try:
            embeds = built.embedding(ids)
        finally:
            for hook in norm_hooks:
                hook.remove()
        hidden = torch.empty(1, seq_length, hidden_width, dtype=embeds.dtype, requires_grad=True)  # the stack's output
        part[0] = "final_norm"
        normed = norm(hidden)
        part[0] = "logits"
        # what else the causal LM's forward runs outside its decoder is made fake as it is called:
        # a multimodal model's vision tower, which a text-only forward never calls, stays on meta
        inside = set(built.decoder.modules())
        hooks = [m.register_forward_pre_hook(faked) for m in built.model.modules() if m not in inside]
        hooks += [head.register_forward_pre_hook(lambda *_: in_head.__setitem__(0, True)),
                  head.register_forward_hook(lambda *_: in_head.__setitem__(0, False))]
        try:
            if not _run_logits(built, normed, ids):
                return None
        finally:
            for hook in hooks:
                hook.remove()
    vocabulary = head.weight.shape[0]
    logits = booked["logits"].values()
    # the tensors over the tokens and the vocabulary, by dtype; what has no token dimension is not one
    wide = [t.dtype for t, _ in logits if t.dim() > 0 and t.shape[-1] == vocabulary and t.numel() == seq_length * vocabulary]
    head_kept = [t for key, (t, _) in booked["logits"].items() if key in head_saved]
    hidden_wide = sum(1 for t, _ in logits if t.dim() > 0 and t.shape[-1] == hidden_width and t.dtype == hidden.dtype)
    rows = sum(n for t, n in logits if t.is_floating_point() and t.numel() == seq_length and t.shape[-1] != vocabulary)
    return {
        "bytes_per_token": {name: sum(n for _, n in booked[name].values()) / seq_length for name in END_PARTS},
        "logit_saved": wide.count(BUILD_DTYPE),  # the compute dtype, whatever the stream's (ergo's is fp32)
        "logit_saved_fp32": wide.count(torch.float32),
        # beyond the head's own input: what a transform before the head keeps (the LM head
        # module's dense, activation and LayerNorm: roberta-prelayernorm's)
        "transform_saved": max(hidden_wide - 1, 0),
        "transform_rows_fp32": rows // (4 * seq_length),
        # norms the embedding module runs on its own output (inkling's embed_norm), each kept as
        # the layers' norms keep theirs
        "embedding_norms": calls[0],
        # what the head keeps in fp32 where the compute dtype is a half one: its input over the
        # tokens (ergo's hidden_states.float()), copies of its weight (ergo's weight.float())
        "head_input_fp32": int(BUILD_DTYPE != torch.float32 and any(
            t.dtype == torch.float32 and t.shape[-1] == head.weight.shape[-1] and t.numel() == seq_length * t.shape[-1] for t in head_kept)),
        "head_weight_fp32": sum(1 for t in head_kept if t.dtype == torch.float32 and t.numel() == head.weight.numel()),
        # fp32 values, one per vocabulary entry, with no token dimension (dory's logit scale)
        "vocab_vectors_fp32": sum(1 for t, _ in logits if t.dtype == torch.float32 and t.numel() == vocabulary),
    }

"""The parameters the text path reads outside its layers, word embedding, head and final norm
(docs/census.md, "Parameters"): a learned position embedding (gpt2's `wpe`), token-type
embeddings and an embedding norm (the bert family), an embedding projection (electra), per-layer
embeddings (gemma3n's, gemma4's), a transform before the head (bert's).

They are told by what ran, not by names: the causal LM's own forward runs once from token ids
on fake tensors, no gradients, with its stack cut to its first layer, and a dispatch mode notes
every storage an op reads while no layer runs. A parameter the model holds that is read so, and
is neither the word embedding's, the head's, the final norm's nor any layer's, is on the text
path: before the stack runs (`embedding_extra`, on the pipeline's first stage) or after it
(`head_extra`, on its last). Of the norms beside the stack, which census/build/model.py counts as
the final norm, one read before the stack and not after is an extra before it too. A vision or audio tower, which a forward from token ids alone never
calls, is never read, so never counted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from speccat.census.build import inputs
from speccat.census.build.fake import fake_mode_of, make_meta_fake
from speccat.census.build.model import Built
from speccat.census.kernels.routing import route_attention
from speccat.census.measure.expert_counts import assumed_routing
from speccat.census.measure.kernel_stand_ins import kernels_swapped
from speccat.census.measure.layer_subset import config_subset, index_keyed_subset, index_lists_subset
from speccat.census.spec import SpecError
from speccat.census.structure.predicates import is_norm

BEFORE, AFTER = "embedding_extra", "head_extra"  # the spec's params parts, by where they are read


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


class _Reads(TorchDispatchMode):
    """The storages each op reads while no layer runs, by whether a layer has run yet."""

    def __init__(self):
        super().__init__()
        self.depth = 0  # layers running now (a layer inside a layer counts too)
        self.layers_ran = False
        self.read: dict[str, set[int]] = {BEFORE: set(), AFTER: set()}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.depth:
            where = self.read[AFTER if self.layers_ran else BEFORE]
            where.update(_storage(t) for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor))
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def around(self, layer: nn.Module) -> Iterator[None]:
        """Hooks telling when the layer runs, removed after."""

        def enter(*_):
            self.depth += 1

        def leave(*_):
            self.depth -= 1
            self.layers_ran = True

        handles = [layer.register_forward_pre_hook(enter), layer.register_forward_hook(leave)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()


def _runs(built: Built) -> Iterator[tuple[nn.Module, str, bool]]:
    """What to run, in turn, until one runs: the causal LM from token ids (so what it runs between
    its stack and its head is read too), with the probed layers' count and then the model's; then
    the decoder alone, each of census/build/inputs.py's ways."""
    for probed in (True, False):
        yield built.model, inputs.IDS, probed
    for way in inputs.ways(built.decoder):
        yield built.decoder, way.feed, way.probed_count


def outside_params(built: Built, seq_length: int) -> dict[str, int]:
    """{embedding_extra, head_extra, final_norm}: the parameters the text path reads outside its
    layers, word embedding, head and final norm, before and after its stack (module docstring),
    and the final norm told apart from the norms beside the stack that run before it."""
    decoder, layers = built.decoder, built.layers
    head = built.model.get_output_embeddings()
    fake_mode = fake_mode_of(decoder) or FakeTensorMode(allow_non_fake_inputs=True)
    first = {0: layers[0]}
    holder, stack_name = built.stack.parent
    setattr(holder, stack_name, nn.ModuleList([layers[0]]))  # the stack cut to its first layer
    failures = []
    try:
        # the model but the layers cut off made fake: a tower is converted too (a tensor from its
        # shape: cheap), as a parameter a forward reads without calling its module must be fake
        make_meta_fake(built.model, fake_mode)
        # read after the conversion, which may give a module new parameter objects
        counted = {id(p) for module in (built.embedding, head, *layers) if module is not None for p in module.parameters()}
        beside = {id(p) for m in decoder.children() if is_norm(m) for p in m.parameters()}  # census/build/model.py's final_norm
        for model, feed, probed in _runs(built):
            reads = _Reads()
            try:
                with fake_mode, torch.no_grad(), config_subset(built.config, [0], len(layers), probed), index_lists_subset(built.config, decoder, [0]), index_keyed_subset(built.config, first, [0], len(layers)), kernels_swapped(first), route_attention(seq_length), assumed_routing(first.values()), reads.around(layers[0]):
                    given = inputs.decoder_inputs(feed, built.embedding, seq_length)
                    with reads:
                        model(use_cache=False, **given)
            except (MemoryError, KeyboardInterrupt):
                raise
            except Exception as err:  # the model's own code refuses this run: the next
                failures.append(f"{type(model).__name__} from {inputs.GIVEN[feed]}: {type(err).__name__}: {str(err)[:200]}")
                continue
            return _sum_read(built.model, counted, beside, reads.read)
    finally:
        setattr(holder, stack_name, layers)
    raise SpecError("unsupported_layer", f"no run of the model from token ids or input embeddings tells what it reads outside its layers ({'; '.join(failures)})")


def _sum_read(model: nn.Module, counted: set[int], beside: set[int], read: dict[str, set[int]]) -> dict[str, int]:
    """Each part's parameters: those of the model (each once) whose storage was read there and
    that no other part counts (a parameter read on both sides counts before the stack); and
    final_norm again: of the norms beside the stack, those read before it and not after (bart's
    embedding LayerNorm, gemma3n's per-layer projection norm) are not the final norm, but extras
    read before the stack, and the rest stay final_norm."""
    sums = {BEFORE: 0, AFTER: 0, "final_norm": 0}
    for p in model.parameters():  # each shared tensor once
        key = _storage(p)
        if id(p) in beside:
            sums[BEFORE if key in read[BEFORE] and key not in read[AFTER] else "final_norm"] += p.numel()
            continue
        if id(p) in counted:
            continue
        for part in (BEFORE, AFTER):
            if key in read[part]:
                sums[part] += p.numel()
                break
    return sums

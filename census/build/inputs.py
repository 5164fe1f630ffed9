"""How the probe runs a decoder: what it hands it (input embeddings or token ids) and the layer
count its config states meanwhile (docs/census.md, "How a config becomes a spec", step 4,
"How the decoder is run").

The plainest way comes first: the decoder is given input embeddings of the probed length (a
clone of a leaf that requires grad, so every layer's hidden states are trained through and the
embedding does not run), and its config's `num_hidden_layers` is set to the probed layers'
count, as its stack is cut to them (a decoder that loops `range(num_hidden_layers)` then runs
exactly them; where the count is a property, a whole multiple of the stack's length, that
multiple of it: census/measure/layer_subset.py `count_per_layer`). A few decoders cannot run so:

- a forward that takes no input embeddings, only token ids (cpmant's builds its own prompt
  and segment embeddings from the ids): told from its signature, before anything runs;
- a forward whose own code needs the ids beside the embeddings (gemma4's per-layer
  embeddings reverse the main embedding with a data-dependent `nonzero`; deepseek_v4's first
  layers send tokens to experts by token id; blt patches by the ids' entropy);
- a forward that sizes tensors by the whole stack's layer count (gemma4's per-layer inputs,
  reshaped to `num_hidden_layers` slices: with the count left at the model's, the cut stack's
  loop `self.layers[:num_hidden_layers]` still runs the probed layers only).

The last two are told only by running the decoder, the one sign that holds across models:
when the model's own code fails one way (census/measure/model_code.py `ModelCodeError`), the probe runs it
the next way of `ways` (census/measure/probe.py `run_layers`), and keeps the way that worked for every
later run of that model.

From ids the decoder embeds them itself: its embedding's weight is a parameter that requires
grad, so the hidden states reaching each layer still require grad, and each layer's saved
bytes are booked as from input embeddings (the embedding runs outside every probed layer,
where nothing is booked).
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

import torch
from torch import nn

EMBEDS = "embeds"  # the decoder is given `inputs_embeds`
IDS = "ids"  # the decoder is given `input_ids`
GIVEN = {EMBEDS: "input embeddings", IDS: "token ids"}


class Way(NamedTuple):
    """One way to run the decoder."""

    feed: str  # EMBEDS or IDS
    probed_count: bool  # the config's num_hidden_layers is the probed layers' count (else the model's)

    def words(self) -> str:
        count = "the probed layers'" if self.probed_count else "the model's"
        return f"from {GIVEN[self.feed]}, with {count} layer count"


def takes(module: nn.Module, name: str) -> bool:
    """`module`'s forward names the argument `name`."""
    try:
        return name in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def ways(decoder: nn.Module) -> list[Way]:
    """The ways to try, in turn: the layer count cut before left whole, each from input
    embeddings before token ids; only embeddings for a forward that takes no ids, only ids for
    one that takes no embeddings."""
    feeds = [feed for feed, name in ((EMBEDS, "inputs_embeds"), (IDS, "input_ids")) if takes(decoder, name)] or [EMBEDS]
    return [Way(feed, probed) for probed in (True, False) for feed in feeds]


def decoder_inputs(feed: str, embedding: nn.Module, seq_length: int) -> dict[str, torch.Tensor]:
    """The decoder's keyword argument for one sequence of `seq_length` tokens, made in the
    current (fake) mode: input embeddings of the embedding's width and dtype, or int64 ids."""
    if feed == IDS:
        return {"input_ids": torch.zeros(1, seq_length, dtype=torch.int64)}
    weight = embedding.weight
    leaf = torch.empty(1, seq_length, weight.shape[1], dtype=weight.dtype, requires_grad=True)
    return {"inputs_embeds": leaf.clone()}  # not a leaf: some models scale their input embeddings in place (ctrl, git)

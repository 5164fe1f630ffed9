"""Building the language model on the meta device, and where its parts are (docs/census.md,
"How a config becomes a spec", step 2).

The model is built from the resolved transformers config (census/intake/resolve.py), never with remote
code, in bf16 with speccat's attention and with weight initialisation skipped: on meta tensors it
would only cost time. Weights are tied afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
from transformers.initialization import no_init_weights
from transformers.models.auto import modeling_auto

from speccat.census.kernels.attention import ATTENTION_IMPL
from speccat.census.build.inputs import Way
from speccat.census.structure.predicates import is_norm
from speccat.census.spec import SpecError
from speccat.census.structure.stack import Stack, find_stack

BUILD_DTYPE = torch.bfloat16
# Attention implementations tried in turn: speccat's (the attention interface); then, for models
# that look their attention up elsewhere (falcon's own table, gpt-neo), SDPA and eager, whose
# attention census/kernels/routing.py routes to the same kernel while the layers run.
BUILD_ATTENTION = (ATTENTION_IMPL, "sdpa", "eager")


@dataclass
class Built:
    """A language model built on meta, and where its parts are."""

    config: Any  # the transformers config of the language model
    model: nn.Module  # the causal LM (or the composite model holding it)
    decoder: nn.Module  # the module whose forward runs the layer stack (from input embeddings)
    layers: nn.ModuleList
    stack: Stack  # where the layer stack is under the decoder (census/structure/stack.py)
    embedding: nn.Module
    tied: bool  # the output head shares the embedding's weight (read on meta, before any conversion)
    # whole-model parts: embedding, output (0 when tied), final_norm (every norm beside the stack), read on
    # meta; what the text path reads outside them and the layers, and which of those norms run before the
    # stack, only a run tells (census/measure/outside_params.py, after the probes)
    params: dict[str, int]
    way: Way | None = None  # how the probe runs the decoder (census/build/inputs.py), once a probe has run it
    # layer -> the earlier layers whose stored tensors it reads (census/measure/readers.py), once a probe
    # of layers alone failed and the whole stack was run to tell; None before
    sources: dict[int, set[int]] | None = None


def model_class_for(top: Any, text: Any):
    """The causal LM class for the language config, else the composite model that holds it."""
    if type(text) in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING:
        return AutoModelForCausalLM, text
    for auto, mapping in (
        (AutoModelForCausalLM, modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING),
        (AutoModelForImageTextToText, modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING),
    ):
        if type(top) in mapping:
            return auto, top
    raise SpecError("unknown_model_type", f"model_type {top.model_type!r}: transformers has no causal language model for it")


def build(top: Any, text: Any) -> Built:
    """The language model on meta in bf16, weights tied, with speccat's attention."""
    auto, config = model_class_for(top, text)
    first = None
    for implementation in BUILD_ATTENTION:
        try:
            with torch.device("meta"), no_init_weights():
                model = auto.from_config(config, dtype=BUILD_DTYPE, attn_implementation=implementation, trust_remote_code=False)
            break
        except (SpecError, MemoryError):  # out of memory is the budget's verdict, not the attention's
            raise
        except Exception as err:  # a model that refuses speccat's attention is built with its own (census/kernels/routing.py routes it)
            first = first or err
    else:  # the config parsed, but its values cannot make a model (pad id beyond vocab...)
        raise SpecError("bad_value", f"config: transformers cannot build a model from it: {type(first).__name__}: {first}") from None
    model.tie_weights()
    return locate(model)


def locate(model: nn.Module) -> Built:
    """Where the parts of a built model are, and its whole-model parameter parts."""
    if not all(module.training for module in model.modules()):  # from_config builds in training mode: setting it again costs every module a __setattr__
        model.train()
    stack = find_stack(model)
    decoder, layers = stack.runner, stack.layers
    embedding = model.get_input_embeddings()
    head = model.get_output_embeddings()
    shared = {id(p) for p in embedding.parameters()}
    tied = head is not None and id(getattr(head, "weight", None)) in shared
    params = {
        "embedding": sum(p.numel() for p in embedding.parameters()),
        "output": sum(p.numel() for p in head.parameters() if id(p) not in shared) if head is not None else 0,
        "final_norm": sum(p.numel() for m in decoder.children() if is_norm(m) for p in m.parameters()),
    }
    config = getattr(decoder, "config", None) or getattr(model, "config")
    return Built(config, model, decoder, layers, stack, embedding, tied, params)

"""Building the language model on the meta device and classifying its layers (DESIGN §2.4 steps 1-2).

The model is built from the config with transformers (never with remote code), with weight
initialisation skipped: on meta tensors it would only cost time. Each decoder layer gets a
shape signature (its class, its parameters' paths, shapes and dtypes, and its flavours); equal
signatures are one distinct shape, censused once.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
from transformers.initialization import no_init_weights
from transformers.models.auto import modeling_auto
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from speccat.census import checks
from speccat.census.attention import ATTENTION_IMPL
from speccat.census.config import census_config, language_config
from speccat.census.spec import SpecError
from speccat.census.stack import Stack, find_stack

BUILD_DTYPE = torch.bfloat16
# Attention implementations tried in turn: speccat's (the attention interface); then, for models
# that look their attention up elsewhere (falcon's own table, gpt-neo), SDPA and eager, whose
# attention census/routing.py routes to the same kernel while the layers run.
BUILD_ATTENTION = (ATTENTION_IMPL, "sdpa", "eager")
_DELTA_RULE = re.compile(r"chunk_gated_delta_rule")
# State-space mixers no family prices, by class name (MambaMixer, ...SSM...) or attribute name (mamba, ssm).
_STATE_SPACE_CLASS = re.compile(r"Mamba|SSM|StateSpace")
_STATE_SPACE_ATTRIBUTE = re.compile(r"^(mamba|ssm)", re.IGNORECASE)


@dataclass
class Built:
    """A language model built on meta, and where its parts are."""

    config: Any  # the transformers config of the language model
    model: nn.Module  # the causal LM (or the composite model holding it)
    decoder: nn.Module  # the module whose forward runs the layer stack (from input embeddings)
    layers: nn.ModuleList
    stack: Stack  # where the layer stack is under the decoder (census/stack.py)
    embedding: nn.Module
    head: nn.Module | None
    tied: bool  # the output head shares the embedding's weight (read on meta, before any conversion)
    params: dict[str, int]  # whole-model parts: embedding, output (0 when tied), final_norm


@dataclass(eq=False)  # compared and hashed by identity: one object per distinct shape
class Shape:
    """One distinct layer shape: its flavours, signature and the layers that have it."""

    attention: str  # "full" or "linear"
    ffn: str  # "dense" or "moe"
    signature: tuple
    layers: list[int] = field(default_factory=list)

    @property
    def first(self) -> int:
        return self.layers[0]


def resolve_config(config: Mapping) -> tuple[Any, Any, bool]:
    """(top-level config, language config, nested) as transformers objects, with refusals."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise SpecError("missing_field", f"model_type: the top-level config must name its architecture, got {model_type!r}")
    if model_type not in CONFIG_MAPPING:
        if "auto_map" in config:
            raise SpecError(
                "remote_code",
                f"model_type {model_type!r}: transformers does not know it and the config's auto_map names remote code, "
                "which speccat never runs",
            )
        raise SpecError("unknown_model_type", f"model_type {model_type!r}: transformers {_transformers_version()} does not know it")
    try:
        top = CONFIG_MAPPING[model_type].from_dict(census_config(config))
        text = top.get_text_config(decoder=True)
    except Exception as err:  # building a config object only parses it: any failure is the config's
        raise SpecError("bad_value", f"config: transformers refuses it: {type(err).__name__}: {err}") from None
    nested = text is not top
    if nested and "tie_word_embeddings" in config:
        text.tie_word_embeddings = top.tie_word_embeddings  # the composite model ties by its own config
    return top, text, nested


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


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
        except SpecError:
            raise
        except Exception as err:  # a model that refuses speccat's attention is built with its own (census/routing.py routes it)
            first = first or err
    else:  # the config parsed, but its values cannot make a model (pad id beyond vocab...)
        raise SpecError("bad_value", f"config: transformers cannot build a model from it: {type(first).__name__}: {first}") from None
    model.tie_weights()
    return locate(model)


def locate(model: nn.Module) -> Built:
    """Where the parts of a built model are, and its whole-model parameter parts."""
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
    return Built(config, model, decoder, layers, stack, embedding, head, tied, params)


def is_norm(module: nn.Module) -> bool:
    """A normalisation module (RMSNorm, LayerNorm and the models' own *Norm classes)."""
    return isinstance(module, (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm)) or "Norm" in type(module).__name__


# --------------------------------------------------------------------------- classification


@lru_cache(maxsize=None)
def _forward_names(cls: type) -> tuple[str, ...]:
    """The global names a module class's forward reads (through its decorators)."""
    code = getattr(inspect.unwrap(cls.forward), "__code__", None)
    return code.co_names if code is not None else ()


def runs_delta_rule(module: nn.Module) -> bool:
    """Whether the module's forward calls a gated delta rule (the linear-attention recurrence)."""
    return any(_DELTA_RULE.search(name) for name in _forward_names(type(module)))


def uses_attention_interface(module: nn.Module) -> bool:
    """Whether the module's forward dispatches through transformers' attention interface."""
    return "ALL_ATTENTION_FUNCTIONS" in _forward_names(type(module))


def delta_rule_names(module: nn.Module) -> list[tuple[Any, str]]:
    """(defining module, global name) of each gated delta rule the module's forward calls."""
    home = sys.modules[type(module).__module__]
    return [(home, n) for n in _forward_names(type(module)) if _DELTA_RULE.search(n) and callable(getattr(home, n, None))]


def is_experts(module: nn.Module) -> bool:
    """Routed experts built with transformers' experts interface (fused 3-D weights)."""
    return hasattr(module, "num_experts") and hasattr(module, "has_gate") and hasattr(module, "is_concatenated")


def _state_space_mixer(name: str, module: nn.Module) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    return not is_norm(module) and bool(_STATE_SPACE_CLASS.search(type(module).__name__) or _STATE_SPACE_ATTRIBUTE.search(leaf))


def signature(index: int, layer: nn.Module) -> tuple:
    """(class, attention flavour, ffn flavour, parameters' paths, shapes and dtypes), refusing layers
    no family prices: state-space mixers, unfused experts.

    attention is linear when a gated delta rule runs, full when the attention interface does,
    `eager` (decided by what runs) otherwise; ffn is moe when the layer holds routed experts.
    """
    attention, ffn = "none", "dense"
    for name, module in layer.named_modules():
        if not name:
            continue
        if _state_space_mixer(name, module):
            raise SpecError("unsupported_layer", f"layer {index} ({type(layer).__name__}) holds {name} ({type(module).__name__}): a state-space mixer no family prices")
        if is_experts(module):
            ffn = "moe"
        elif name.rsplit(".", 1)[-1] == "experts":
            raise SpecError("unsupported_layer", f"layer {index}: {name} is not built with transformers' experts interface, so it cannot run grouped_mm")
        if runs_delta_rule(module):
            attention = "linear"
        elif attention == "none" and uses_attention_interface(module):
            attention = "full"
    if attention == "none":
        attention = "eager"  # no interface call in its code: its own attention, told by what runs (census/routing.py)
    if _cross_attention_only(layer):
        raise SpecError(
            "unsupported_layer",
            f"layer {index} ({type(layer).__name__}): a cross-attention layer (it attends to encoder states, "
            "and has no self-attention); the census prices self-attention and known mixers only",
        )
    params = tuple((name, tuple(p.shape), p.dtype) for name, p in layer.named_parameters())
    return (type(layer).__name__, attention, ffn, params)


_CROSS_INPUTS = ("cross_attention_states", "encoder_hidden_states")


def _cross_attention_only(layer: nn.Module) -> bool:
    """A layer whose forward takes encoder states and whose only attention is a cross-attention
    (mllama's cross-attention layers; a bart decoder layer also has self-attention)."""
    takes = set(inspect.signature(layer.forward).parameters)
    if not takes & set(_CROSS_INPUTS):
        return False
    attentions = [n for n, m in layer.named_children() if "Attention" in type(m).__name__]
    return bool(attentions) and all("Cross" in type(layer.get_submodule(n)).__name__ or "cross" in n for n in attentions)


def classify(layers: nn.ModuleList) -> list[tuple[int, Shape]]:
    """Each layer's index and its distinct shape (shared objects for equal signatures)."""
    shapes: dict[tuple, Shape] = {}
    stack = []
    for index, layer in enumerate(layers):
        sig = signature(index, layer)
        shape = shapes.get(sig)
        if shape is None:
            shape = shapes[sig] = Shape(sig[1], sig[2], sig)
        shape.layers.append(index)
        stack.append((index, shape))
    return stack


def check_config(config: Mapping) -> tuple[Any, Any, bool]:
    """Every pre-build refusal, then the resolved transformers configs."""
    language = language_config(config)
    checks.check_raw(language)
    top, text, nested = resolve_config(config)
    checks.check_resolved(language, text, nested=nested)
    return top, text, nested

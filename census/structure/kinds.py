"""Layer kinds from what the census sees: one kind per distinct layer shape, with a readable name.

A kind is a distinct shape (census/build/model.py: class, mixer, feed-forward, parameters' paths,
shapes and dtypes). Its name is derived from its facts:

- the mixer (`full` attention, `linear` for a gated delta rule, `mamba`, `mamba2`,
  `short_conv`, `full_mamba` and `full_mamba2` for attention beside a Mamba or Mamba2 mixer
  in one layer; `none` for a feed-forward-only block) and the feed-forward (`dense`, `moe`;
  `none` for a mixer-only block), joined without the parts a layer lacks: `full_dense`,
  `linear_moe`, `short_conv_dense`, `full` and `mamba2` (mixer-only blocks), `moe` (an
  MoE-only block); `_block` after them when the layer's attention runs in a block of its own
  with an MLP before its state-space mixer (zamba2's shared transformer block:
  `full_mamba2_dense_block`, never `full_mamba2_dense`, falcon_h1's parallel hybrid, nor its
  plain `mamba2` layers);
- when two shapes would share that name, the facts that tell them apart are added, in this
  order, until the names differ: the config's layer type for the mixer when all of a
  full-attention shape's layers are of one type that is not full attention and the clashing
  shapes' types differ: `sliding` for sliding-window layers first, then, for shapes that
  still clash, another type (`chunked` for llama4's chunked attention: `chunked_moe` beside
  `full_moe`); `kv_shared` for a shape whose attention reads the keys and values an earlier
  layer stored, beside one that keeps its own (gemma3n: `full_dense_kv_shared`); the
  layer's class (`full_dense_glm4_moe_mtp_layer`); finally the shape's ordinal in stack
  order (`full_dense_2`).

A family profile (census/structure/profiles/*.yaml) may name the kinds instead: when every shape maps
to one of the profile's kinds by its flavours and no two shapes map to the same kind, the
profile's names are used (and its op counts compared with the counted ones). Otherwise the
derived names are used for every shape: a profile never refuses a model, and two differently
built layers never share a kind.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from speccat.census.structure.family import Family

_NAME_LIMIT = 64
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def base_name(mixer: str, ffn: str) -> str:
    """`{mixer}_{ffn}` without the parts a layer lacks (`none`)."""
    return "_".join(part for part in (mixer, ffn) if part != "none") or "block"


def snake(name: str) -> str:
    """DecoderLayer → decoder_layer; lower case letters, digits and underscores only."""
    return re.sub(r"[^a-z0-9_]+", "_", _CAMEL.sub("_", name).lower()).strip("_")


def _clip(name: str) -> str:
    name = name if name[:1].isalpha() else f"k_{name}"
    return name[:_NAME_LIMIT].rstrip("_")


def _layer_types(config: Any, layers: Sequence[int]) -> set[str] | None:
    types = getattr(config, "layer_types", None)
    if not isinstance(types, (list, tuple)) or not all(isinstance(t, str) for t in types):
        return None
    if any(i >= len(types) for i in layers):
        return None
    return {types[i] for i in layers}


def _layer_type(config: Any, layers: Sequence[int]) -> str | None:
    """The layer type all these layers have by the config's `layer_types`, else None."""
    types = _layer_types(config, layers)
    return next(iter(types)) if types and len(types) == 1 else None


def _type_word(layer_type: str) -> str:
    """sliding_attention → sliding, chunked_attention → chunked."""
    if "sliding" in layer_type:
        return "sliding"
    word = snake(layer_type).removesuffix("_attention")
    return word or snake(layer_type)


def derived_names(shapes: Sequence[Any], config: Any) -> list[str]:
    """One readable, distinct name per shape (in the order given: stack order of first layers)."""
    names = [base_name(s.mixer, s.ffn) + ("_block" if s.block else "") for s in shapes]

    def clashing() -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        for i, name in enumerate(names):
            groups.setdefault(name, []).append(i)
        return {n: idx for n, idx in groups.items() if len(idx) > 1}

    # 1. the config's own layer types, where each clashing shape's layers are all of one type
    #    and the types differ: a full-attention shape of sliding layers is named so; then,
    #    where shapes still clash, one of another type that is not full attention (chunked)
    for sliding_only in (True, False):
        for indices in clashing().values():
            types = [_layer_type(config, shapes[i].layers) for i in indices]
            if len(set(types)) > 1:
                for i, layer_type in zip(indices, types):
                    if layer_type is None or shapes[i].mixer != "full" or layer_type.startswith("full"):
                        continue
                    if ("sliding" in layer_type) == sliding_only:
                        names[i] = base_name(_type_word(layer_type), shapes[i].ffn)
    # 2. `kv_shared` for the shapes whose attention reads the keys and values an earlier layer
    #    stored, beside clashing shapes that keep their own
    for indices in clashing().values():
        if len({shapes[i].reads_kv for i in indices}) > 1:
            for i in indices:
                if shapes[i].reads_kv:
                    names[i] = _clip(f"{names[i]}_kv_shared")
    # 3. the layer's class, when the clashing shapes are of different classes
    for indices in clashing().values():
        classes = [shapes[i].signature[0] for i in indices]
        if len(set(classes)) > 1:
            for i in indices:
                names[i] = _clip(f"{names[i]}_{snake(shapes[i].signature[0])}")
    # 4. the ordinal, in stack order (the first keeps the plain name)
    for indices in clashing().values():
        for ordinal, i in enumerate(indices[1:], start=2):
            names[i] = _clip(f"{names[i][: _NAME_LIMIT - 4]}_{ordinal}")
    return [_clip(n) for n in names]


def profile_names(family: Family, shapes: Sequence[Any]) -> list[str] | None:
    """The profile's kind per shape, when it names every shape and no two alike; else None. A
    profile's kinds state flavours only, so no profile names a shape whose attention runs in a
    block of its own (its derived name says so)."""
    if any(s.block for s in shapes):
        return None
    names = [family.kind_for(s.mixer, s.ffn) for s in shapes]
    if any(n is None for n in names) or len(set(names)) != len(names):
        return None
    return names


def kind_names(family: Family, shapes: Sequence[Any], config: Any) -> tuple[list[str], bool]:
    """(a name per shape, whether the profile named them)."""
    named = profile_names(family, shapes)
    if named is not None:
        return named, True
    return derived_names(shapes, config), False

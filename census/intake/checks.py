"""Refusals before anything is built (docs/census.md, "Refusals"): absurd configs cost nothing.

The parsed JSON itself is checked first (`unique_keys` while census/intake/config.py parses it,
`check_json_tree` after): no key twice in one object, nesting within max_config_depth, finite
numbers, valid Unicode. Then two passes, each a tuple of small check functions run in order;
adding a case means adding a function to one of the tuples:

- RAW_CHECKS look at the language config as JSON (no torch, no transformers);
- RESOLVED_CHECKS look at the transformers config object built from it, where class defaults
  and aliases (n_embd → hidden_size) have been applied, still before any model is built.

census/intake/config.py's `precheck` runs the raw pass alone (no torch); census/intake/resolve.py runs both.

Bounds live in census/intake/limits.yaml.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from speccat.census.intake.limits import LIMITS
from speccat.census.spec import SpecError
from speccat.census.intake.training import TRAINING, check_kernels

EXPERT_COUNT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_size(field: str, value: Any, where: str = "", layers: Any = None) -> None:
    """A size within its bounds; for a per-layer size (census/intake/limits.yaml `per_layer_sizes`),
    also a non-empty list of them, as long as the stack where `layers` states its length."""
    low, high = LIMITS.sizes[field]
    label = f"{where}{field}"
    if field in LIMITS.unbounded and _is_int(value) and value == LIMITS.unbounded[field]:
        return  # the field's own "no bound" (census/intake/limits.yaml `unbounded`)
    if field in LIMITS.per_layer_sizes and isinstance(value, (list, tuple)):
        if not value:
            raise SpecError("bad_value", f"{label}: a per-layer list must name a size for every layer, got an empty list")
        if _is_int(layers) and len(value) != layers:
            raise SpecError("bad_value", f"{label}: {len(value)} entries, but num_hidden_layers is {layers}")
        for index, entry in enumerate(value):
            _check_entry(f"{label}[{index}]", entry, low, high)
        return
    _check_entry(label, value, low, high)


def _check_entry(label: str, value: Any, low: int, high: int) -> None:
    if not _is_int(value):
        raise SpecError("bad_value", f"{label}: must be an integer, got {type(value).__name__} {value!r}")
    if value < low:
        raise SpecError("bad_value", f"{label}: must be >= {low}, got {value}")
    if value > high:
        raise SpecError("too_large", f"{label}: {value} is beyond the sane bound {high} (census/intake/limits.yaml)")


# --------------------------------------------------------------------------- the parsed text


def unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """json.loads' object_pairs_hook: a key stated twice in one object is refused, since JSON
    parsers disagree on which value wins (census/intake/config.py reports it as bad_json)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise SpecError("bad_json", f"key {twice!r} appears more than once in one object")
    return obj


def _walk_path(path: str, key: Any) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)


def check_json_tree(data: Any, source: str = "config") -> None:
    """Walk a parsed config without recursion, so that nothing after it (deep copies, hashing,
    transformers) recurses into an absurd depth or meets a value JSON cannot carry:

    - nesting deeper than max_config_depth is `bad_json`;
    - NaN is `bad_value` wherever it stands (a number literal beyond the float range, 1e999, is
      refused while parsing); Infinity is left to `check_finite`, which refuses it in the fields
      that must be finite;
    - a string with a lone surrogate (\\ud800) is `bad_json`: it is not text.
    """
    limit = LIMITS.max_config_depth
    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                raise SpecError("bad_json", f"{source}: {path or 'the top level'} nests deeper than {limit} levels (census/intake/limits.yaml)")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, child in items:
                if isinstance(key, str):
                    _check_text(key, source, path)
                stack.append((child, _walk_path(path, key), depth + 1))
        elif isinstance(value, float) and math.isnan(value):
            raise SpecError("bad_value", f"{source}: {path}: NaN is not a value any config field can hold")
        elif isinstance(value, str):
            _check_text(value, source, path)


def _check_text(text: str, source: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecError("bad_json", f"{source}: {path or 'a key'}: a string with a lone surrogate is not valid Unicode") from None


# --------------------------------------------------------------------------- raw JSON


def check_model_type(language: Mapping) -> None:
    model_type = language.get("model_type")
    if model_type is None:
        raise SpecError("missing_field", "model_type: required; it names the architecture transformers builds")
    if not isinstance(model_type, str) or not model_type.strip():
        raise SpecError("bad_value", f"model_type: must be a non-empty string, got {model_type!r}")


def check_sizes(language: Mapping) -> None:
    for field in LIMITS.sizes:
        if language.get(field) is not None:
            _check_size(field, language[field], layers=language.get("num_hidden_layers"))


def check_layer_types(language: Mapping) -> None:
    layer_types = language.get("layer_types")
    if layer_types is None:
        return
    if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
        raise SpecError("bad_value", "layer_types: must be a list of strings, one per layer")
    layers = language.get("num_hidden_layers")
    if _is_int(layers) and len(layer_types) != layers:
        raise SpecError("bad_value", f"layer_types: {len(layer_types)} entries, but num_hidden_layers is {layers}")


def check_heads_divide(language: Mapping) -> None:
    heads, kv_heads = language.get("num_attention_heads"), language.get("num_key_value_heads")
    if _is_int(heads) and _is_int(kv_heads) and kv_heads > 0 and heads % kv_heads:
        raise SpecError(
            "bad_value",
            f"num_key_value_heads: num_attention_heads {heads} is not divisible by num_key_value_heads {kv_heads}",
        )


def check_top_k(language: Mapping) -> None:
    top_k = language.get("num_experts_per_tok")
    experts = next((language[f] for f in EXPERT_COUNT_FIELDS if _is_int(language.get(f))), None)
    if _is_int(top_k) and experts and top_k > experts:
        raise SpecError("bad_value", f"num_experts_per_tok: {top_k} exceeds the {experts} experts")


def check_finite(language: Mapping) -> None:
    """Infinity is accepted where transformers accepts it (nemotron_h's time_step_limit bound)
    and refused in every size, count or ratio the census reads (census/intake/limits.yaml `finite`),
    at any depth (rope_parameters.rope_theta)."""
    stack: list[tuple[Any, str]] = [(language, "")]
    while stack:
        value, path = stack.pop()
        items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
        for key, child in items:
            where = _walk_path(path, key)
            if isinstance(child, (Mapping, list)):
                stack.append((child, where))
            elif isinstance(child, float) and math.isinf(child) and (key in LIMITS.finite or key in LIMITS.sizes):
                raise SpecError("bad_value", f"{where}: {child} where a finite size, count or ratio belongs")


RAW_CHECKS: tuple[Callable[[Mapping], None], ...] = (
    check_model_type,
    check_finite,
    check_sizes,
    check_layer_types,
    check_heads_divide,
    check_top_k,
    check_kernels,  # a kernel the census does not model (census/intake/training.yaml `kernels`)
)


def check_raw(language: Mapping) -> None:
    for check in RAW_CHECKS:
        check(language)


# --------------------------------------------------------------------------- resolved config


def _stated(language: Mapping, field: str, aliases: Mapping[str, str]) -> bool:
    return language.get(field) is not None or language.get(aliases.get(field, field)) is not None


def check_required(language: Mapping, cfg: Any, *, nested: bool) -> None:
    """A flat config must state the main sizes its class has (under their names or the class's aliases)."""
    if nested:
        return  # a sparse text_config leans on its class defaults
    aliases = getattr(cfg, "attribute_map", {}) or {}
    for field in LIMITS.required:
        if _resolved(cfg, field) is None and not _stated(language, field, aliases):
            continue  # the architecture has no such size (a mamba model has no attention heads)
        if field == LIMITS.stack_length:
            continue  # the built stack answers for it (check_stack_length)
        if not _stated(language, field, aliases):
            alias = f" (or {aliases[field]})" if field in aliases else ""
            raise SpecError("missing_field", f"{field}{alias}: required; a flat config must state {list(LIMITS.required)}")


def check_stack_length(language: Mapping, cfg: Any, layers: int, *, nested: bool) -> None:
    """After the build: a flat config states its layer count, under the field's name or its class's
    alias, or as another field equal to the built stack's length (an integer, or a per-layer list
    or string of that length), never only through its class's default."""
    field = LIMITS.stack_length
    aliases = getattr(cfg, "attribute_map", {}) or {}
    if nested or _stated(language, field, aliases) or _resolved(cfg, field) is None:
        return  # stated, or leaning on a nested config's defaults, or a class with no such size (blt's sub-stacks)
    for value in language.values():
        if (_is_int(value) and value == layers) or (isinstance(value, (list, str)) and len(value) == layers):
            return
    alias = f" (or {aliases[field]})" if field in aliases else ""
    raise SpecError(
        "missing_field",
        f"{field}{alias}: required; a flat config must state {list(LIMITS.required)} (no field it states is the built stack's {layers} layers)",
    )


def _resolved(cfg: Any, field: str) -> Any:
    try:
        return getattr(cfg, field, None)
    except Exception:  # some configs refuse global reads of per-layer attributes
        return None


def check_resolved_sizes(language: Mapping, cfg: Any, *, nested: bool) -> None:
    view = {field: _resolved(cfg, field) for field in LIMITS.sizes}
    for field, value in view.items():
        if value is not None:
            _check_size(field, value, "resolved ", view["num_hidden_layers"])
    check_heads_divide(view)
    check_top_k(view)
    layer_types = _resolved(cfg, "layer_types")
    if isinstance(layer_types, (list, tuple)) and _is_int(view["num_hidden_layers"]) and len(layer_types) != view["num_hidden_layers"]:
        raise SpecError("bad_value", f"layer_types: {len(layer_types)} entries, but num_hidden_layers is {view['num_hidden_layers']}")


def check_router_k(language: Mapping, cfg: Any, *, nested: bool) -> None:
    """Routed experts need a top-k: a config (or its class default) with experts but a null
    num_experts_per_tok builds, yet its router cannot run (deepseek_v2's defaults)."""
    experts = next((f for f in EXPERT_COUNT_FIELDS if _is_int(_resolved(cfg, f)) and _resolved(cfg, f) > 0), None)
    if experts and hasattr(cfg, "num_experts_per_tok") and _resolved(cfg, "num_experts_per_tok") is None:
        raise SpecError("bad_value", f"num_experts_per_tok: null, but {experts} is {_resolved(cfg, experts)}: the router's top-k has no k")


# Config lists of layer indices (mllama's cross-attention layers): each names a layer of the stack.
LAYER_INDEX_LISTS = ("cross_attention_layers",)


def check_layer_indices(language: Mapping, cfg: Any, *, nested: bool) -> None:
    """A list of layer indices names distinct layers of the stack: transformers builds a stack
    whose cross_attention_layers name no layer of it without a word (mllama's: every layer
    self-attention), and the census would give a spec of another model than the config means."""
    layers = _resolved(cfg, "num_hidden_layers")
    for field in LAYER_INDEX_LISTS:
        value = _resolved(cfg, field)
        if value is None:
            continue
        if not isinstance(value, (list, tuple)) or not all(_is_int(i) for i in value):
            raise SpecError("bad_value", f"{field}: must be a list of layer indices, got {value!r:.80}")
        if len(set(value)) != len(value):
            raise SpecError("bad_value", f"{field}: names a layer twice: {list(value)!r:.80}")
        beyond = [i for i in value if i < 0 or (_is_int(layers) and i >= layers)]
        if beyond:
            raise SpecError("bad_value", f"{field}: names layer {beyond[0]}, outside the stack of {layers} layers (0 to {layers - 1})")


def check_resolved_kernels(language: Mapping, cfg: Any, *, nested: bool) -> None:
    """The kernel fields again as the config class resolves them (its defaults included)."""
    check_kernels({field: getattr(cfg, field, None) for field in TRAINING.kernels})


RESOLVED_CHECKS: tuple[Callable[..., None], ...] = (check_required, check_resolved_sizes, check_router_k, check_layer_indices, check_resolved_kernels)


def check_resolved(language: Mapping, cfg: Any, *, nested: bool) -> None:
    for check in RESOLVED_CHECKS:
        check(language, cfg, nested=nested)

"""ModelSpec: what the census states about one architecture (docs/census.md), and SpecError.

A ModelSpec is an immutable mapping, validated when it is built: unknown keys, missing
required fields, wrong types, non-positive sizes, inconsistent heads and a layer stack that
does not add up are all refused with a SpecError that names the field and what was allowed.
"Absent" is not "zero": an optional field that the model does not have is simply not there
(a JSON null is refused). A spec round-trips through JSON exactly.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.vocabulary import MIXER_FLAVOURS, CENSUS_REASONS, END_PARTS, FFN_FLAVOURS, KIND_DIMS, LOGIT_FACTS, OPS, UNPRICED_OPS, VARIANTS

# Stable reason codes of a census refusal: catalogue/vocabulary.yaml's `census` group.
REASONS: tuple[str, ...] = CENSUS_REASONS


class SpecError(ReasonError):
    """A census refusal: a stable `reason` code and a one-line message naming the field and what was allowed."""

    group = "census"


REQUIRED_STR = ("name", "arch")
OPTIONAL_STR = ("built_as",)  # the transformers class the census built (a remote-code config's substitute: census/intake/remote.py)
REQUIRED_INT = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
OPTIONAL_INT = (
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "max_position_embeddings",
    "num_experts",
    "num_experts_per_tok",
    "num_shared_experts",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_num_value_heads",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "ssm_inner_size",
    "ssm_state_size",
    "ssm_dt_rank",
    "ssm_conv_kernel",
    "ssm_num_heads",
    "ssm_head_dim",
    "ssm_n_groups",
    "short_conv_kernel",
    "wkv_size",
    "lru_width",
    "lru_conv_kernel",
    "linear_eager_heads",
    "linear_eager_head_dim",
    "linear_eager_block",
    "sliding_window",
)
# Counts that may legitimately be zero when present (every other size must be positive).
NON_NEGATIVE_INT = frozenset({"first_k_dense_replace"})
FLAGS = (
    "qkv_bias",
    "o_bias",
    "mlp_bias",
    "norm_bias",
    "qk_norm",
    "attn_output_gate",
    "shared_expert_gate",
    "tie_word_embeddings",
    "layer_norms",  # true when the layer's norms are LayerNorm (mean-centred), false for RMSNorm
    "sdpa_refused",  # true when transformers runs the model's attention through no sdpa (its class's _supports_sdpa)
)
STRUCTURE_REQUIRED = ("layers", "ops")
STRUCTURE_OPTIONAL = ("flavours", "params", "measured", "variants", "attention_dims", "measured_at", "ends")

KEYS = frozenset(
    REQUIRED_STR + OPTIONAL_STR + REQUIRED_INT + OPTIONAL_INT + FLAGS + STRUCTURE_REQUIRED + STRUCTURE_OPTIONAL
)


# params: whole-model parts, then per-kind parts (one layer of that kind). The extras (the
# parameters the text path reads outside its layers, embedding, head and final norm, before and
# after the stack: census/measure/outside_params.py) every census states; a spec from before
# them may not (0).
MODEL_PARAM_PARTS = ("embedding", "output", "final_norm")
MODEL_PARAM_EXTRAS = ("embedding_extra", "head_extra")
KIND_PARAM_PARTS = ("attention", "ffn_routed", "ffn_shared", "ffn_router", "ffn_dense", "norm", "other")

MEASURED_KEYS = frozenset({"seq_length", "attention_impl", "experts_impl", "bytes_per_token", "forward_flops", "backward_peak", "working_set"})
POINT_KEYS = ("point", "seq_length", "tp", "cp", "sequence_parallel", "recompute", "bytes_per_token")
MEASURED_OPS = OPS + UNPRICED_OPS

_KIND_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def _bad(field: str, what: str) -> SpecError:
    return SpecError("bad_value", f"{field}: {what}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(field: str, value: Any, minimum: int) -> int:
    if not _is_int(value):
        raise _bad(field, f"must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise _bad(field, f"must be >= {minimum}, got {value}")
    return value


def _check_mapping(field: str, value: Any) -> Mapping:
    if not isinstance(value, Mapping):
        raise _bad(field, f"must be an object, got {type(value).__name__}")
    return value


def _check_keys(field: str, mapping: Mapping, allowed, required=()) -> None:
    unknown = sorted(set(mapping) - set(allowed))
    if unknown:
        raise _bad(field, f"unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    for key in required:
        if key not in mapping:
            raise SpecError("missing_field", f"{field}.{key}: required; needs all of {list(required)}")


def _check_kind_name(field: str, kind: Any) -> str:
    if not isinstance(kind, str) or not _KIND_NAME.match(kind):
        raise _bad(field, f"kind name must match {_KIND_NAME.pattern}, got {kind!r}")
    return kind


def _validate_layers(spec: Mapping) -> tuple[str, ...]:
    layers = spec["layers"]
    if not isinstance(layers, (list, tuple)) or not layers:
        raise _bad("layers", "must be a non-empty list of {kind, count} groups")
    total = 0
    previous = None
    for i, group in enumerate(layers):
        field = f"layers[{i}]"
        _check_keys(field, _check_mapping(field, group), ("kind", "count"), ("kind", "count"))
        kind = _check_kind_name(f"{field}.kind", group["kind"])
        total += _check_int(f"{field}.count", group["count"], 1)
        if kind == previous:
            raise _bad(field, f"repeats kind {kind!r} of the group before it; run-length groups must be merged")
        previous = kind
    if total != spec["num_hidden_layers"]:
        raise _bad("layers", f"counts sum to {total}, but num_hidden_layers is {spec['num_hidden_layers']}")
    return tuple(dict.fromkeys(g["kind"] for g in layers))


def _validate_per_kind(field: str, value: Any, kinds: tuple[str, ...]) -> Mapping:
    mapping = _check_mapping(field, value)
    if set(mapping) != set(kinds):
        raise _bad(field, f"kinds {sorted(mapping)} must be exactly the stack's kinds {sorted(kinds)}")
    return mapping


def _check_counts(field: str, value: Any, keys: tuple[str, ...]) -> None:
    """A mapping of exactly `keys`, each a non-negative integer."""
    _check_keys(field, _check_mapping(field, value), keys, keys)
    for key in keys:
        _check_int(f"{field}.{key}", value[key], 0)


def _validate_ops(spec: Mapping, kinds: tuple[str, ...]) -> None:
    for kind, counts in _validate_per_kind("ops", spec["ops"], kinds).items():
        _check_counts(f"ops.{kind}", counts, OPS)


def _validate_flavours(spec: Mapping, kinds: tuple[str, ...]) -> None:
    for kind, flav in _validate_per_kind("flavours", spec["flavours"], kinds).items():
        field = f"flavours.{kind}"
        _check_keys(field, _check_mapping(field, flav), ("attention", "ffn"), ("attention", "ffn"))
        if flav["attention"] not in MIXER_FLAVOURS:
            raise _bad(f"{field}.attention", f"{flav['attention']!r} is not one of {MIXER_FLAVOURS}")
        if flav["ffn"] not in FFN_FLAVOURS:
            raise _bad(f"{field}.ffn", f"{flav['ffn']!r} is not one of {FFN_FLAVOURS}")


def _validate_variants(spec: Mapping, kinds: tuple[str, ...]) -> None:
    for kind, facts in _validate_per_kind("variants", spec["variants"], kinds).items():
        field = f"variants.{kind}"
        _check_keys(field, _check_mapping(field, facts), VARIANTS, VARIANTS)
        for name in VARIANTS:
            value = facts[name]
            if not isinstance(value, bool):
                _check_int(f"{field}.{name}", value, 0)


def _validate_params(spec: Mapping, kinds: tuple[str, ...]) -> None:
    params = _check_mapping("params", spec["params"])
    _check_keys("params", params, MODEL_PARAM_PARTS + MODEL_PARAM_EXTRAS + ("kinds",), MODEL_PARAM_PARTS + ("kinds",))
    for part in MODEL_PARAM_PARTS + tuple(extra for extra in MODEL_PARAM_EXTRAS if extra in params):
        _check_int(f"params.{part}", params[part], 0)
    for kind, parts in _validate_per_kind("params.kinds", params["kinds"], kinds).items():
        _check_counts(f"params.kinds.{kind}", parts, KIND_PARAM_PARTS)


def _check_per_op(field: str, per_op: Any, names: tuple[str, ...] = MEASURED_OPS) -> None:
    per_op = _check_mapping(field, per_op)
    _check_keys(field, per_op, names, names)
    for op in names:
        value = per_op[op]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(f"{field}.{op}", f"must be a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise _bad(f"{field}.{op}", f"must be finite and >= 0, got {value!r}")


def _validate_measured(spec: Mapping, kinds: tuple[str, ...]) -> None:
    for kind, entry in _validate_per_kind("measured", spec["measured"], kinds).items():
        field = f"measured.{kind}"
        required = ("seq_length", "attention_impl", "bytes_per_token")
        _check_keys(field, _check_mapping(field, entry), MEASURED_KEYS, required)
        _check_int(f"{field}.seq_length", entry["seq_length"], 1)
        for key in ("forward_flops", "backward_peak"):  # absent from specs of census version 8 (forward_flops) and 16 (backward_peak) and before
            if key in entry:
                _check_int(f"{field}.{key}", entry[key], 0)
        if "working_set" in entry:  # absent from specs of census version 17 and before
            _check_working_set(f"{field}.working_set", entry["working_set"])
        for key in ("attention_impl", "experts_impl"):
            if key in entry and not (isinstance(entry[key], str) and entry[key]):
                raise _bad(f"{field}.{key}", f"must be a non-empty string, got {entry[key]!r}")
        _check_per_op(f"{field}.bytes_per_token", entry["bytes_per_token"])


def _check_working_set(field: str, value: Any) -> None:
    """A kind's working set at its backward peak (census/measure/backward_peak.py working_set):
    [width, dtype, count] entries (a positive width, a dtype name, a non-zero net count) and the
    constant bytes beside them."""
    _check_keys(field, _check_mapping(field, value), ("widths", "constant_bytes"), ("widths", "constant_bytes"))
    if not _is_int(value["constant_bytes"]):
        raise _bad(f"{field}.constant_bytes", f"must be an integer, got {value['constant_bytes']!r}")
    if not isinstance(value["widths"], list):
        raise _bad(f"{field}.widths", "must be a list of [width, dtype, count]")
    for i, entry in enumerate(value["widths"]):
        if not (isinstance(entry, list) and len(entry) == 3 and _is_int(entry[0]) and entry[0] > 0
                and isinstance(entry[1], str) and entry[1] and _is_int(entry[2]) and entry[2] != 0):
            raise _bad(f"{field}.widths[{i}]", f"must be [positive width, dtype name, non-zero count], got {entry!r}")


def _validate_ends(spec: Mapping, kinds: tuple[str, ...]) -> None:
    """The model's ends measured (census/measure/ends.py): its sequence length, bytes per token per end,
    and the tensors over the vocabulary the head's forward and loss keep, by dtype."""
    ends = _check_mapping("ends", spec["ends"])
    keys = ("seq_length", "bytes_per_token", *LOGIT_FACTS)
    _check_keys("ends", ends, keys, keys)
    _check_int("ends.seq_length", ends["seq_length"], 1)
    for key in LOGIT_FACTS:
        _check_int(f"ends.{key}", ends[key], 0)
    _check_per_op("ends.bytes_per_token", ends["bytes_per_token"], END_PARTS)


def _validate_measured_at(spec: Mapping, kinds: tuple[str, ...]) -> None:
    """The points measured across settings (census/across.py): each names its setting, and per
    kind (a subset of the spec's) the bytes per op per token."""
    points = spec["measured_at"]
    if not isinstance(points, list):
        raise _bad("measured_at", f"must be a list, got {type(points).__name__}")
    names = set()
    for i, point in enumerate(points):
        field = f"measured_at[{i}]"
        _check_keys(field, _check_mapping(field, point), POINT_KEYS + ("encoder_tokens",), POINT_KEYS)
        if "encoder_tokens" in point:  # a cross-attention kind given encoder states of that many tokens
            _check_int(f"{field}.encoder_tokens", point["encoder_tokens"], 1)
        if not isinstance(point["point"], str) or not point["point"] or point["point"] in names:
            raise _bad(f"{field}.point", f"must be a unique non-empty string, got {point['point']!r}")
        names.add(point["point"])
        for key in ("seq_length", "tp", "cp"):
            _check_int(f"{field}.{key}", point[key], 1)
        if not isinstance(point["sequence_parallel"], bool):
            raise _bad(f"{field}.sequence_parallel", f"must be true or false, got {point['sequence_parallel']!r}")
        if not isinstance(point["recompute"], list) or not all(isinstance(s, str) and s for s in point["recompute"]):
            raise _bad(f"{field}.recompute", f"must be a list of switch names, got {point['recompute']!r}")
        per_kind = _check_mapping(f"{field}.bytes_per_token", point["bytes_per_token"])
        unknown = sorted(set(per_kind) - set(kinds))
        if unknown:
            raise _bad(f"{field}.bytes_per_token", f"names kinds the spec does not have: {unknown}")
        for kind, per_op in per_kind.items():
            _check_per_op(f"{field}.bytes_per_token.{kind}", per_op)


def _check_heads(field: str, heads: int, kv_heads: int | None) -> None:
    if kv_heads is not None and heads % kv_heads:
        raise _bad(field, f"num_attention_heads {heads} is not divisible by num_key_value_heads {kv_heads}")


def _validate_attention_dims(spec: Mapping, kinds: tuple[str, ...]) -> None:
    """Kinds whose attention differs in shape state all their attention dims (vocabulary `kind_dims`)."""
    per_kind = _check_mapping("attention_dims", spec["attention_dims"])
    if not per_kind or not set(per_kind) <= set(kinds):
        raise _bad("attention_dims", f"kinds {sorted(per_kind)} must be some of the stack's kinds {sorted(kinds)}")
    for kind, dims in per_kind.items():
        field = f"attention_dims.{kind}"
        _check_keys(field, _check_mapping(field, dims), KIND_DIMS, ("num_attention_heads",))
        for key, value in dims.items():
            _check_int(f"{field}.{key}", value, 1)
        _check_heads(f"{field}.num_key_value_heads", dims["num_attention_heads"], dims.get("num_key_value_heads"))


def validate(spec: Mapping) -> None:
    """Raise SpecError unless `spec` is a well-formed ModelSpec mapping."""
    _check_mapping("spec", spec)
    _check_keys("spec", spec, KEYS)
    for key in REQUIRED_STR + REQUIRED_INT + STRUCTURE_REQUIRED:
        if key not in spec:
            raise SpecError("missing_field", f"{key}: required; a ModelSpec needs {list(REQUIRED_STR + REQUIRED_INT + STRUCTURE_REQUIRED)}")
    for key in REQUIRED_STR:
        if not isinstance(spec[key], str) or not spec[key]:
            raise _bad(key, f"must be a non-empty string, got {spec[key]!r}")
    for key in OPTIONAL_STR:
        if key in spec and (not isinstance(spec[key], str) or not spec[key]):
            raise _bad(key, f"must be a non-empty string when present, got {spec[key]!r}")
    for key in REQUIRED_INT:
        _check_int(key, spec[key], 1)
    for key in OPTIONAL_INT:
        if key in spec:
            if spec[key] is None:
                raise _bad(key, "is null; leave an absent field out rather than setting it to null")
            _check_int(key, spec[key], 0 if key in NON_NEGATIVE_INT else 1)
    for key in FLAGS:
        if key in spec and not isinstance(spec[key], bool):
            raise _bad(key, f"must be true or false, got {spec[key]!r}")
    _check_heads("num_key_value_heads", spec["num_attention_heads"], spec.get("num_key_value_heads"))
    kinds = _validate_layers(spec)
    _validate_ops(spec, kinds)
    for key, check in (
        ("flavours", _validate_flavours), ("params", _validate_params), ("measured", _validate_measured),
        ("variants", _validate_variants), ("attention_dims", _validate_attention_dims), ("measured_at", _validate_measured_at),
        ("ends", _validate_ends),
    ):  # fmt: skip
        if key in spec:
            check(spec, kinds)


def _freeze(value: Any) -> Any:
    """A deep copy through plain JSON types, so a spec never shares state with its input."""
    if isinstance(value, Mapping):
        return {str(k): _freeze(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_freeze(v) for v in value]
    return value


class ModelSpec(Mapping):
    """A validated, read-only ModelSpec mapping."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping):
        validate(data)
        self._data = _freeze(data)

    def __getitem__(self, key: str) -> Any:
        return _freeze(self._data[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"ModelSpec(name={self._data['name']!r}, arch={self._data['arch']!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ModelSpec):
            return self._data == other._data
        return isinstance(other, Mapping) and self._data == _freeze(other)

    __hash__ = None  # mutable-looking contents; compare, do not hash

    @property
    def kinds(self) -> tuple[str, ...]:
        """The stack's kinds in order of first appearance."""
        return tuple(dict.fromkeys(g["kind"] for g in self._data["layers"]))

    def to_dict(self) -> dict:
        return _freeze(self._data)

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self._data, allow_nan=False, **kwargs)

    @classmethod
    def from_json(cls, text: str) -> ModelSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise SpecError("bad_json", f"spec JSON: {err}") from None
        return cls(data)

"""The names a layer's record expressions read (docs/pricing.md).

Every value is a Python float (counts and flags included), so all pricing arithmetic is IEEE
double arithmetic; that is what lets the fast path evaluate expressions over numpy arrays and
still agree with the direct evaluator bit for bit.

A name's value comes from the spec (a plain ModelSpec mapping), the kind (its op counts and
flavours) or the setting (one grid row); the two widths costs.yaml reads and no spec states
come from the spec's family profile (catalogue/records/family_widths.py). `layer_names` builds
them as a `LayerNames` mapping. A name the layer cannot supply is left out of the mapping with
the reason why; reading it falls back to the records file's `defaults`, and failing that
raises PricingError("missing_field") naming the spec field that is absent. It is never zero
by accident. Names derived in the records file (its `names:` section) are evaluated on first
read and kept.

The work is split so pricing can reuse it: `kind_values` once per kind, `setting_values` once
per setting (it reads nothing of the kind), combined by `bind`. `kind_values` is where pricing
reads a kind of the spec: its names, and the parameters of its groups that costs.yaml reads
(`KindValues.params`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.records.family_widths import WIDTH_NAMES, family_widths
from speccat.catalogue.records.settings import fixed_default
from speccat.catalogue.vocabulary import KIND_DIMS, OPS, VARIANTS

# Every name a layer can supply, in the order of the table in docs/pricing.md.
SETTING_NAMES: tuple[str, ...] = (
    "megatron", "s", "b", "t", "cp", "sp", "cap_fact", "gmm", "dropless_tok_factor", "fa",
    "bytes_compute", "param_casts", "ulysses", "micro_factor", "se", "kernel_flash", "kernel_efficient", "kernel_math",
)  # fmt: skip
# The spec's flags a formula reads as names (1.0 or 0.0).
FLAG_NAMES: tuple[str, ...] = ("layer_norms", "mlp_bias", "shared_expert_gate", "sdpa_refused")
KIND_NAMES: tuple[str, ...] = (
    "h", "a", "n_kv", "dh", "dhr", "dc_kv", "dc_q", "hff", "hff_exp",
    "n_exp", "n_chosen_exp", "n_shared_exp", "bytes_softmax", "bytes_dropout",
    *(f"n_{op}" for op in OPS), "n_qknorm", "dqk", "n_lkh", "k_conv", "ssm", "di", "ds", "dtr", "mh", "ng", "short_conv", "rwkv", "dwkv", "rglru", "dlru", "cross", "hybrid", "recurrent", "linear_eager", "linear_eager_gated", "lin_block", *VARIANTS, *FLAG_NAMES,
)  # fmt: skip
LAYER_NAMES: frozenset[str] = frozenset(SETTING_NAMES + KIND_NAMES)

# The name a slot formula's element sum is bound to; no layer supplies it.
TOTAL = "total"

class PricingError(ReasonError):
    """A spec or setting that cannot be priced: `missing_field`, `bad_value` or `unsupported_layer`
    (a price beyond the records' tolerance of what the census measured), census codes, so the
    pipeline books it as a failures row like a census refusal."""

    group = "census"


class LayerNames(dict):
    """The names of one (kind, setting): a dict of the values the layer supplies.

    A miss is answered by the records' derived names (evaluated and kept), then by the records'
    `defaults`; a name the layer knows it lacks raises PricingError naming the absent field;
    any other name raises KeyError (the expression language reports it as unknown). With
    `arrays` set, some values are numpy arrays and derived names are evaluated with Expr.map.
    """

    __slots__ = ("absent", "derived", "defaults", "arrays")

    def __init__(self, values: Mapping[str, Any], absent: Mapping[str, str], derived: Mapping, defaults: Mapping, arrays: bool = False):
        super().__init__(values)
        self.absent = absent
        self.derived = derived
        self.defaults = defaults
        self.arrays = arrays

    def __missing__(self, name: str) -> Any:
        expr = self.derived.get(name)
        if expr is not None:
            value = self[name] = expr.map(self) if self.arrays else expr(self)
            return value
        if name in self.defaults:
            return _number(name, self.defaults[name])
        why = self.absent.get(name)
        if why is not None:
            raise PricingError("missing_field", f"name {name!r}: {why}")
        raise KeyError(name)


def _number(name: str, value: Any) -> float:
    """Names are Python floats (bools as 1.0/0.0): pricing is IEEE double arithmetic throughout."""
    try:
        return float(value)
    except OverflowError:
        raise PricingError("bad_value", f"name {name!r}: {value!r:.40} is beyond float range") from None


def _floats(values: Mapping[str, Any]) -> dict[str, float]:
    return {name: _number(name, value) for name, value in values.items()}


def _flavours(spec: Mapping, kind: str) -> tuple[str, bool]:
    """(the mixer: full, linear, mamba, rwkv...; MoE ffn) for `kind`, from the spec's census-stated flavours."""
    flavours = spec.get("flavours")
    if not isinstance(flavours, Mapping) or kind not in flavours:
        raise PricingError("missing_field", f"flavours.{kind}: the spec must state each kind's flavours to be priced")
    flav = flavours[kind]
    return flav.get("attention"), flav.get("ffn") == "moe"


# The parameter groups of a kind (spec `params.kinds`) costs.yaml reads, each as the name p_GROUP.
PARAM_GROUPS: tuple[str, ...] = ("attention", "ffn_dense", "ffn_shared", "ffn_router", "ffn_routed", "norm")


@dataclass(frozen=True)
class KindValues:
    """The names that depend on the spec and the kind only, and those the kind lacks (with why).

    `params` holds the kind's parameter groups as names (p_attention, ...), which costs.yaml
    reads beside the layer's names; None when the spec states no parameters for the kind."""

    kind: str
    values: Mapping[str, Any]
    absent: Mapping[str, str]
    params: Mapping[str, float] | None = None


def kind_spec(spec: Mapping, kind: str) -> Mapping:
    """The spec as one kind reads it: a kind listed under `attention_dims` reads its own attention
    dims in place of the model-wide ones (one it does not state is absent for it)."""
    own = spec.get("attention_dims", {}).get(kind)
    if own is None:
        return spec
    return {**{k: v for k, v in spec.items() if k not in KIND_DIMS}, **own}


def _params(spec: Mapping, kind: str) -> dict[str, float] | None:
    params = spec.get("params", {}).get("kinds", {}).get(kind)
    return None if params is None else {f"p_{g}": float(params.get(g, 0)) for g in PARAM_GROUPS}


def kind_values(spec: Mapping, kind: str) -> KindValues:
    """The names from the spec and the kind (docs/pricing.md) for `kind`, and its parameters."""
    params = _params(spec, kind)
    spec = kind_spec(spec, kind)
    ops = spec.get("ops", {}).get(kind)
    if ops is None:
        raise PricingError("missing_field", f"ops.{kind}: the spec has no op counts for kind {kind!r}")
    mixer, moe = _flavours(spec, kind)
    linear = mixer == "linear"
    values: dict[str, Any] = {}
    absent: dict[str, str] = {}

    def need(name: str, *fields: str) -> bool:
        missing = [f for f in fields if f not in spec]
        if missing:
            absent[name] = f"kind {kind!r} needs {' and '.join(missing)}, which the spec does not have"
        return not missing

    h = values["h"] = spec["hidden_size"]
    if linear:
        if need("a", "linear_num_value_heads"):
            values["a"] = spec["linear_num_value_heads"]
        if need("n_kv", "linear_num_key_heads", "linear_key_head_dim", "linear_value_head_dim"):
            values["n_kv"] = spec["linear_num_key_heads"] * spec["linear_key_head_dim"] / spec["linear_value_head_dim"]
        if need("dh", "linear_value_head_dim"):
            values["dh"] = spec["linear_value_head_dim"]
        if need("n_lkh", "linear_num_key_heads"):
            values["n_lkh"] = spec["linear_num_key_heads"]
        if need("k_conv", "linear_conv_kernel_dim"):
            values["k_conv"] = spec["linear_conv_kernel_dim"]
    elif mixer in ("linear_eager", "linear_eager_gated"):  # a linear attention run in torch: its heads, head width and block
        for name, field in (("a", "linear_eager_heads"), ("dh", "linear_eager_head_dim"), ("lin_block", "linear_eager_block")):
            if need(name, field):
                values[name] = spec[field]
        if "a" in values:
            values["n_kv"] = values["a"]
    else:
        a = values["a"] = spec["num_attention_heads"]
        values["n_kv"] = spec.get("num_key_value_heads", a)
        if "kv_lora_rank" in spec:  # multi-head latent attention: the census states its value width
            if need("dh", "v_head_dim"):
                values["dh"] = spec["v_head_dim"]
        else:  # the value width, where it differs from the query and key width (mimo_v2_flash)
            values["dh"] = spec.get("v_head_dim", spec.get("head_dim", h / a))
    # a hybrid (full_mamba, full_mamba2): softmax attention beside a state-space mixer, each priced by its own slot
    hybrid = mixer.startswith("full_")
    scan = mixer.removeprefix("full_")
    values["hybrid"] = 1 if hybrid else 0
    values["ssm"] = {"mamba": 1, "mamba2": 2}.get(scan, 0)
    values["short_conv"] = 1 if mixer == "short_conv" else 0
    values["rwkv"] = 1 if mixer == "rwkv" else 0  # RWKV's time mixing, through the WKV kernel
    if mixer == "rwkv" and need("dwkv", "wkv_size"):
        values["dwkv"] = spec["wkv_size"]
    values["rglru"] = 1 if mixer == "rglru" else 0  # an RG-LRU block (recurrent_gemma's), its recurrence as transformers' loop keeps it
    if mixer == "rglru":
        for name, field in (("dlru", "lru_width"), ("k_conv", "lru_conv_kernel")):
            if need(name, field):
                values[name] = spec[field]
    values["linear_eager"] = 1 if mixer == "linear_eager" else 0
    # one whose decay is computed from the tokens (xLSTM's mLSTM): records.yaml linear_eager_gated prices it
    values["linear_eager_gated"] = 1 if mixer == "linear_eager_gated" else 0
    values["cross"] = 1 if mixer == "cross" else 0  # attention to encoder states
    ssm_fields = {
        "mamba": (("di", "ssm_inner_size"), ("ds", "ssm_state_size"), ("dtr", "ssm_dt_rank")),
        "mamba2": (("di", "ssm_inner_size"), ("ds", "ssm_state_size"), ("mh", "ssm_num_heads"), ("ng", "ssm_n_groups")),
    }
    for name, field in ssm_fields.get(scan, ()):
        if need(name, field):
            values[name] = spec[field]
    values["dqk"] = spec.get("head_dim", h / spec["num_attention_heads"])  # q and k head width (MLA: nope + rope)
    # MLA's rope split and latent ranks are its softmax attention's: a linear-attention kind of
    # a hybrid with MLA layers (kimi_linear) has neither, and takes the records' defaults
    for name, field in (("dhr", "qk_rope_head_dim"), ("dc_kv", "kv_lora_rank"), ("dc_q", "q_lora_rank")) if not linear else ():
        if need(name, field):
            values[name] = spec[field]

    if "moe_intermediate_size" in spec:
        values["hff_exp"] = spec["moe_intermediate_size"]
    elif need("hff_exp", "intermediate_size"):
        values["hff_exp"] = spec["intermediate_size"]
    if moe:
        if "hff_exp" in values:
            values["hff"] = values["hff_exp"]
        else:
            absent["hff"] = absent["hff_exp"]
        if need("n_exp", "num_experts"):
            values["n_exp"] = spec["num_experts"]
        if need("n_chosen_exp", "num_experts_per_tok"):
            values["n_chosen_exp"] = spec["num_experts_per_tok"]
        if "shared_expert_intermediate_size" in spec:  # the shared width, in routed widths
            if "hff_exp" in values:
                values["n_shared_exp"] = spec["shared_expert_intermediate_size"] / values["hff_exp"]
            else:
                absent["n_shared_exp"] = absent["hff_exp"]
        else:  # shared experts of routed width (DeepSeek), or none
            values["n_shared_exp"] = spec.get("num_shared_experts", 0)
    else:
        if need("hff", "intermediate_size"):
            values["hff"] = spec["intermediate_size"]
        values["n_exp"], values["n_chosen_exp"], values["n_shared_exp"] = 1, 1, 0

    for name in WIDTH_NAMES:  # the spec's family profile's, read by costs.yaml only
        if need(name, "arch"):
            values[name] = family_widths(spec["arch"])[name]
    for op in OPS:
        values[f"n_{op}"] = ops[op]
    values["n_qknorm"] = 1 if spec.get("qk_norm") and mixer == "full" else 0  # QK-norm belongs to softmax attention
    for flag in FLAG_NAMES:
        if need(flag, flag):
            values[flag] = spec[flag]
    stated = spec.get("variants", {}).get(kind)
    for name in VARIANTS:
        if stated is not None and name in stated:
            values[name] = stated[name]
        else:
            absent[name] = f"kind {kind!r} needs variants.{kind}.{name}, which the spec does not state"
    values["recurrent"] = linear or values["ssm"] > 0 or values["rwkv"] > 0 or values["rglru"] > 0 or values["linear_eager"] == 1 or values["linear_eager_gated"] == 1  # the kind runs a recurrence (linear attention, a Mamba mixer, RWKV's WKV, an RG-LRU, a linear attention run in torch)
    return KindValues(kind, _floats(values), absent, params)


def setting_values(setting: Mapping, dtype_bytes: Mapping[str, int]) -> dict[str, Any]:
    """The names that depend on the setting alone (those that combine it with the kind's are
    derived in the records' `names`)."""
    s, t, cp = setting["seq_length"], setting["tp"], setting["cp"]
    values: dict[str, Any] = {
        "megatron": setting["stack"] == "megatron",
        "s": s,
        "b": setting["micro_batch"],
        "t": t,
        "cp": cp,
        "sp": t if setting["sequence_parallel"] else 1,
        "cap_fact": setting["capacity_factor"],
        "gmm": setting["grouped_gemm"],
        "dropless_tok_factor": setting["dropless_tok_factor"],
        "micro_factor": setting["in_flight"],
        "param_casts": setting["param_casts"],
        "ulysses": setting["cp_algo"] == "ulysses",
    }
    dtype = setting["dtype"]
    if dtype not in dtype_bytes:
        raise PricingError("bad_value", f"setting dtype {dtype!r} has no byte width; known: {sorted(dtype_bytes)}")
    values["bytes_compute"] = dtype_bytes[dtype]
    # encoder tokens per sequence: a fixed setting (settings.yaml `fixed`), stated by a setting
    # built with another value than the grid's
    values["se"] = setting.get("encoder_tokens", fixed_default("encoder_tokens"))
    values["fa"] = setting["flash_attention"]
    # the attention kernel, one flag each (none of them: `auto`, sdpa's own choice per kind)
    kernel = setting.get("attention_kernel", fixed_default("attention_kernel"))
    for name in ("flash", "efficient", "math"):
        values[f"kernel_{name}"] = kernel == name
    return _floats(values)


def bind(kv: KindValues, setting: Mapping, dtype_bytes: Mapping[str, int], records: Any) -> LayerNames:
    """One kind's values plus one setting's, as the mapping expressions read.

    `records` supplies the derived names and the defaults (`.derived`, `.defaults`).
    """
    names = LayerNames(kv.values, kv.absent, records.derived, records.defaults)
    names.update(setting_values(setting, dtype_bytes))
    return names


def layer_names(spec: Mapping, kind: str, setting: Mapping, records: Any, dtype_bytes: Mapping[str, int]) -> LayerNames:
    """Every name one layer of `kind` reads at `setting` (docs/pricing.md), as one mapping.

    `records` is a loaded Records (its derived names and defaults); `dtype_bytes` the settings
    grid's byte widths.
    """
    return bind(kind_values(spec, kind), setting, dtype_bytes, records)

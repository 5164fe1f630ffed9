"""Remote-code configs that transformers can build without their remote code (census/intake/aliases.yaml).

Remote code is never run, imported or trusted. A config whose model_type transformers does
not know is built from a class transformers ships when:

1. its `architectures` (or its text_config's) names a causal-LM class transformers ships
   (Kimi-K2's model_type is `kimi_k2`, its architectures `DeepseekV3ForCausalLM`): the
   language config is built as that class's model_type;
2. else census/intake/aliases.yaml lists its model_type: it is built as the stated model_type, with
   the stated key renames and value maps (a list field whose entries are coded otherwise:
   MiniMax-M1's `attn_type_list` of 0 and 1 is transformers' `layer_types` of names).

Only names are compared: a class name is looked up in transformers' own mapping of model
types to class names, never imported from the config. Otherwise the config is refused as
`remote_code` (it names remote code in auto_map) or `unknown_model_type`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from speccat.catalogue.datafile import read_yaml
from speccat.census.intake.config import language_config
from speccat.census.spec import SpecError

ALIASES_PATH = Path(__file__).with_name("aliases.yaml")


@dataclass(frozen=True)
class Alias:
    target: str  # the transformers model_type the config is built as
    rename: Mapping[str, str]  # config key → the key transformers reads
    values: Mapping[str, Mapping[Any, Any]]  # config key → {its value (or a list entry's) → transformers'}

    def apply(self, language: Mapping) -> dict:
        """The language config as the target model_type reads it: values mapped, keys renamed."""
        out = {}
        for key, value in language.items():
            table = self.values.get(key)
            if table is not None:
                value = [self._mapped(key, table, v) for v in value] if isinstance(value, list) else self._mapped(key, table, value)
            out[self.rename.get(key, key)] = value
        out["model_type"] = self.target
        return out

    @staticmethod
    def _mapped(key: str, table: Mapping, value: Any) -> Any:
        if isinstance(value, bool) or value not in table:
            raise SpecError("bad_value", f"{key}: {value!r} is none of the values its alias maps ({', '.join(map(repr, table))})")
        return table[value]


def load_aliases(path: Path = ALIASES_PATH) -> Mapping[str, Alias]:
    """model_type → its Alias, validated."""
    data = read_yaml(path) or {}
    aliases = {}
    for name, entry in data.items():
        if not isinstance(entry, Mapping) or not {"as", "rename"} <= set(entry) <= {"as", "rename", "values"}:
            raise ValueError(f"{path.name}: {name}: must state `as` and `rename`, and may state `values`")
        target, rename, values = entry["as"], entry["rename"] or {}, entry.get("values") or {}
        if not isinstance(target, str) or not isinstance(rename, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in rename.items()):
            raise ValueError(f"{path.name}: {name}: `as` is a model_type and `rename` maps keys to keys")
        if not isinstance(values, Mapping) or not all(isinstance(k, str) and isinstance(v, Mapping) and v for k, v in values.items()):
            raise ValueError(f"{path.name}: {name}: `values` maps config keys to non-empty tables of values")
        aliases[str(name)] = Alias(target, MappingProxyType(dict(rename)), MappingProxyType({k: MappingProxyType(dict(v)) for k, v in values.items()}))
    return MappingProxyType(aliases)


ALIASES = load_aliases()


@lru_cache(maxsize=1)
def _class_model_types() -> Mapping[str, str]:
    """Causal-LM class name → the model_type transformers builds it for."""
    from transformers.models.auto import modeling_auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    candidates: dict[str, list[str]] = {}
    for model_type, names in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        for name in names if isinstance(names, (list, tuple)) else (names,):
            candidates.setdefault(name, []).append(model_type)
    # Several model_types may reuse one class (exaone builds LlamaForCausalLM): the class's own
    # is the one whose config class shares its prefix (LlamaForCausalLM → LlamaConfig → llama).
    by_class = {}
    for name, types in candidates.items():
        own = [t for t in types if CONFIG_MAPPING_NAMES.get(t) == name.split("For", 1)[0] + "Config"]
        by_class[name] = (own or types)[0]
    return by_class


def _architectures(config: Mapping) -> list[str]:
    names = config.get("architectures")
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def substitute(config: Mapping) -> tuple[dict, str] | None:
    """(the language config to build, as a flat config of a transformers model_type; the class
    or alias it is built as), or None when neither rule covers the config."""
    language = language_config(config)
    sources = [config]
    if isinstance(config.get("text_config"), Mapping):
        sources.append(config["text_config"])
    by_class = _class_model_types()
    for source in sources:
        for name in _architectures(source):
            if name in by_class:
                return {**language, "model_type": by_class[name]}, name
    for model_type in (config.get("model_type"), language.get("model_type")):
        if isinstance(model_type, str) and model_type in ALIASES:
            alias = ALIASES[model_type]
            return alias.apply(language), f"{model_type} as {alias.target}"
    return None


def resolve(config: Any, known) -> Any:
    """The config to build: itself when transformers knows its model_type (or it states none:
    the checks refuse that), else its substitute when one of the rules covers it, else itself
    (refused as remote_code or unknown_model_type by census/build/model.py)."""
    model_type = config.get("model_type") if isinstance(config, Mapping) else None
    if not isinstance(model_type, str) or model_type in known:
        return config
    found = substitute(config)
    return found[0] if found is not None else config

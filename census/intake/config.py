"""Reading a config file, its language config, its config_hash and the refusals that need no
transformers (docs/census.md, "Language config and config_hash").

Plain Python, no torch: the flow hashes every fetched config before it decides what to census,
and the CLI runs `precheck` before it imports torch.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from speccat.census.intake.checks import check_json_tree, check_raw, unique_keys
from speccat.census.intake.limits import LIMITS
from speccat.census.spec import SpecError

# Keys that name, version or tokenise a model without changing its architecture,
# dropped before hashing so fine-tunes and re-uploads share one census.
NON_ARCHITECTURE_KEYS = frozenset(
    {
        "_name_or_path",
        "name_or_path",
        "architectures",  # class names: a VLM and its text-only twin name different classes
        "auto_map",  # names remote code, which speccat never runs
        "transformers_version",
        "_commit_hash",
        "dtype",
        "torch_dtype",
        "use_cache",  # an inference switch
    }
)
_TOKEN_ID = re.compile(r"_token_ids?$")


def _constant(name: str) -> float:
    """NaN, Infinity and -Infinity, as Python's json and transformers read them. NaN is then
    refused wherever it stands and infinities in the fields that must be finite (census/intake/checks.py)."""
    return float(name)


def _number(text: str) -> float:
    """A number literal; one beyond the float range (1e999) is not the infinity it would parse to."""
    value = float(text)
    if math.isinf(value):
        raise SpecError("bad_value", f"the number {text[:40]} is beyond the float range; sizes and constants are finite")
    return value


def parse_config_text(text: str | bytes, source: str = "config") -> dict:
    """A config.json's text as a dict; SpecError('bad_json') unless it is one JSON object."""
    if len(text) > LIMITS.max_config_bytes:
        raise SpecError("too_large", f"{source}: {len(text)} bytes; a config may hold at most {LIMITS.max_config_bytes}")
    try:
        data = json.loads(text, parse_constant=_constant, parse_float=_number, object_pairs_hook=unique_keys)
    except SpecError as err:
        raise SpecError(err.reason, f"{source}: {err}") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise SpecError("bad_json", f"{source}: not valid JSON: {err}") from None
    except RecursionError:
        raise SpecError("bad_json", f"{source}: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise SpecError("bad_json", f"{source}: the top level must be a JSON object, got {type(data).__name__}")
    check_json_tree(data, source)
    return data


def load_config_file(path: str | Path) -> dict:
    """Read and parse one config.json; SpecError('bad_json') for invalid or non-object JSON.

    A file that cannot be read (missing, unreadable) raises the OSError: that is not a
    property of a config.
    """
    path = Path(path)
    size = path.stat().st_size
    if size > LIMITS.max_config_bytes:
        raise SpecError("too_large", f"{path}: {size} bytes; a config may hold at most {LIMITS.max_config_bytes}")
    return parse_config_text(path.read_bytes(), str(path))


# Words that mark a flat config's `*_config` mapping as describing something other than the
# language model: another modality's model, or how the weights are stored.
OTHER_PART_WORDS = frozenset(
    {"vision", "visual", "image", "video", "audio", "speech", "vq", "backbone", "qformer", "quantization", "compression"}
)


def _is_sub_config(key: str, value: Any) -> bool:
    """A flat config's `*_config` mapping that does not describe its language model: another
    modality's (vision_config, audio_config), a model of its own that states its model_type
    (moshi's depth_decoder_config: moshi_depth), how the weights are stored
    (quantization_config), or another tool's settings (transformers.js_config, no config
    field). The other `*_config` mappings are parts of the language model that transformers
    builds it from, and stay: dbrx's attn_config and ffn_config (model_type ""), mpt's
    attn_config, kimi_linear's linear_attn_config, gemma4_text's per_layer_config. Dropped, the
    model would be built from their class defaults (dbrx: a DbrxAttentionConfig without
    rope_theta, which transformers cannot build; kimi_linear: other layer types), and configs
    that differ in them would share a config_hash."""
    if not (key.endswith("_config") and isinstance(value, Mapping)):
        return False
    if not key.isidentifier() or not OTHER_PART_WORDS.isdisjoint(key.lower().split("_")):
        return True
    own = value.get("model_type")
    return isinstance(own, str) and bool(own)


def language_config(config: Mapping) -> dict:
    """The part of a config that describes the language model, as a new plain dict.

    A nested config gives its `text_config`, with the top-level `model_type` when the text
    config states none, and the top-level `tie_word_embeddings` when stated (a composite model
    ties its output head by its own config). A flat config gives itself without the other
    modalities' sub-configs (vision_config, ...), without quantization_config and without
    other tools' settings (transformers.js_config); its language model's own sub-configs
    (dbrx's attn_config and ffn_config) stay.
    """
    if not isinstance(config, Mapping):
        raise SpecError("bad_value", f"config: must be a JSON object, got {type(config).__name__}")
    text = config.get("text_config")
    if text is None:
        language = {k: v for k, v in config.items() if not _is_sub_config(k, v)}
    elif isinstance(text, Mapping):
        language = dict(text)
        if "model_type" not in language and "model_type" in config:
            language["model_type"] = config["model_type"]
        if "tie_word_embeddings" in config:
            language["tie_word_embeddings"] = config["tie_word_embeddings"]
    else:
        raise SpecError("bad_value", f"text_config: must be an object or null, got {type(text).__name__}")
    return copy.deepcopy(language)


def precheck(config: Mapping) -> None:
    """The refusals that need neither torch nor transformers (the CLI runs them before importing those)."""
    check_raw(language_config(config))


def architecture_config(config: Mapping) -> dict:
    """The language config without the keys that do not change the architecture."""
    return {
        k: v
        for k, v in language_config(config).items()
        if k not in NON_ARCHITECTURE_KEYS and not _TOKEN_ID.search(k)
    }


def census_config(config: Mapping) -> dict:
    """What the census builds from: the language config, under the top-level model_type.

    Other modalities' sub-configs (vision_config, ...) are left out, so they take their class
    defaults: the census only describes the language model, and a repo that shares a popular
    config_hash but carries a broken vision_config builds the same model. The keys the hash
    drops but a build reads (token ids: a pad id indexes the embedding) stay; repos sharing a
    hash are censused from the most downloaded one (flows/refresh.py).
    """
    language = language_config(config)
    if config.get("text_config") is None:
        return language
    view = {"model_type": config.get("model_type"), "text_config": language}
    if "tie_word_embeddings" in language:
        view["tie_word_embeddings"] = language["tie_word_embeddings"]
    return view


def config_hash(config: Mapping) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of the architecture config."""
    try:
        blob = json.dumps(architecture_config(config), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as err:
        raise SpecError("bad_value", f"config: cannot be written as canonical JSON: {err}") from None
    return hashlib.sha256(blob.encode()).hexdigest()

"""A config's transformers config objects, after every refusal that needs no model (docs/census.md,
"How a config becomes a spec", step 1).

The raw language config is checked first (census/intake/checks.py), then transformers parses it into
its config class (never with remote code), where class defaults and aliases apply, and the
resolved sizes are checked again. Nothing is built here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from speccat.census.intake import checks
from speccat.census.intake.config import census_config, language_config
from speccat.census.spec import SpecError
from speccat.census.intake.training import set_training


def resolve_config(config: Mapping) -> tuple[Any, Any, bool]:
    """Every pre-build refusal, then (top-level config, language config, nested) as transformers objects."""
    language = language_config(config)
    checks.check_raw(language)
    top, text, nested = _config_objects(config)
    checks.check_resolved(language, text, nested=nested)
    return top, text, nested


def _config_objects(config: Mapping) -> tuple[Any, Any, bool]:
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
    except MemoryError:
        raise
    except Exception as err:  # building a config object only parses it: any failure is the config's
        raise SpecError("bad_value", f"config: transformers refuses it: {type(err).__name__}: {err}") from None
    nested = text is not top
    for cfg in (top, text) if nested else (top,):
        set_training(cfg)  # a census run is a training run (census/intake/training.yaml)
    if nested and type(text) is type(top):
        _keep_decoder_fields(top, text)
    if nested and "tie_word_embeddings" in config:
        text.tie_word_embeddings = top.tie_word_embeddings  # the composite model ties by its own config
    return top, text, nested


def _keep_decoder_fields(top: Any, text: Any) -> None:
    """A flat encoder-decoder config (bart, marian: no sub-config) has for its decoder text config
    a copy of itself whose `decoder_*` fields transformers moved to their plain names and deleted,
    so reading one gives the class default. The causal LM reads the `decoder_*` fields (bart's
    `decoder_layers`, marian's `decoder_vocab_size`, whose class default is None): the copy keeps
    them too, at the config's values, as transformers' causal LM built from the config reads them."""
    for key in top.to_dict():
        if key.startswith("decoder_") and getattr(text, key, None) != getattr(top, key):
            setattr(text, key, getattr(top, key))


def _transformers_version() -> str:
    import transformers

    return transformers.__version__

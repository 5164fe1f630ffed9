"""speccat's vocabulary, read from catalogue/vocabulary.yaml: the one place every code is defined.

The op vector, the parts, the reason codes of every refusal (by who raises them), the stages,
statuses, sources, gating codes, flavours and the causes of a parameter count's difference.
Everything else reads them from here: the census and its spec, the records, the store (which
creates the catalogue's ENUM types from `vocabulary_rows()`), the flow and the CLI.
`python -m speccat.catalogue.vocabulary` prints the README's reason table, which a test keeps
equal to this file.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from speccat.catalogue.datafile import read_yaml

VOCABULARY_PATH = Path(__file__).with_name("vocabulary.yaml")


def _lists(path: Path = VOCABULARY_PATH) -> Mapping[str, Mapping]:
    data = read_yaml(path)
    return MappingProxyType({name: MappingProxyType(dict(codes)) for name, codes in data.items()})


_VOCABULARY = _lists()

OPS: tuple[str, ...] = tuple(_VOCABULARY["ops"])
# Ops the census books measured bytes to that the records never price: bytes no op claims, and
# what the selective-checkpoint cache holds beyond plain autograd.
UNPRICED_OPS: tuple[str, ...] = tuple(_VOCABULARY["unpriced_ops"])
OTHER, CACHED = UNPRICED_OPS
PARTS: tuple[str, ...] = tuple(_VOCABULARY["parts"])
# The model's ends, outside its layers (spec `ends`, ends.yaml `parts`).
END_PARTS: tuple[str, ...] = tuple(_VOCABULARY["ends"])
# What the census counts of the logits (spec `ends`), read by ends.yaml as names.
LOGIT_FACTS: tuple[str, ...] = tuple(_VOCABULARY["logit_facts"])
# The variant facts the census states per kind, read by the records' formulas as names.
VARIANTS: tuple[str, ...] = tuple(_VOCABULARY["variants"])
# The attention dims a kind may state apart from the model-wide ones (spec `attention_dims`).
KIND_DIMS: tuple[str, ...] = tuple(_VOCABULARY["kind_dims"])

# Reason codes by the group that raises them: census, fetch, store, records, settings, expr, profile.
REASONS: Mapping[str, tuple[str, ...]] = MappingProxyType({group: tuple(codes) for group, codes in _VOCABULARY["reasons"].items()})
CENSUS_REASONS = REASONS["census"]
FETCH_REASONS = REASONS["fetch"]
# What a failures row may hold: a census (or pricing) refusal, or a failed fetch.
FAILURE_REASONS = CENSUS_REASONS + FETCH_REASONS

# Failure reasons that are something going wrong (logged at ERROR), not a refusal (INFO).
UNEXPECTED_REASONS: tuple[str, ...] = tuple(_VOCABULARY["unexpected"])
STAGES: tuple[str, ...] = tuple(_VOCABULARY["stage"])
RUN_STATUSES: tuple[str, ...] = tuple(_VOCABULARY["run_status"])
SOURCES: tuple[str, ...] = tuple(_VOCABULARY["run_source"])
GATING_CODES: tuple[str, ...] = tuple(_VOCABULARY["gating"])
# The Hub's `gated` value (False, "auto" or "manual") → its code; the first code is the Hub's False.
GATING: Mapping[object, str] = MappingProxyType({False: GATING_CODES[0], **{code: code for code in GATING_CODES[1:]}})
# A layer kind's mixer flavours (docs/architecture.md, "Words": mixer). They are stored under the
# list's first name, which stays: the vocabulary list and ENUM type `attention_flavour`, the
# kinds column and the spec's flavour field `attention`.
MIXER_FLAVOURS: tuple[str, ...] = tuple(_VOCABULARY["attention_flavour"])
FFN_FLAVOURS: tuple[str, ...] = tuple(_VOCABULARY["ffn_flavour"])
# Why a repo's census parameter count and the Hub's differ (the view repo_params; the rules of
# catalogue/hub_params.yaml state them).
PARAM_CAUSES: tuple[str, ...] = tuple(_VOCABULARY["param_cause"])

# The catalogue's ENUM types and their values, in order.
ENUMS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "reason": FAILURE_REASONS,
        "stage": STAGES,
        "run_status": RUN_STATUSES,
        "run_source": SOURCES,
        "gating": GATING_CODES,
        "attention_flavour": MIXER_FLAVOURS,
        "ffn_flavour": FFN_FLAVOURS,
        "op_name": OPS + UNPRICED_OPS,
        "param_cause": PARAM_CAUSES,
    }
)


def describe(list_name: str, code: str) -> str:
    """What a code of a list means (`reason` looks in every reason group, census first)."""
    if list_name == "reason":
        return next(_VOCABULARY["reasons"][g][code] for g in REASONS if code in _VOCABULARY["reasons"][g])
    if list_name == "op_name":
        return {**_VOCABULARY["ops"], **_VOCABULARY["unpriced_ops"]}[code]
    return _VOCABULARY[list_name][code]


def vocabulary_rows() -> list[dict[str, object]]:
    """One row per (ENUM list, code): the `vocabulary` table the store ingests before the schema."""
    return [
        {"list": name, "code": code, "position": position, "description": describe(name, code)}
        for name, codes in ENUMS.items()
        for position, code in enumerate(codes)
    ]


def reasons_markdown() -> str:
    """The README's table of the codes a failures row holds, rendered from this vocabulary."""
    lines = ["| raised by | reason | means |", "|---|---|---|"]
    for group in ("census", "fetch"):
        for code in REASONS[group]:
            lines.append(f"| {group} | `{code}` | {describe('reason', code)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(reasons_markdown())

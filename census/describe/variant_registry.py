"""The registry of variant readers: for each variant fact a spec states per kind, the function
that reads it off a probed layer (docs/census.md, "Variant facts").

Each fact has one home per concern. catalogue/vocabulary.yaml `variants` holds its name, what it
means and its place in the order a spec lists the facts: the records room and the spec's
validation read the names there, and the census may not be imported by them. Its reader is
registered here by the topic module that holds it (census/describe/variants_norms.py,
variants_attention.py, variants_feed_forward.py, variants_mixers.py), with `@variant`: the
function's name is the fact's name, its docstring says what it is read from (docs/census.md's
table is rendered from it), and it returns the fact from the layer's view and the model's
experts per token. The records read each fact as a name of its own name
(catalogue/records/names.py `kind_values`).

A reader is checked against the vocabulary when it is registered: a name the vocabulary does
not list is refused as the spec refuses an unknown variant key (`bad_value`), and so is a second
reader of one fact; census/describe/variants.py refuses a fact the vocabulary lists that no
module reads (`missing_field`, as a spec without it is refused).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from speccat.catalogue.vocabulary import VARIANTS
from speccat.census.spec import SpecError

# (the layer's view: census/describe/layer_view.py LayerView; the model's experts per token, spec
# `num_experts_per_tok`, None without routed experts) -> the fact, true/false or an int >= 0
Reader = Callable[..., bool | int]


@dataclass(frozen=True)
class VariantReader:
    """One variant fact's reader."""

    name: str
    read: Reader

    @property
    def module(self) -> str:
        """The module that registered the reader, as a project path (census/describe/variants_attention.py)."""
        return self.read.__module__.removeprefix("speccat.").replace(".", "/") + ".py"

    @property
    def reads(self) -> str:
        """What the fact is read from: the reader's docstring as one line."""
        return " ".join(inspect.cleandoc(self.read.__doc__ or "").split())


# Every registered reader by its fact's name; filled as the topic modules are imported
# (census/describe/variants.py imports them all).
READERS: dict[str, VariantReader] = {}


def register(name: str, read: Reader) -> VariantReader:
    """Register `read` as the reader of the variant fact `name`; refused (`bad_value`) when the
    vocabulary lists no such fact, the fact has a reader already, or the reader says nothing of
    what it reads (no docstring)."""
    if name not in VARIANTS:
        raise SpecError("bad_value", f"variant {name!r}: catalogue/vocabulary.yaml `variants` lists no such fact; listed: {sorted(VARIANTS)}")
    if name in READERS:
        raise SpecError("bad_value", f"variant {name!r}: read already by {READERS[name].module}")
    reader = VariantReader(name, read)
    if not reader.reads:
        raise SpecError("bad_value", f"variant {name!r}: its reader has no docstring saying what the fact is read from")
    READERS[name] = reader
    return reader


def variant(read: Reader) -> Reader:
    """Decorator: register `read` as the reader of the variant fact of its own name."""
    register(read.__name__, read)
    return read


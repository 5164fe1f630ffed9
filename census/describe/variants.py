"""Every variant fact a spec states per kind, read off a layer through the registered readers
(census/describe/variant_registry.py), and docs/census.md's table of them.

Importing this module imports every topic module, so each has registered its readers:
census/describe/variants_norms.py, variants_attention.py, variants_feed_forward.py,
variants_mixers.py, variants_layer.py, variants_stream.py and variants_hyper.py. The facts are read in catalogue/vocabulary.yaml's order, the order a spec
lists them. docs/census.md holds the table between its `variants` markers, drawn from the
vocabulary's meanings and the readers' docstrings (`python -m docs.tables` redraws it, `python
-m speccat.census.describe.variants` prints it); tests keep the two equal.
"""

from __future__ import annotations

from speccat.catalogue.vocabulary import VARIANTS, describe
from speccat.census.describe import variants_attention, variants_feed_forward, variants_hyper, variants_layer, variants_mixers, variants_norms, variants_stream
from speccat.census.describe.variant_registry import READERS
from speccat.census.spec import SpecError

# The topic modules whose readers are registered by importing them, in the table's reading order.
TOPICS = (variants_norms, variants_attention, variants_feed_forward, variants_mixers, variants_layer, variants_stream, variants_hyper)


def read_variants(view, top_k: int | None) -> dict[str, bool | int]:
    """The kind's variant facts: each of the vocabulary's, in its order, read off `view` (a
    census/describe/layer_view.py LayerView) with the model's experts per token `top_k` (spec
    `num_experts_per_tok`). A fact the vocabulary lists that no module reads is refused
    (`missing_field`), as a spec without it is."""
    unread = [name for name in VARIANTS if name not in READERS]
    if unread:
        raise SpecError("missing_field", f"variants {unread}: catalogue/vocabulary.yaml lists them and no census/describe/variants_*.py module reads them")
    return {name: READERS[name].read(view, top_k) for name in VARIANTS}


def variants_markdown() -> str:
    """docs/census.md's table of the variant facts: one row per fact in the vocabulary's order,
    with what it means (the vocabulary) and what it is read from (its reader's docstring)."""
    lines = ["| fact | means | read from | read in |", "|---|---|---|---|"]
    for name in VARIANTS:
        reader = READERS.get(name)
        reads, module = (reader.reads, f"`{reader.module}`") if reader else ("no reader", "—")
        lines.append(f"| `{name}` | {_cell(describe('variants', name))} | {_cell(reads)} | {module} |")
    return "\n".join(lines)


def _cell(text: str) -> str:
    """`text` as one Markdown table cell: a `|` escaped."""
    return text.replace("|", "\\|")


if __name__ == "__main__":
    print(variants_markdown())

"""The variant registry (docs/census.md, "Variant facts"): every fact of catalogue/vocabulary.yaml
`variants` has one reader in a census/describe/variants_*.py topic module, and no reader names a
fact the vocabulary lacks; a reader registered reaches the spec's facts and the records' names;
docs/census.md's table is the one rendered from the vocabulary and the readers; the records read
every fact under its own name.

The tests that register readers put the registry back as it was afterwards (`registry`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from speccat.catalogue.records.ends import load_ends
from speccat.catalogue.records.names import kind_values
from speccat.catalogue.vocabulary import VARIANTS
from speccat.census import run_census
from speccat.census.describe.layer_view import LayerView
from speccat.census.describe.variant_registry import READERS, register
from speccat.census.describe.variants import TOPICS, variants_markdown
from speccat.census.spec import SpecError

ROOT = Path(__file__).resolve().parents[2]
TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
}  # fmt: skip
S = 32
TOY = 7  # what the toy reader states: a value no reader of the tiny llama's facts gives


@pytest.fixture
def registry():
    """The registry's readers, put back as they were once the test is done, whatever it did."""
    saved = dict(READERS)
    yield READERS
    READERS.clear()
    READERS.update(saved)


def test_every_vocabulary_variant_has_one_reader_in_a_topic_module():
    assert list(READERS) != [] and set(READERS) == set(VARIANTS)
    topics = {f"census/describe/{module.__name__.rsplit('.', 1)[1]}.py" for module in TOPICS}
    assert topics == {str(p.relative_to(ROOT)) for p in (ROOT / "census" / "describe").glob("variants_*.py")}
    for name, reader in READERS.items():
        assert reader.name == name == reader.read.__name__
        assert reader.module in topics, name
        assert reader.reads, name


def test_a_registered_reader_reaches_the_spec_and_the_records_names(registry):
    seen = []

    def token_mixes(view, top_k):
        """A toy: what the test says."""
        seen.append((type(view), top_k))
        return TOY

    del registry["token_mixes"]
    register("token_mixes", token_mixes)
    spec = run_census(TINY_LLAMA, name="tiny-llama", seq_length=S)
    assert spec["variants"]["decoder"]["token_mixes"] == TOY
    assert seen and all(kind is LayerView and top_k is None for kind, top_k in seen)  # a dense model: no experts per token
    assert kind_values(spec, "decoder").values["token_mixes"] == TOY  # the records read it under its own name


def test_the_mixers_reader_states_the_tiny_llamas_token_mixes_after_the_toy():
    assert READERS["token_mixes"].module == "census/describe/variants_mixers.py"
    assert run_census(TINY_LLAMA, name="tiny-llama", seq_length=S)["variants"]["decoder"]["token_mixes"] == 0


def test_a_reader_the_vocabulary_does_not_list_is_refused(registry):
    def toy_fact(view, top_k):
        """A toy the vocabulary does not list."""
        return TOY

    with pytest.raises(SpecError, match="toy_fact") as refused:
        register("toy_fact", toy_fact)
    assert refused.value.reason == "bad_value"  # as the spec refuses an unknown variant key
    with pytest.raises(SpecError, match="read already by census/describe/variants_mixers.py") as twice:
        register("token_mixes", toy_fact)
    assert twice.value.reason == "bad_value"
    del registry["token_mixes"]
    with pytest.raises(SpecError, match="no docstring") as silent:
        register("token_mixes", lambda view, top_k: TOY)
    assert silent.value.reason == "bad_value"
    assert "toy_fact" not in registry and "token_mixes" not in registry


def test_a_vocabulary_variant_no_module_reads_is_refused(registry):
    del registry["token_mixes"]
    with pytest.raises(SpecError, match=r"variants \['token_mixes'\]: .* no census/describe/variants_\*\.py module reads them") as refused:
        run_census(TINY_LLAMA, name="tiny-llama", seq_length=S)
    assert refused.value.reason == "missing_field"  # as a spec that does not state it is refused


def test_the_docs_variant_table_is_the_one_the_registry_renders():
    doc = (ROOT / "docs" / "census.md").read_text()
    stated = re.search(r"<!-- variants: .*? -->\n(.*?)\n<!-- /variants -->", doc, re.S)
    assert stated, "docs/census.md has no rendered variant table"
    assert stated.group(1).strip() == variants_markdown()
    rows = [line.split(" | ", 1)[0].strip("| `") for line in variants_markdown().splitlines()[2:]]
    assert rows == list(VARIANTS)


def test_the_records_read_every_variant_under_its_own_name(records):
    """Each fact is a records name of its own name (catalogue/records/names.py), read by at least
    one formula of records.yaml or ends.yaml: no fact is stated that nothing prices."""
    exprs = [records.full, *records.derived.values(), *load_ends(records).parts.values()]
    for slot in records.slots:
        exprs += [slot.formula, *(expr for _, expr in slot.elements), *([slot.when] if slot.when is not None else [])]
    read = set().union(*(expr.names for expr in exprs))
    assert set(VARIANTS) - read == set()

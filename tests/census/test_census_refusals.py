"""The hostile corpus (tests/support/hostile/, reasons in expected.yaml; tests/support/hostile_corpus.py) is refused
with its reason codes, the pre-build ones before any model is built, and the CLI reports each in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.hostile_corpus import CASES, CORPUS, EXPECTED, GENERATORS, committed, generated, materialize

from speccat.census import load_config_file
from speccat.catalogue.errors import MAX_MESSAGE_CHARS
from speccat.census.spec import REASONS, SpecError
from speccat.flows.cli import main


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    return materialize(tmp_path_factory.mktemp("hostile"))


def test_every_broken_config_has_an_expectation_and_vice_versa():
    assert sorted(p.name for p in CORPUS.glob("*.json")) == committed()
    assert sorted(GENERATORS) == generated()
    assert len(CASES) >= 30
    assert {entry["reason"] for entry in EXPECTED.values()} <= set(REASONS)
    assert {entry["stage"] for entry in EXPECTED.values()} == {"fetch", "census"}


def _refusal(path: Path) -> SpecError:
    from speccat.census import run_census

    with pytest.raises(SpecError) as err:
        run_census(load_config_file(path), name=path.name)
    return err.value


@pytest.mark.parametrize("name", CASES)
def test_broken_config_is_refused_with_its_reason(name, paths, monkeypatch):
    expected = EXPECTED[name]
    if expected["before_build"]:
        import speccat.census.census as census_mod

        def no_build(*args, **kwargs):
            raise AssertionError("the census built a model for a config it should refuse first")

        monkeypatch.setattr(census_mod, "build", no_build)
    error = _refusal(paths[name])
    assert error.reason == expected["reason"], f"{name} ({expected['why']}): {error}"
    assert str(error)  # a message naming the field
    assert "\n" not in str(error) and len(str(error)) <= MAX_MESSAGE_CHARS  # one bounded line


@pytest.mark.parametrize("name", CASES)
def test_cli_prints_a_refusal_as_one_json_line(name, paths, capsys):
    assert main(["census", str(paths[name]), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out.count("\n") == 1 and err == ""
    assert json.loads(out)["error"]["reason"] == EXPECTED[name]["reason"]


def test_cli_prints_a_refusal_as_one_line_without_json(capsys):
    assert main(["census", str(CORPUS / "layers_1e6.json")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("speccat: too_large: num_hidden_layers") and err.count("\n") == 1


@pytest.mark.slow
def test_cli_process_shows_no_traceback():
    for name in ("hidden_size_1e9.json", "remote_code.json", "cpmant_prompt_tokens.json"):
        done = subprocess.run(
            [sys.executable, "-m", "speccat.flows.cli", "census", str(CORPUS / name), "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        assert json.loads(done.stdout)["error"]["reason"] == EXPECTED[name]["reason"]


def test_the_models_own_code_failing_is_unsupported_layer_naming_it(monkeypatch):
    """An exception the model's code raises during the fake forward is the model's limit, named
    by the transformers frame that raised; one the census's own code raises stays census_failed."""
    from transformers.models.llama import modeling_llama

    from speccat.census import run_census

    from speccat.census.measure import watcher

    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 128}  # fmt: skip
    with monkeypatch.context() as patched:
        patched.setattr(modeling_llama.LlamaMLP, "forward", lambda self, x: x.reshape(-1, 7))
        with pytest.raises(SpecError) as err:
            run_census(config, name="tiny")
    assert err.value.reason == "unsupported_layer"
    assert "modeling_llama.py" in str(err.value) and "RuntimeError" in str(err.value)

    monkeypatch.setattr(watcher, "storage_key", None)  # the census's own code breaks while it watches an op
    with pytest.raises(SpecError) as err:
        run_census(config, name="tiny")
    assert err.value.reason == "census_failed" and "TypeError" in str(err.value)

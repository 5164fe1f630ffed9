"""Reading configs, the language config and config_hash: plain Python, no torch."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from conftest import load_shipped
from speccat.census import config_hash, language_config, load_config_file
from speccat.census.spec import SpecError


def test_load_config_file_reads_a_json_object(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 64}')
    assert load_config_file(path) == {"model_type": "llama", "hidden_size": 64}


@pytest.mark.parametrize(
    "text",
    [
        '{"model_type": "llama",',  # truncated
        "[1, 2, 3]",  # not an object
        '"llama"',
        "\xff\xfe not utf-8",
        "[" * 100_000 + "]" * 100_000,  # nested beyond the parser's recursion
    ],
)
def test_load_config_file_refuses_what_is_not_one_json_object(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(SpecError) as err:
        load_config_file(path)
    assert err.value.reason == "bad_json"


@pytest.mark.parametrize(
    "text, field",
    [
        ('{"hidden_size": NaN}', "hidden_size"),  # NaN parses (as Python's json and transformers read it), no field holds it
        ('{"a": {"b": [1.0, NaN]}}', "a.b[1]"),
        ('{"rope_theta": 1e999}', "1e999"),  # beyond the float range: not the Infinity it would parse to
    ],
)
def test_nan_anywhere_and_overflowing_literals_are_bad_values(tmp_path, text, field):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_config_file(path)
    assert err.value.reason == "bad_value" and field in str(err.value)


def test_infinity_is_read_and_refused_only_where_a_finite_number_belongs(tmp_path):
    from speccat.census.intake.config import precheck

    path = tmp_path / "config.json"
    path.write_text('{"model_type": "nemotron_h", "time_step_limit": [0.0, Infinity]}')
    config = load_config_file(path)
    assert config["time_step_limit"] == [0.0, float("inf")]
    precheck(config)  # an unbounded clamp is a value transformers accepts
    for text, field in (
        ('{"model_type": "llama", "hidden_size": Infinity}', "hidden_size"),
        ('{"model_type": "llama", "rope_parameters": {"rope_theta": -Infinity}}', "rope_parameters.rope_theta"),
        ('{"model_type": "llama", "partial_rotary_factor": Infinity}', "partial_rotary_factor"),
    ):
        path.write_text(text)
        with pytest.raises(SpecError) as err:
            precheck(load_config_file(path))
        assert err.value.reason == "bad_value" and field in str(err.value), text


def test_load_config_file_refuses_huge_files_before_reading_them(tmp_path):
    from speccat.census.intake.limits import LIMITS

    path = tmp_path / "config.json"
    path.write_text('{"pad": "' + "x" * LIMITS.max_config_bytes + '"}')
    with pytest.raises(SpecError) as err:
        load_config_file(path)
    assert err.value.reason == "too_large"


def test_missing_file_is_an_os_error_not_a_refusal(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_config_file(tmp_path / "absent.json")


def test_language_config_of_a_flat_config_drops_other_modalities():
    config = load_shipped("Qwen/Qwen2.5-VL-7B-Instruct")
    language = language_config(config)
    assert "vision_config" not in language
    assert language["hidden_size"] == config["hidden_size"] == 3584
    assert language["model_type"] == "qwen2_5_vl"


def test_language_config_of_a_nested_config_is_its_text_config():
    config = load_shipped("Qwen/Qwen3-VL-4B-Instruct")
    language = language_config(config)
    assert language["model_type"] == "qwen3_vl_text"
    assert language["hidden_size"] == config["text_config"]["hidden_size"] == 2560
    assert "vision_config" not in language and "image_token_id" not in language


def test_language_config_takes_the_composite_models_tie_flag():
    # Qwen3.5-9B states tie_word_embeddings only at the top level; its text_config leans on defaults.
    config = load_shipped("Qwen/Qwen3.5-9B")
    assert "tie_word_embeddings" not in config["text_config"]
    assert language_config(config)["tie_word_embeddings"] is False


def test_language_config_names_the_architecture_of_a_sparse_text_config():
    config = {"model_type": "gemma3", "text_config": {"hidden_size": 64}}
    assert language_config(config) == {"hidden_size": 64, "model_type": "gemma3"}


def test_language_config_is_a_copy():
    config = load_shipped("Qwen/Qwen3.5-9B")
    language_config(config)["layer_types"].append("tampered")
    assert "tampered" not in config["text_config"]["layer_types"]


def test_config_hash_is_sha256_of_the_canonical_architecture_json():
    config = {"model_type": "llama", "hidden_size": 64, "transformers_version": "4.0", "eos_token_id": 2}
    canonical = json.dumps({"hidden_size": 64, "model_type": "llama"}, sort_keys=True, separators=(",", ":"))
    assert config_hash(config) == hashlib.sha256(canonical.encode()).hexdigest()


def test_config_hash_ignores_names_versions_token_ids_and_dtype():
    base = load_shipped("meta-llama/Llama-3.1-8B-Instruct")
    renamed = dict(base, _name_or_path="someone/fine-tune", transformers_version="9.9.9", torch_dtype="float32")
    renamed.update(bos_token_id=7, eos_token_id=[8, 9], pad_token_id=0, architectures=["Other"])
    assert config_hash(renamed) == config_hash(base)


def test_config_hash_changes_with_the_architecture():
    base = load_shipped("meta-llama/Llama-3.1-8B-Instruct")
    assert config_hash(dict(base, num_hidden_layers=31)) != config_hash(base)
    assert config_hash(dict(base, rope_theta=10000.0)) != config_hash(base)


def test_deepseek_v3_and_r1_hash_equal():
    # The two files differ only in transformers_version (checked here, so the test cannot pass vacuously).
    v3, r1 = load_shipped("deepseek-ai/DeepSeek-V3"), load_shipped("deepseek-ai/DeepSeek-R1")
    assert {k for k in v3.keys() | r1.keys() if v3.get(k) != r1.get(k)} == {"transformers_version"}
    assert config_hash(v3) == config_hash(r1)
    assert config_hash(load_shipped("deepseek-ai/DeepSeek-V3.2")) != config_hash(v3)


def test_config_hash_does_not_import_torch():
    # The flow hashes every fetched config in its main process: it must stay cheap.
    code = (
        "import sys, json; from speccat.census import config_hash, load_config_file; "
        "config_hash({'model_type': 'llama'}); print(json.dumps(['torch' in sys.modules, 'transformers' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [False, False]


def test_the_data_loaders_refuse_malformed_files(tmp_path):
    from speccat.census.describe.counts import load_fixed_counts
    from speccat.census.intake.limits import load_limits

    limits = tmp_path / "limits.yaml"
    limits.write_text("max_config_bytes: 10\nrequired: []\nsizes:\n  hidden_size: [8, 4]\n")
    with pytest.raises(ValueError, match="sizes.hidden_size"):
        load_limits(limits)
    counts = tmp_path / "counts.yaml"
    counts.write_text("gathers: 4\n")
    with pytest.raises(ValueError, match="gathers"):
        load_fixed_counts(counts)

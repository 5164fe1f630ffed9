"""The settings grid (catalogue/records/settings.py, docs/pricing.md)."""

from __future__ import annotations

import hashlib
import itertools
import json
import re

import pytest
import yaml

from speccat.catalogue.records.settings import FIELDS, SETTINGS_PATH, SettingsError, load_settings, settings_content


def test_the_default_grid_is_96_settings(grid):
    # stack 2 values × seq_length 3 × micro_batch 1 × tp 4 × cp 4 × one value for every other field
    assert len(grid.settings) == 2 * 3 * 1 * 4 * 4 == 96
    assert grid.fields == FIELDS
    seen = {(s["stack"], s["seq_length"], s["tp"], s["cp"]) for s in grid.settings}
    assert seen == set(itertools.product(["transformers", "megatron"], [4096, 8192, 32768], [1, 2, 4, 8], [1, 2, 4, 8]))
    first = grid.settings[0]
    assert {k: first[k] for k in FIELDS} == {
        "stack": "transformers", "seq_length": 4096, "micro_batch": 1, "tp": 1, "cp": 1, "sequence_parallel": True,
        "flash_attention": True, "cp_algo": "ring", "dtype": "bf16", "in_flight": 1,
        "param_casts": False, "grouped_gemm": True, "dropless_tok_factor": 1.0, "capacity_factor": 1.0,
    }  # fmt: skip
    assert grid.dtype_bytes["bf16"] == 2 and grid.dtype_bytes["fp32"] == 4
    assert re.fullmatch(r"[0-9a-f]{16}", grid.version)


def test_the_grid_is_every_combination_of_the_files_values_in_field_order(grid):
    fields = settings_content(yaml.safe_load(SETTINGS_PATH.read_text()))["fields"]  # seq_length's default first
    expected = list(itertools.product(*(f["values"] for f in fields.values())))
    assert [tuple(s[k] for k in fields) for s in grid.settings] == expected


def test_setting_ids_hash_the_canonical_mapping(grid):
    for setting in grid.settings:
        fields = {k: setting[k] for k in FIELDS}
        blob = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
        assert setting["setting_id"] == hashlib.sha256(blob).hexdigest()[:16]
    assert len({s["setting_id"] for s in grid.settings}) == 96


def test_ids_are_stable_across_loads_and_number_spellings(grid, tmp_path):
    spelled = "capacity_factor:     {type: number, values: [1]}"
    assert spelled in SETTINGS_PATH.read_text()
    text = SETTINGS_PATH.read_text().replace(spelled, spelled.replace("[1]", "[1.0]"))
    copy = tmp_path / "settings.yaml"
    copy.write_text(text)
    again = load_settings(copy)
    assert [s["setting_id"] for s in again.settings] == [s["setting_id"] for s in grid.settings]


def test_the_version_follows_content_not_layout(grid, tmp_path):
    text = SETTINGS_PATH.read_text()
    relaid = tmp_path / "a.yaml"
    relaid.write_text("# a comment\n" + text)
    assert load_settings(relaid).version == grid.version
    changed = tmp_path / "b.yaml"
    changed.write_text(text.replace("values: [1, 2, 4, 8]", "values: [1, 2, 4, 8, 16]", 1))  # tp's
    other = load_settings(changed)
    assert other.version != grid.version and len(other.settings) == 2 * 3 * 5 * 4


def test_one_setting_from_overrides(grid):
    setting = grid.setting({"seq_length": 8192, "tp": 2, "cp_algo": "ulysses"})
    assert (setting["seq_length"], setting["tp"], setting["cp"], setting["cp_algo"]) == (8192, 2, 1, "ulysses")
    # an override equal to a grid row gives that row's id
    row = next(s for s in grid.settings if (s["seq_length"], s["tp"], s["cp"]) == (8192, 2, 4))
    assert grid.setting({"seq_length": 8192, "tp": 2, "cp": 4})["setting_id"] == row["setting_id"]
    assert grid.setting()["setting_id"] == grid.settings[0]["setting_id"]
    one = grid.with_settings([setting])
    assert [s["setting_id"] for s in one.settings] == [setting["setting_id"]] and one.version == grid.version


@pytest.mark.parametrize(
    "overrides, reason, text",
    [
        ({"sequence": 4096}, "unknown_field", "sequence"),
        ({"tp": 0}, "bad_value", "tp"),
        ({"tp": "2"}, "bad_value", "tp"),
        ({"tp": True}, "bad_value", "tp"),
        ({"seq_length": 1.5}, "bad_value", "seq_length"),
        ({"dtype": "fp8"}, "bad_value", "bf16, fp16, fp32"),
        ({"cp_algo": "tree"}, "bad_value", "ring, ulysses"),
        ({"capacity_factor": 0}, "bad_value", "capacity_factor"),
        ({"capacity_factor": float("nan")}, "bad_value", "capacity_factor"),
        ({"flash_attention": 1}, "bad_value", "true or false"),
    ],
)
def test_bad_overrides_are_refused(grid, overrides, reason, text):
    with pytest.raises(SettingsError) as err:
        grid.setting(overrides)
    assert err.value.reason == reason and text in str(err.value)


@pytest.mark.parametrize(
    "old, new, reason, key",
    [
        ("  tp:                  {type: int", "  tpp:                 {type: int", "unknown_field", "fields.tpp"),
        ("  cp:                  {type: int, min: 1, values: [1, 2, 4, 8]}\n", "", "missing_key", "fields.cp"),
        ("{type: int, min: 1, values: [1, 2, 4, 8]}", "{type: int, min: 1, valeus: [1, 2, 4, 8]}", "unknown_key", "fields.tp.valeus"),
        ("{type: int, min: 1, values: [1, 2, 4, 8]}", "{type: integer, values: [1, 2, 4, 8]}", "bad_value", "fields.tp.type"),
        ("{type: int, min: 1, values: [1, 2, 4, 8]}", "{type: int, min: 1, values: [1, 0]}", "bad_value", "fields.tp.values[1]"),
        ("{type: int, min: 1, values: [1, 2, 4, 8]}", "{type: int, min: 1, values: [1, 2, 2]}", "bad_value", "fields.tp.values"),
        ("{type: dtype, values: [bf16]}", "{type: dtype, values: [bf8]}", "bad_value", "fields.dtype.values[0]"),
        ("dtypes: {bf16: 2,", "dtypes: {bf16: two,", "bad_value", "dtypes.bf16"),
    ],
)
def test_a_bad_copy_is_refused_naming_the_file_and_key(tmp_path, old, new, reason, key):
    text = SETTINGS_PATH.read_text()
    assert old in text
    bad = tmp_path / "settings.yaml"
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(SettingsError) as err:
        load_settings(bad)
    assert err.value.reason == reason
    assert f"settings.yaml: {key}:" in str(err.value)


def test_a_fixed_setting_is_one_value_outside_the_grid_rows_and_their_ids(grid, tmp_path):
    """encoder_tokens (settings.yaml `fixed`): no grid row states it, so no id changes with it; a
    setting built with another value states it and hashes it into its id; a fixed setting holds
    one value, and only the fixed settings pricing reads are allowed."""
    assert tuple(grid.fixed) == ("encoder_tokens", "attention_kernel") and grid.fixed["encoder_tokens"].values == (0,)
    assert grid.fixed["attention_kernel"].values == ("auto",) and grid.setting({"attention_kernel": "auto"}) == grid.settings[0]
    flash = grid.setting({"attention_kernel": "flash"})
    assert flash["attention_kernel"] == "flash" and flash["setting_id"] != grid.settings[0]["setting_id"]
    assert all(set(s) == {"setting_id", *FIELDS} for s in grid.settings)
    assert grid.setting({"encoder_tokens": 0}) == grid.setting({}) == grid.settings[0]
    other = grid.setting({"encoder_tokens": 1601})
    blob = json.dumps({k: other[k] for k in (*FIELDS, "encoder_tokens")}, sort_keys=True, separators=(",", ":")).encode()
    assert other["encoder_tokens"] == 1601 and other["setting_id"] == hashlib.sha256(blob).hexdigest()[:16]
    with pytest.raises(SettingsError) as err:
        grid.setting({"encoder_tokens": -1})
    assert err.value.reason == "bad_value"
    fixed = "encoder_tokens: {type: int, min: 0, values: [0]}"
    for edited, reason in ((fixed.replace("[0]", "[0, 1601]"), "bad_value"), (fixed.replace("encoder_tokens", "decoder_tokens"), "unknown_field")):
        copy = tmp_path / "settings.yaml"
        copy.write_text(SETTINGS_PATH.read_text().replace(fixed, edited))
        with pytest.raises(SettingsError) as err:
            load_settings(copy)
        assert err.value.reason == reason

"""Family profiles (census/structure/profiles/*.yaml) and model_type → family."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import yaml

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.vocabulary import OPS
from speccat.census.structure import family as family_mod
from speccat.census.structure.family import (
    PROFILES_DIR,
    ProfileError,
    family_for,
    load_families,
    profiles_version,
)
from speccat.flows.cli import classify


def counts(*values: int) -> dict:
    return dict(zip(OPS, values))


STD = counts(4, 2, 3, 1, 0, 2, 4, 1, 1, 0)


def test_design_families_load_with_their_counts():
    fams = load_families()
    assert {"default", "llama2", "mixtral", "qwen", "qwen3_5", "deepseek"} <= set(fams)
    for name in ("default", "llama2", "mixtral", "qwen"):
        assert dict(fams[name].kinds["decoder"].ops) == STD
    hybrid = fams["qwen3_5"].kinds
    assert (hybrid["full_attention"].mixer, dict(hybrid["full_attention"].ops)) == ("full", STD)
    assert (hybrid["linear_attention"].mixer, dict(hybrid["linear_attention"].ops)) == (
        "linear", counts(4, 0, 3, 0, 0, 2, 4, 0, 1, 1))
    deepseek = fams["deepseek"]
    assert (deepseek.kinds["dense"].ffn, deepseek.kinds["moe"].ffn) == ("dense", "moe")
    assert dict(deepseek.kinds["moe"].ops) == STD
    assert deepseek.model["v_head_dim"] == 128


def test_defaults_merge_over_the_default_family():
    fams = load_families()
    assert dict(fams["default"].defaults) == {"norm_bytes": 4, "dropout_bytes": 0, "softmax_bytes": 4}
    assert dict(fams["deepseek"].defaults) == dict(fams["default"].defaults)


@pytest.mark.parametrize("model_type,family", [
    ("llama", "llama2"), ("mistral", "llama2"), ("mixtral", "mixtral"),
    ("qwen2", "qwen"), ("qwen3_moe", "qwen"), ("qwen2_5_vl", "qwen"),
    ("qwen3_5", "qwen3_5"), ("qwen3_5_moe", "qwen3_5"), ("qwen3_next", "qwen3_5"),
    ("deepseek_v2", "deepseek"), ("deepseek_v32", "deepseek"),
    ("gemma", "gemma"), ("gemma2", "gemma2"), ("gemma3_text", "gemma2"),
    ("starcoder2", "starcoder2"), ("gpt_oss", "gpt_oss"), ("phi3", "default"), ("zzz_new", "default"),
])
def test_family_by_longest_prefix(model_type, family):
    assert family_for(model_type).name == family


def test_fallback_is_logged_once_per_name(caplog, monkeypatch):
    monkeypatch.setattr(family_mod, "_logged_fallbacks", set())
    with caplog.at_level(logging.INFO, logger="speccat.census.structure.family"):
        for _ in range(3):
            family_for("brand_new_arch")
        family_for("other_new_arch")
    messages = [r.getMessage() for r in caplog.records]
    assert sum("brand_new_arch" in m for m in messages) == 1
    assert sum("other_new_arch" in m for m in messages) == 1


def test_kind_for_matches_flavours():
    fams = load_families()
    assert fams["deepseek"].kind_for("full", "moe") == "moe"
    assert fams["deepseek"].kind_for("full", "dense") == "dense"
    assert fams["deepseek"].kind_for("linear", "moe") is None
    assert fams["qwen3_5"].kind_for("linear", "moe") == "linear_attention"
    assert fams["default"].kind_for("full", "moe") == "decoder"
    assert fams["default"].kind_for("linear", "dense") is None


@pytest.fixture
def profiles_copy(tmp_path) -> Path:
    target = tmp_path / "profiles"
    shutil.copytree(PROFILES_DIR, target)
    return target


def edit(path: Path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize("change,file_and_key", [
    (lambda d: d["kinds"]["moe"]["ops"].update(attMMM=4), "deepseek.yaml: kinds.moe.ops.attMMM"),
    (lambda d: d["kinds"]["moe"]["ops"].pop("gather"), "deepseek.yaml: kinds.moe.ops.gather"),
    (lambda d: d["kinds"]["moe"].update(ffn="sparse"), "deepseek.yaml: kinds.moe.ffn"),
    (lambda d: d["kinds"]["dense"].update(attention="sliding"), "deepseek.yaml: kinds.dense.attention"),
    (lambda d: d.update(defualt="moe"), "deepseek.yaml: defualt"),
    (lambda d: d.update(default="expert"), "deepseek.yaml: default"),
    (lambda d: d.update(defaults={"norm_byte": 4}), "deepseek.yaml: defaults.norm_byte"),
    (lambda d: d.update(run={"norm_bytes": 4}), "deepseek.yaml: run"),
    (lambda d: d.update(model={"v_head_dims": 128}), "deepseek.yaml: model.v_head_dims"),
    (lambda d: d["kinds"]["moe"]["ops"].update(softmax=-1), "deepseek.yaml: kinds.moe.ops.softmax"),
])
def test_misspelt_profile_is_refused_naming_file_and_key(profiles_copy, change, file_and_key):
    edit(profiles_copy / "deepseek.yaml", change)
    with pytest.raises(ProfileError) as info:
        load_families(profiles_copy)
    assert str(info.value).startswith(file_and_key), str(info.value)
    assert info.value.reason == "bad_profile"


def test_a_bad_profile_is_one_line_with_a_stable_reason(profiles_copy):
    """A profile that is not YAML is refused as every refusal is: a ReasonError, reason
    `bad_profile`, one line naming the file, printed by the CLI as `speccat: bad_profile: ...`."""
    (profiles_copy / "qwen.yaml").write_text("family: qwen\nkinds: [unclosed\n")
    with pytest.raises(ReasonError) as info:
        load_families(profiles_copy)
    assert info.value.reason == "bad_profile" and isinstance(info.value, ProfileError)
    assert str(info.value).startswith("qwen.yaml: not valid YAML") and "\n" not in str(info.value)
    assert classify(info.value) == ("refused", "bad_profile", str(info.value))


def test_two_families_claiming_one_prefix_are_refused(profiles_copy):
    edit(profiles_copy / "mixtral.yaml", lambda d: d.update(match=["mixtral", "llama"]))
    with pytest.raises(ProfileError, match="already claimed"):
        load_families(profiles_copy)


def test_profiles_version_follows_content_not_formatting(profiles_copy):
    original = profiles_version(profiles_copy)
    assert original == profiles_version(PROFILES_DIR)
    path = profiles_copy / "qwen.yaml"
    path.write_text("# a comment changes nothing\n" + path.read_text())
    assert profiles_version(profiles_copy) == original
    edit(path, lambda d: d["kinds"]["decoder"]["ops"].update(normOp=3))
    assert profiles_version(profiles_copy) != original

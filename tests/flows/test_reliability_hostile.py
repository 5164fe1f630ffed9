"""The hostile corpus (tests/support/hostile/, tests/support/hostile_corpus.py) against the limits that make it
harmless (issue 7, item 1). tests/census/test_census_refusals.py checks each case's reason and that
the pre-build ones build nothing; here:

- the corpus covers every kind of hostile config the issue names;
- the files too big to commit are refused in a process whose memory is bounded to what the
  CLI needs for a small refusal plus 32 MiB: less than reading the 50 MB file, let alone
  parsing it, so a refusal there proves the file was refused before it was read;
- a refusal prints one line of bounded length, whatever the config held;
- a night over the whole corpus completes: each hostile repo is a failures row with its
  reason and stage, and a good config among them is stored.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from support.hostile_corpus import CASES, EXPECTED, materialize
from support.refresh_runs import copy_snapshot, rows, run_refresh

from speccat.catalogue.records.settings import load_settings
from speccat.catalogue.errors import MAX_MESSAGE_CHARS
from speccat.flows.cli import main

# Each kind of hostile config issue 7 names, and the corpus cases that are it.
KINDS = {
    "invalid JSON": ["single_quotes.json", "empty_file.json", "invalid_utf8.json"],
    "truncated JSON": ["invalid_json.json"],
    "non-object JSON": ["not_an_object.json", "top_level_string.json"],
    "NaN and Infinity": ["nan_constant.json", "infinity_constant.json", "float_overflow.json"],
    "strings where numbers belong": ["string_hidden_size.json"],
    "booleans where counts belong": ["bool_layers.json", "bool_experts.json"],
    "negative and zero sizes": ["negative_hidden_size.json", "zero_layers.json"],
    "heads not divisible by kv heads": ["heads_not_divisible.json", "nested_heads_not_divisible.json"],
    "head_dim × heads disagreeing with projections": ["heads_times_head_dim_not_hidden.json", "projection_width_not_divisible.json"],
    "hidden 10^9": ["hidden_size_1e9.json", "nested_hidden_size_1e9.json"],
    "layers 10^6": ["layers_1e6.json"],
    "experts 10^6": ["experts_1e6.json"],
    "vocab 10^12": ["vocab_1e12.json"],
    "deeply nested JSON": ["deeply_nested.json", "nested_600_levels.json"],
    "a 50 MB config": ["config_50mb.json"],
    "an unknown model_type": ["unknown_model_type.json", "model_type_names_a_module.json"],
    "auto_map with remote code": ["remote_code.json"],
    "text_config not an object": ["text_config_not_an_object.json"],
    "mixed-up layer_types lengths": ["layer_types_too_short.json", "layer_types_too_long.json"],
}
GOOD = "Qwen/Qwen3-0.6B"


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    return materialize(tmp_path_factory.mktemp("hostile"))


def test_the_corpus_has_every_kind_the_issue_names():
    assert len(CASES) >= 30
    for kind, names in KINDS.items():
        assert names and all(name in EXPECTED for name in names), kind


def _cli(path: Path, memory: int | None = None) -> subprocess.CompletedProcess:
    def bounded() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run(
        [sys.executable, "-m", "speccat.flows.cli", "census", str(path), "--json"],
        capture_output=True, text=True, timeout=300, preexec_fn=bounded,
    )  # fmt: skip


def _footprint(path: Path) -> int:
    """The most address space (VmPeak, what RLIMIT_AS bounds) the CLI maps to refuse `path`."""
    code = (
        "import sys; from speccat.flows.cli import main; code = main(sys.argv[1:]); "
        "peak = [l for l in open('/proc/self/status') if l.startswith('VmPeak:')][0]; "
        "print(int(peak.split()[1]) * 1024, file=sys.stderr); sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", code, "census", str(path), "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    return int(done.stderr.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["config_50mb.json", "deeply_nested.json", "nested_600_levels.json"])
def test_the_big_files_are_refused_within_a_small_memory_bound(name, paths):
    # The bound: what the CLI maps to refuse a small config before building (layers 10^6,
    # refused by census/intake/limits.yaml), plus 32 MiB. The 50 MB file alone is more than that.
    bound = _footprint(paths["layers_1e6.json"]) + 32 * 2**20
    assert paths["config_50mb.json"].stat().st_size > 32 * 2**20
    done = _cli(paths[name], memory=bound)
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["error"]["reason"] == EXPECTED[name]["reason"]


@pytest.mark.parametrize("name", ["heads_times_head_dim_not_hidden.json", "huge_model_type.json"])
def test_a_refusal_prints_one_line_of_bounded_length(name, paths, capsys):
    # transformers' validation error runs over several lines; the model_type is 3 MB. Every
    # case's message is checked in test_census_refusals.py; here, what the CLI prints.
    assert main(["census", str(paths[name])]) == 2
    out, err = capsys.readouterr()
    prefix = f"speccat: {EXPECTED[name]['reason']}: "
    assert out == "" and err.startswith(prefix) and err.count("\n") == 1
    assert len(err) <= len(prefix) + MAX_MESSAGE_CHARS + 1


# -- a night over the whole corpus ---------------------------------------------------------


def repo_of(name: str) -> str:
    return f"hostile/{Path(name).stem}"


@pytest.fixture(scope="module")
def corpus_night(prefect_api, paths, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("corpus-night")
    snapshot = copy_snapshot(tmp / "snapshot", [GOOD])
    for name, path in paths.items():
        folder = snapshot / repo_of(name).replace("/", "__", 1)
        folder.mkdir()
        (folder / "config.json").write_bytes(path.read_bytes())
    db = tmp / "catalogue.duckdb"
    state, counts = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(db), report=False)
    return db, state, counts


@pytest.mark.slow
def test_a_night_over_the_corpus_completes_with_each_hostile_repo_a_failures_row(corpus_night):
    db, state, counts = corpus_night
    assert state.is_completed()
    assert counts["repos"] == len(CASES) + 1
    failures = {r: (stage, reason) for r, stage, reason in rows(db, "SELECT repo_id, stage, reason FROM failures")}
    expected = {repo_of(name): (e["stage"], e["reason"]) for name, e in EXPECTED.items()}
    assert failures == expected


@pytest.mark.slow
def test_the_good_config_among_them_is_stored(corpus_night):
    db, _, _ = corpus_night
    assert rows(db, "SELECT name FROM specs") == [(GOOD,)]
    settings = {s["setting_id"] for s in load_settings().settings}
    assert {s for (s,) in rows(db, "SELECT DISTINCT setting_id FROM full_prices")} == settings

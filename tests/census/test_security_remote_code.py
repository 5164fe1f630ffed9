"""No config can run code (issue 7, item 4).

- Statically: speccat's sources pass `trust_remote_code` only as the constant False, and import
  or evaluate by name only at the few sites listed in ALLOWED, none of which takes a name from
  a config.
- Dynamically: a module is planted where Python and transformers would find it (on sys.path,
  and as a "repo" folder the config's `_name_or_path` points at, as remote code is laid out).
  Importing it writes a marker file. Configs naming it in every place a config can name code
  (auto_map with trust_remote_code, model_type, architectures, hidden_act, rope type, the
  attention and experts implementations, quantization, tokenizer and pipeline classes) are
  censused: each is censused as transformers' own class or refused, the module is never
  imported, and transformers' loader of remote code is never called.
"""

from __future__ import annotations

import ast
import sys
import uuid
from pathlib import Path

import pytest

from speccat.census.spec import SpecError

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for folder in ("census", "catalogue", "flows", "sql") for p in (ROOT / folder).rglob("*.py"))

# Calls that import or evaluate something named at run time (the builtins called by their own
# name: `re.compile` is not one), and where speccat makes them.
BUILTINS = {"eval", "exec", "compile", "__import__"}
LOADERS = {"import_module", "get_class_from_dynamic_module", "run_path", "load_source", "__import__"}
ALLOWED = {
    ("catalogue/records/expr.py", "compile"),  # the closed expression language, validated node by node (tests/pricing/test_security_expr.py)
    ("catalogue/records/expr.py", "eval"),
    ("census/kernels/__init__.py", "import_module"),  # the package's own modules, listed by pkgutil from its folder
    ("catalogue/store/lake.py", "import_module"),  # a DuckDB extension package from the constant EXTENSION_PACKAGES
    ("flows/cli.py", "import_module"),  # speccat.flows.<name> for the constant COMMAND_MODULES
    ("flows/isolate.py", "import_module"),  # the census child's target, the constant tasks.ANALYSE
}


def _dynamic(node: ast.AST) -> str | None:
    """The name of a call that imports or evaluates by name, else None."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name) and node.func.id in BUILTINS | LOADERS:
        return node.func.id
    if isinstance(node.func, ast.Attribute) and node.func.attr in LOADERS:
        return node.func.attr
    return None


def test_trust_remote_code_is_only_ever_false():
    passed = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "trust_remote_code":
                passed.append((path.relative_to(ROOT).as_posix(), ast.unparse(node.value)))
    assert passed and all(value == "False" for _, value in passed), passed


def test_code_is_imported_or_evaluated_by_name_only_where_listed():
    sites = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if _dynamic(node):
                sites.add((path.relative_to(ROOT).as_posix(), _dynamic(node)))
    assert sites == ALLOWED


def test_the_census_child_runs_a_constant_target():
    from speccat.flows import tasks

    calls = [
        node
        for node in ast.walk(ast.parse((ROOT / "flows" / "tasks.py").read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "isolate"
    ]  # fmt: skip
    assert calls and all(ast.unparse(c.args[0]) == "ANALYSE" for c in calls)
    assert tasks.ANALYSE == "speccat.flows.analysis:analyse"


# -- a planted module ---------------------------------------------------------------------

PLAIN = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256}


class Planted:
    def __init__(self, folder: Path):
        self.name = f"speccat_planted_{uuid.uuid4().hex[:12]}"
        self.folder = folder
        self.marker = folder / "IMPORTED"
        code = (
            f"import pathlib\npathlib.Path({str(self.marker)!r}).write_text('imported')\n"
            "import torch\nclass Model(torch.nn.Module):\n    pass\nclass Config:\n    pass\ndef act(x):\n    return x\n"
        )
        folder.mkdir()
        (folder / f"{self.name}.py").write_text(code)

    def configs(self) -> dict[str, tuple[dict, str | None]]:
        """Each way a config can name the module: (config, the refusal it gets or None)."""
        m, remote = self.name, {"AutoConfig": f"{self.name}.Config", "AutoModelForCausalLM": f"{self.name}.Model"}
        llama = {"model_type": "llama", **PLAIN}
        return {
            "auto_map on a known model_type, trusted": ({**llama, "auto_map": remote, "_name_or_path": str(self.folder), "trust_remote_code": True}, None),
            "auto_map on an unknown model_type": ({"model_type": m, **PLAIN, "auto_map": remote, "_name_or_path": str(self.folder)}, "remote_code"),
            "auto_map in a text_config": (
                {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", **PLAIN, "head_dim": 16, "auto_map": remote, "_name_or_path": str(self.folder)}},
                None,
            ),
            "model_type": ({"model_type": m, **PLAIN}, "unknown_model_type"),
            "architectures": ({**llama, "architectures": [f"{m}.Model"]}, None),
            "hidden_act": ({**llama, "hidden_act": f"{m}.act"}, "bad_value"),
            "rope type": ({**llama, "rope_parameters": {"rope_type": m, "rope_theta": 10000.0}}, "bad_value"),
            "attention implementation": ({**llama, "attn_implementation": m, "_attn_implementation": m}, None),
            "experts implementation": ({**llama, "experts_implementation": m}, "bad_value"),
            "quantization method": ({**llama, "quantization_config": {"quant_method": m}}, None),
            "tokenizer and pipeline classes": ({**llama, "tokenizer_class": f"{m}.Tok", "custom_pipelines": {"x": {"impl": f"{m}.P"}}}, None),
        }


@pytest.fixture
def planted(tmp_path, monkeypatch) -> Planted:
    import transformers.dynamic_module_utils as dynamic
    import transformers.models.auto.auto_factory as auto_factory
    import transformers.models.auto.configuration_auto as configuration_auto

    module = Planted(tmp_path / "planted-repo")
    monkeypatch.syspath_prepend(str(module.folder))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*args, **kwargs):
        raise AssertionError(f"transformers was asked to load remote code: {args}")

    for home in (dynamic, auto_factory, configuration_auto):
        if hasattr(home, "get_class_from_dynamic_module"):
            monkeypatch.setattr(home, "get_class_from_dynamic_module", refuse)
    return module


def test_no_config_imports_a_module_it_names(planted):
    from speccat.census import run_census

    outcomes = {}
    for way, (config, refusal) in planted.configs().items():
        try:
            spec = run_census(config, name=way)
            outcomes[way] = None
            # Censused as transformers' own class, with speccat's attention, whatever was named.
            assert {m["attention_impl"] for m in spec["measured"].values()} == {"speccat::flash_attention"}, way
        except SpecError as err:
            assert "was asked to load remote code" not in str(err), way
            outcomes[way] = err.reason
        assert not planted.marker.exists(), f"{way}: the planted module ran"
        assert planted.name not in sys.modules, way
    assert outcomes == {way: refusal for way, (_, refusal) in planted.configs().items()}


def test_the_cli_imports_nothing_a_config_names(planted, tmp_path, capsys):
    import json

    from speccat.flows.cli import main

    for way, (config, refusal) in planted.configs().items():
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        assert main(["census", str(path), "--json"]) == (2 if refusal else 0), way
        out = json.loads(capsys.readouterr().out)
        assert (out["error"]["reason"] if refusal else None) == refusal, way
    assert not planted.marker.exists() and planted.name not in sys.modules

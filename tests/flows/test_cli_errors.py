"""One error style for every command (flows/cli.py `main`): one line on stderr and the exit
status of the README's table, or with --json an {"error": {"reason", "message"}} object on
stdout; never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, SNAPSHOT

from speccat.catalogue.vocabulary import REASONS
from speccat.flows.cli import EXIT_CODES, main

ALL_REASONS = {code for codes in REASONS.values() for code in codes}


def cases(tmp_path) -> list[tuple[list[str], int, str]]:
    """(argv, exit status, reason) for a missing file, a folder and a bad flag of each command."""
    missing, folder = str(tmp_path / "absent"), str(tmp_path)
    out = [
        (["census", missing + ".json"], 2, "not_found"),
        (["census", folder], 2, "not_found"),  # a folder without a config.json
        (["census", "--nope", str(SNAPSHOT / "Qwen__Qwen3-8B")], 2, "bad_argument"),
        (["price", missing + ".json"], 2, "not_found"),
        (["price", folder], 2, "not_found"),
        (["price", str(SNAPSHOT / "Qwen__Qwen3-8B"), "--tp", "two"], 2, "bad_argument"),
        (["refresh", "--limit", "0"], 2, "bad_argument"),
        (["refresh", "--limit", "-1"], 2, "bad_argument"),
        (["refresh", "--snapshot-dir", missing], 2, "not_found"),
        (["refresh", "--bogus"], 2, "bad_argument"),
        (["serve", "--check", "--file", missing], 2, "not_found"),
        (["serve", "--bogus"], 2, "bad_argument"),
    ]
    for command in (["query", "latest_specs"], ["show", "Qwen/Qwen3-8B"], ["export", str(tmp_path / "out")]):
        out += [
            (command + ["--db", missing + ".duckdb"], 3, "no_catalogue"),
            (command + ["--db", folder], 2, "bad_argument"),
            (command + ["--bogus"], 2, "bad_argument"),
        ]
    return out


def test_every_failure_is_one_line_with_the_documented_exit_status(tmp_path, capsys):
    for argv, status, reason in cases(tmp_path):
        assert main(argv) == status, argv
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith(f"speccat: {reason}: "), (argv, err)
        assert main(argv + ["--json"]) == status, argv
        out, err = capsys.readouterr()
        error = json.loads(out)["error"]
        assert error["reason"] == reason and error["message"] and err == "", argv
        assert reason in ALL_REASONS


def test_the_exit_codes_are_the_readmes_table():
    readme = (ROOT / "README.md").read_text()
    for outcome, status in EXIT_CODES.items():
        assert f"| {status} |" in readme, outcome


def test_query_refuses_a_parameter_it_does_not_read_and_names_those_it_does(capsys):
    assert main(["query", "masks_ranked", "-p", "repo_idd=x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("speccat: unknown_parameter: ") and err.count("\n") == 1
    # its own getvariable calls, and those of the view chosen_settings it reads
    assert "repo_idd (did you mean repo_id?)" in err and "it reads: cp, dropless_tok_factor, micro_batch, repo_id, seq_length, stack, tp" in err
    assert main(["query", "latest_specs", "-p", "seq=8192", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["reason"] == "unknown_parameter"


def test_version_and_examples_in_every_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("speccat 0.")
    for command in ("census", "price", "refresh", "serve", "query", "show", "export", "fit"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert f"examples:\n  speccat {command}" in capsys.readouterr().out or command == "serve"


def test_a_closed_pipe_ends_quietly(tmp_path):
    script = "import sys\nfrom speccat.flows.cli import main\nsys.exit(main(['query', 'SELECT * FROM range(100000)', '--db', sys.argv[1]]))"
    db = tmp_path / "empty.duckdb"
    import duckdb

    duckdb.connect(str(db)).close()
    done = subprocess.run(
        f"{sys.executable} -c \"{script}\" {db} | head -n 2", shell=True, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.splitlines()[0].split() == ["range"] and len(done.stdout.splitlines()) == 2
    assert done.stderr == "", done.stderr

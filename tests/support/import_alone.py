"""Import each named speccat module alone, in a child forked from a process that holds no speccat module.

Run as a script by tests/project/test_layout.py (never imported by a test):

    python tests/support/import_alone.py MODULE=PATH...

This process makes the third-party imports that the modules' sources state at their top level
(`import torch`, `from transformers import PreTrainedModel`, read with `ast`: torch, transformers,
Prefect and DuckDB take seconds each) once, checks that no speccat module came with them, and
forks one child per module, as many at a time as there are CPUs. Each child starts with no
speccat module in `sys.modules` and imports its one module, so an import that works only after
another speccat module has been imported fails in its child as in a fresh interpreter; a child
differs from a fresh interpreter only in holding those third-party modules already.

Prints a JSON object {module: the last line of its error} for the modules that failed (empty when
all imported) and exits 0; exits 1 when the preload itself brought in a speccat module.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import sys
import traceback


def third_party_imports(paths: list[str]) -> list[tuple[str, str | None]]:
    """The imports of the modules' top-level statements from outside speccat: (module, name) for
    `from module import name`, (module, None) for `import module`."""
    found = set()
    for path in paths:
        with open(path) as source:
            body = ast.parse(source.read()).body
        for node in body:
            if isinstance(node, ast.Import):
                found |= {(alias.name, None) for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module != "__future__":
                found |= {(node.module, alias.name) for alias in node.names}
    return sorted((pair for pair in found if pair[0].split(".")[0] != "speccat"), key=lambda pair: (pair[0], pair[1] or ""))


def preload(pairs: list[tuple[str, str | None]]) -> None:
    for module, name in pairs:
        try:
            loaded = importlib.import_module(module)
        except ImportError:
            continue  # the child of a module that needs it reports it
        if name is not None and not hasattr(loaded, name):  # a submodule named in a from-import
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                pass  # not a submodule: the speccat module's own import reports it


def import_in_child(name: str) -> tuple[int, int]:
    """Fork a child that imports `name` and writes its error's last line to a pipe: (pid, read end)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        status = 0
        try:
            importlib.import_module(name)
        except BaseException as err:  # every failure is reported, as a fresh interpreter's last stderr line
            os.write(write, traceback.format_exception_only(err)[-1].strip().encode()[:4000])
            status = 1
        os._exit(status)
    os.close(write)
    return pid, read


def collect(pid: int, read: int, status: int) -> str:
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode(errors="replace")
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return message if os.WEXITSTATUS(status) else ""


def main(argv: list[str]) -> int:
    modules = dict(arg.split("=", 1) for arg in argv)
    preload(third_party_imports(list(modules.values())))
    early = sorted(m for m in sys.modules if m == "speccat" or m.startswith("speccat."))
    if early:
        print(json.dumps({"(preload)": f"imported speccat modules: {', '.join(early)}"}))
        return 1
    pending = sorted(modules)
    running: dict[int, tuple[str, int]] = {}
    failed: dict[str, str] = {}
    while pending or running:
        while pending and len(running) < (os.cpu_count() or 2):
            name = pending.pop(0)
            pid, read = import_in_child(name)
            running[pid] = (name, read)
        pid, status = os.wait()
        name, read = running.pop(pid)
        error = collect(pid, read, status)
        if error:
            failed[name] = error
    print(json.dumps(failed, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The lock: the venv the suite runs in holds exactly requirements.lock, every pin hashed, torch
the CPU build, and every direct dependency's pin inside pyproject.toml's range."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def _entries() -> dict[str, tuple[str, list[str]]]:
    """name → (version, hashes) of every pin in the lock (a pin's hashes follow it on continued lines)."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in LOCK.read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = canonicalize_name(match.group(1))
            entries[current] = (match.group(2), [])
        elif current and line.strip().startswith("--hash=sha256:"):
            entries[current][1].append(line.strip().removeprefix("--hash=sha256:").rstrip(" \\"))
        elif not line.startswith(" "):
            current = None
    return entries


def test_every_pin_is_exact_and_hashed():
    entries = _entries()
    assert len(entries) > 50  # the app, Prefect's and the tests' whole tree, not a handful
    unhashed = [name for name, (_, hashes) in entries.items() if not hashes]
    assert unhashed == []
    assert all(len(h) == 64 for _, hashes in entries.values() for h in hashes)


def test_torch_is_the_cpu_build():
    version, hashes = _entries()["torch"]
    assert version.endswith("+cpu")
    assert len(hashes) == 1  # the one CPU wheel, never a CUDA build that shares its version


def test_the_venv_holds_exactly_the_lock():
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"], capture_output=True, text=True, check=True
    ).stdout
    installed = {canonicalize_name(m.group(1)): m.group(2) for m in map(PIN.match, frozen.splitlines()) if m}
    installed.pop("pip")  # the installer, pinned by the Makefile
    locked = {name: version for name, (version, _) in _entries().items()}
    assert installed == locked


def test_the_direct_dependencies_are_locked_inside_pyproject_ranges():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    locked = {name: version for name, (version, _) in _entries().items()}
    outside = [str(r) for r in wanted if locked.get(canonicalize_name(r.name)) is None or not r.specifier.contains(locked[canonicalize_name(r.name)], prereleases=True)]
    assert outside == []

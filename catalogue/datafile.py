"""Reading speccat's YAML data files: the one loader every room uses, census and catalogue alike.

`read_yaml` reads and parses a file, `parse_yaml` parses text (a `--set FIELD=VALUE` value);
both use PyYAML's safe loader. Given a `fail(reason, what)`, an unreadable file and bad YAML
raise what it returns, with reason `not_found` or `not_yaml`; without one, the OSError or
yaml.YAMLError itself. `version_of` hashes parsed content into a version, and `Loader` checks
a parsed file's mappings key by key, each refusal naming the file and the key.

This module imports no other speccat module (the vocabulary reads its file through it): a
Loader names its error type, a ReasonError subclass, itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Protocol

import yaml

Fail = Callable[[str, str], Exception]


class Readable(Protocol):
    """A file path, or a package resource (importlib.resources)."""

    def read_text(self) -> str: ...


def parse_yaml(text: str, fail: Fail | None = None) -> Any:
    """Parsed YAML text; bad YAML raises `fail("not_yaml", what)` (or yaml.YAMLError without `fail`)."""
    if fail is None:
        return yaml.safe_load(text)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise fail("not_yaml", f"not valid YAML: {err}") from None


def read_yaml(path: Path | Readable, fail: Fail | None = None) -> Any:
    """A data file parsed; a file that cannot be read raises `fail("not_found", what)` and bad
    YAML `fail("not_yaml", what)` (without `fail`, the OSError or yaml.YAMLError itself)."""
    if fail is None:
        return parse_yaml(path.read_text())
    try:
        text = path.read_text()
    except OSError as err:
        raise fail("not_found", f"cannot read: {err.strerror or err}") from None
    return parse_yaml(text, fail)


def version_of(content: Any) -> str:
    """A short hash of parsed content in file order: layout and comments never change it,
    reordering does (order is meaningful in these files)."""
    blob = json.dumps(content, separators=(",", ":"), allow_nan=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class Loader:
    """Validation of one parsed data file: every refusal names the file and the key. A subclass
    (or the instance) sets `error`, the ReasonError subclass its refusals are."""

    error: type[Exception]

    def __init__(self, source: str):
        self.source = source

    def fail(self, reason: str, key: str, what: str) -> Exception:
        return self.error(reason, f"{self.source}: {key or '(top level)'}: {what}")

    def mapping(
        self,
        key: str,
        value: Any,
        allowed: Collection[str],
        required: Collection[str] = (),
        *,
        what: str = "key",
        unknown: str = "unknown_key",
        missing: str = "missing_key",
    ) -> Mapping:
        """`value` if it is a mapping whose keys are all `allowed` and include `required`."""
        if not isinstance(value, Mapping):
            raise self.fail("bad_value", key, f"must be a mapping, got {type(value).__name__}")
        for name in value:
            if name not in allowed:
                raise self.fail(unknown, f"{key}.{name}" if key else str(name), f"unknown {what}; allowed: {', '.join(allowed)}")
        for name in required:
            if name not in value:
                raise self.fail(missing, f"{key}.{name}" if key else name, f"missing; needs every one of {', '.join(required)}")
        return value

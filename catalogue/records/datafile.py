"""Reading the catalogue's YAML data files and hashing their content into a version."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import yaml

from speccat.catalogue.errors import ReasonError


def read_yaml(path: Path, fail: Callable[[str, str], Exception]) -> Any:
    """Parse a data file; a missing file or bad YAML raises `fail(reason, what)`
    with reason `not_found` or `not_yaml`."""
    try:
        text = path.read_text()
    except OSError as err:
        raise fail("not_found", f"cannot read: {err.strerror or err}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise fail("not_yaml", f"not valid YAML: {err}") from None


def version_of(content: Any) -> str:
    """A short hash of parsed content in file order: layout and comments never change it,
    reordering does (order is meaningful in these files)."""
    blob = json.dumps(content, separators=(",", ":"), allow_nan=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class Loader:
    """Validation of one parsed data file: every refusal names the file and the key."""

    error: type[ReasonError] = ReasonError

    def __init__(self, source: str):
        self.source = source

    def fail(self, reason: str, key: str, what: str) -> ReasonError:
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

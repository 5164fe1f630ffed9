"""Reading the catalogue's YAML data files and hashing their content into a version."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml


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

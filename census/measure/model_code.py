"""When the model's own code fails where the census runs it: ModelCodeError, and where in
transformers' code it failed, told apart from a failure of the census's own code."""

from __future__ import annotations

import traceback
from pathlib import Path

from speccat.census.spec import SpecError


class ModelCodeError(SpecError):
    """The model's own code failed where the census ran it (an exception raised in transformers'
    frames, or an op that needs the tensors' values): `unsupported_layer`. run_layers may run
    the decoder again from token ids after it."""


def model_code(err: BaseException) -> str:
    """Where in the model's code an op failed: the innermost transformers frame (file:line function)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "/transformers/" in f.filename.replace("\\", "/")]
    if not frames:
        return "the model's code"
    frame = frames[-1]
    return f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} {frame.name}"


_CENSUS_DIR = str(Path(__file__).resolve().parents[1]).replace("\\", "/") + "/"


def failing_model_code(err: BaseException) -> str | None:
    """Where the model's code raised `err` (file:line function): when the innermost frame that is
    transformers' or the census's own is transformers' (torch's and the standard library's
    frames below it only carry out what it asked, and so do the census's modes passing an op
    on, unless one raised it itself); None when it is the census's."""
    owner = None
    frames = traceback.extract_tb(err.__traceback__)
    for i, frame in enumerate(frames):
        name = frame.filename.replace("\\", "/")
        passing_on = frame.name in ("__torch_function__", "__torch_dispatch__") and i < len(frames) - 1
        if name.startswith(_CENSUS_DIR) and not passing_on:
            owner = "census"
        elif "/transformers/" in name:
            owner = "transformers"
    return model_code(err) if owner == "transformers" else None


"""How Prefect stores each census task's result: cloudpickle, then zlib at level 1.

The task's result (flows/tasks.py `Analysis`: a config's prices and per-config rows as Arrow
tables) is persisted so a later night, or a publish that failed, takes it from Prefect's cache
instead of censusing again. Prefect's pickle serializer wrote it as base64 of the plain pickle:
35 MB for one config of a first night's synthetic Hub, 3.7 GB for its first 251 configs. Its
float columns repeat, and zlib at level 1 makes the same pickle 18 times smaller (1.9 MB) in half
the time plain pickling and base64 took (0.09 s against 0.19 s; bench figures in docs/refresh.md,
"Caching"). Prefect's `PickleSerializer(picklelib=...)` takes any module with `dumps` and `loads`
by its import path and records that path with each result, so results written before this one
(plain cloudpickle) still load.
"""

from __future__ import annotations

import zlib
from typing import Any

import cloudpickle

LEVEL = 1  # zlib's fastest: level 6 made the same result a fifth smaller in four to five times as long


def dumps(obj: Any) -> bytes:
    return zlib.compress(cloudpickle.dumps(obj), LEVEL)


def loads(blob: bytes) -> Any:
    return cloudpickle.loads(zlib.decompress(blob))

"""The hostile config corpus (tests/support/hostile/, expectations in expected.yaml), for every test
that feeds it to the census, the CLI or the flow.

Most cases are small files in tests/support/hostile/. The few too big to commit (a 50 MB config,
10^5 levels of nesting, a 3 MB model_type) are written at run time by GENERATORS, one per
case marked `generated: true`; `materialize(folder)` gives every case's path.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

CORPUS = Path(__file__).with_name("hostile")
EXPECTED: dict[str, dict] = yaml.safe_load((CORPUS / "expected.yaml").read_text())
CASES: list[str] = sorted(EXPECTED)

# The valid rest of a small llama config, for the generated cases to hide their payload in.
PLAIN = '"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256'


def nested(levels: int) -> bytes:
    """A llama config with one key holding `levels` nested lists."""
    return ('{"model_type": "llama", ' + PLAIN + ', "x": ' + "[" * levels + "]" * levels + "}").encode()


def fifty_megabytes() -> bytes:
    """A llama config padded with a list of zeros to 50 MiB: parsed, it would be ~26 million
    list slots (200 MB of pointers) before any check saw it."""
    head = ('{"model_type": "llama", ' + PLAIN + ', "padding": [').encode()
    tail = b"0]}"
    zeros = (50 * 2**20 - len(head) - len(tail)) // 2
    return head + b"0," * zeros + tail


def huge_model_type() -> bytes:
    return ('{"model_type": "' + "x" * 3_000_000 + '", ' + PLAIN + "}").encode()


GENERATORS: dict[str, Callable[[], bytes]] = {
    "deeply_nested.json": lambda: nested(100_000),
    "nested_600_levels.json": lambda: nested(600),
    "config_50mb.json": fifty_megabytes,
    "huge_model_type.json": huge_model_type,
}


def committed() -> list[str]:
    return [name for name in CASES if not EXPECTED[name].get("generated")]


def generated() -> list[str]:
    return [name for name in CASES if EXPECTED[name].get("generated")]


def materialize(folder: Path) -> dict[str, Path]:
    """Every case's path: the committed files where they are, the generated ones written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: CORPUS / name for name in committed()}
    for name in generated():
        paths[name] = folder / name
        paths[name].write_bytes(GENERATORS[name]())
    return paths


def _hold_until_full(mib: int) -> tuple[list[bytearray], bool]:
    """`mib` MiB held one MiB at a time (as `hog`), stopping where an allocation fails: (what is
    held, whether one failed)."""
    held = []
    try:
        for _ in range(mib):
            held.append(bytearray(b"\x01" * 2**20))
    except MemoryError:
        return held, True
    return held, False


def hog_then_fail(mib: int) -> int:
    """Holds memory one MiB at a time until an allocation fails, then, with every MiB still held,
    fails in a way that does not say so: the TypeError CPython raises for a call frame it could
    not allocate (`hook() missing 2 required positional arguments`), wrapped as the census wraps
    an unexpected error. Within `mib` MiB it returns what it got."""
    from speccat.census.spec import SpecError

    held, full = _hold_until_full(mib)
    if full:  # raised outside any handler: no MemoryError in its chain, as in the case it stands for
        raise SpecError("census_failed", "hog: TypeError: hook() missing 2 required positional arguments")
    return len(held)


def hog_then_call_deep(depth: int, spend: bool = True) -> int:
    """Spends the address-space budget to the page (unless not `spend`), then calls `depth`
    deep in C: the stack must grow once the budget is spent, as it does under the census's
    dispatch modes. Returns the depth reached.

    The deep call is json's decoder on `depth` nested lists, which recurses in C with a small
    Python object per level. Room for those objects is made before the budget is spent (lists
    made then, every other one freed after, so their arenas stay mapped): the objects find
    room, and only the stack needs new address space."""
    import json
    import mmap
    import sys

    text = "[" * depth + "]" * depth
    spare = [[None] for _ in range(4 * depth)]
    held = []
    for size in (1 << 20, mmap.PAGESIZE) if spend else ():
        try:
            while True:
                held.append(mmap.mmap(-1, size))
        except (MemoryError, OSError):  # mmap says ENOMEM as an OSError
            pass
    del spare[::2]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), depth + 1000))
    nested, reached = json.loads(text), 0
    while nested is not None:
        nested, reached = (nested[0] if nested else None), reached + 1
    return reached


def hog_then_crash(mib: int) -> int:
    """Holds memory until an allocation fails (or `mib` MiB), waits a moment, then dies of a
    SIGSEGV, as torch's native code does on an allocation that failed under fake tensors."""
    import ctypes
    import time

    _hold_until_full(mib)
    time.sleep(0.5)  # the parent samples the child's peak every few hundredths of a second
    return ctypes.string_at(0)  # reads address 0


def refuse_after_hogging(mib: int) -> int:
    """Holds memory until an allocation fails (or `mib` MiB), then refuses with a stated reason."""
    from speccat.census.spec import SpecError

    held, _ = _hold_until_full(mib)
    raise SpecError("unsupported_layer", f"refused holding {len(held)} MiB")


def hog(mib: int) -> int:
    """A census gone wild, for the memory budget's tests: holds `mib` MiB, one MiB at a time
    (each page written, so it is really used), and returns how many it got."""
    held = []
    for _ in range(mib):
        held.append(bytearray(b"\x01" * 2**20))
    return len(held)

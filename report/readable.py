"""Settings, layouts and quantities written as people read them: `seq 8192 · tp 2 · sp ·
flash · bf16 · transformers`, never a setting's hash."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GIB = 2**30
MIB = 2**20


def setting(row: Mapping[str, Any]) -> str:
    """A setting of the grid in one line. Reads either the settings table's field names
    (seq_length, tp, ...) or the views' readable ones (seq_length_tokens, tp_ranks, ...)."""

    def field(*names: str) -> Any:
        return next((row[n] for n in names if n in row and row[n] is not None), None)

    parts = [f"seq {field('seq_length', 'seq_length_tokens')}"]
    micro = field("micro_batch", "micro_batch_count")
    if micro not in (None, 1):
        parts.append(f"mb {micro}")
    parts.append(f"tp {field('tp', 'tp_ranks')}")
    cp = field("cp", "cp_ranks")
    if cp not in (None, 1):
        parts.append(f"cp {cp} {field('cp_algo') or ''}".rstrip())
    if field("sequence_parallel"):
        parts.append("sp")
    if field("flash_attention"):
        parts.append("flash")
    if field("dtype"):
        parts.append(str(field("dtype")))
    if field("stack"):
        parts.append(str(field("stack")))
    return " · ".join(parts)


def layout(tp: int, pp: int, dp: int, zero: int, cp: int = 1, ep: int = 1) -> str:
    """A parallel layout: `tp 2 · pp 4`, `tp 1 · cp 8 · dp 8 · ZeRO-3`."""
    parts = [f"tp {tp}"]
    if cp > 1:
        parts.append(f"cp {cp}")
    if ep > 1:
        parts.append(f"ep {ep}")
    if pp > 1:
        parts.append(f"pp {pp}")
    if dp > 1:
        parts.append(f"dp {dp}")
    if zero:
        parts.append(f"ZeRO-{zero}")
    return " · ".join(parts)


def nbytes(value: float | None) -> str:
    """Bytes in the largest binary unit that keeps the number at least 1: `1.50 GiB`."""
    if value is None:
        return ""
    for unit, size in (("TiB", 2**40), ("GiB", GIB), ("MiB", MIB), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f} B"


def count(value: float | None) -> str:
    """A large count in words of thousands: `8.03 B`, `751 M`."""
    if value is None:
        return ""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:g}"

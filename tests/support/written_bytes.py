"""What a publish wrote, read off the files it left: the test of an incremental publish and the
Hub benchmark (bench/bench_hub.py) measure it the same way.

`files_of(roots)` before and after a night; `written(before, after)` counts every file that is new
(or a new inode at the same path: a file renamed over the old one, as the single DuckDB file is
published) whole, and what each kept file grew by. A rewrite in place of a kept file's pages is
not seen: that is the lake's catalog database, whose growth is what the new snapshot's rows take.
"""

from __future__ import annotations

from pathlib import Path


def files_of(*roots: Path) -> dict[str, tuple[int, int]]:
    """path -> (inode, size) of every file under `roots` (a root may be one file, or absent)."""
    out = {}
    for root in roots:
        if root.is_file():
            paths = [root]
        else:
            paths = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
        for path in paths:
            stat = path.stat()
            out[str(path)] = (stat.st_ino, stat.st_size)
    return out


def written(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> int:
    """Bytes written between two `files_of` (module docstring)."""
    total = 0
    for path, (inode, size) in after.items():
        old = before.get(path)
        total += size if old is None or old[0] != inode else max(0, size - old[1])
    return total

"""Paths as the kernel sees them."""

from __future__ import annotations

import os
from pathlib import Path

_PROC_FD = "/proc/self/fd/"
_GONE = " (deleted)"


def resolved(path: str | os.PathLike[str]) -> Path:
    """``Path(path).resolve()``: absolute, symlinks followed, normalised. For a path that
    exists, asked of the kernel: one ``O_PATH`` open (which opens nothing for reading, so a
    FIFO or a device is safe) and one readlink in /proc, about 8 µs, where ``resolve`` looks
    at each part of the path in turn (20-40 µs). A run resolves about ten paths as it
    starts. Anything else (no such path, a symlink loop, no /proc) goes to ``resolve``, whose
    answer or error is the one to give."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (OSError, AttributeError, ValueError):  # no O_PATH off Linux; a NUL in the path
        return Path(path).resolve()
    try:
        where = os.readlink(f"{_PROC_FD}{fd}")  # noqa: PTH115 (a tenth of the cost)
    except OSError:
        where = ""
    finally:
        os.close(fd)
    if not where.startswith("/") or where.endswith(_GONE):  # unreachable, or deleted meanwhile
        return Path(path).resolve()
    return Path(where)

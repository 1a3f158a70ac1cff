"""Going on with an existing runlog (``JsonlRunLog.reopen``): where its last whole line is,
and the file object that replaces its torn or ending tail in one atomic step."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

from .encoding import read_line


def last_line(data: bytes) -> tuple[int, Any]:
    """Where the last line of ``data`` that holds JSON starts, and its value (None: there is
    none); blank and unreadable lines after it are passed over."""
    stop = len(data)
    while stop > 0:
        start = data.rfind(b"\n", 0, stop - 1) + 1
        with contextlib.suppress(ValueError):
            if data[start:stop].strip():
                return start, read_line(data[start:stop])
        stop = start
    return 0, None


class ReplacedTail(io.BufferedIOBase):
    """The bytes of a reopened runlog whose end, from offset ``keep`` on, gives way to what is
    written next. Nothing changes until the first flush, which writes the first ``keep`` bytes
    of the log and the new ones to a file beside it, syncs it to disk and renames it over the
    log (``_replace``): a reader or a crash sees the whole old log or the whole new one, never
    a mix. Later writes append to the new log."""

    def __init__(self, path: Path, keep: int) -> None:
        super().__init__()
        self._path, self._keep = path, keep
        self._pending = bytearray()
        self._out: io.BufferedWriter | None = None

    @property
    def name(self) -> str:
        return str(self._path)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self._out is not None:
            return self._out.write(data)
        self._pending += data
        return len(data)

    def flush(self) -> None:
        if self._out is not None:
            self._out.flush()
        elif self._pending:
            self._out = _replace(self._path, self._keep, bytes(self._pending))
            self._pending.clear()

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
        finally:
            out, self._out = self._out, None
            if out is not None:
                out.close()
            super().close()


def _replace(path: Path, keep: int, tail: bytes) -> io.BufferedWriter:
    """Replace the file at ``path`` with its first ``keep`` bytes followed by ``tail``,
    atomically (a new file beside it, fsync, rename over, fsync of the folder); the new file is
    returned open for appending."""
    new = path.with_name(f".{path.name}.new")  # a leftover of a killed attempt is overwritten
    with path.open("rb") as source, new.open("wb") as target:
        left = keep
        while left > 0 and (chunk := source.read(min(left, 1 << 20))):
            target.write(chunk)
            left -= len(chunk)
        if left:
            raise OSError(f"{path} is shorter than when it was reopened")
        target.write(tail)
        target.flush()
        os.fsync(target.fileno())
    new.replace(path)
    with contextlib.suppress(OSError):  # the rename made durable, where the system allows it
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    return path.open("ab")

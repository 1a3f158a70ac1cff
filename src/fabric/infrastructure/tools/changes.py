"""What a file tool changed, for the people reading the runlog: a unified diff per file
(``tool_result.changes``, see ``ToolContext.changes``). The model never sees it.

A tool takes a ``Snapshot`` of the file as it was (``read_before``) before it writes, and
notes the change after (``note_change``, with a snapshot of what it wrote). Both cost nothing
when nobody records (``ctx.changes`` is None). Diffs are capped: files over
``MAX_DIFFED_BYTES`` get a one-line note instead of a diff (difflib is quadratic at worst, and
write_file runs on the event loop), and a diff over ``MAX_DIFF_CHARS`` is cut at a line end
with a note saying how much is left out.
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Iterator

from msgspec import Struct

from fabric.application.context import FileChange, ToolContext
from fabric.domain.errors import FabricError

from .workspace import Workspace

MAX_DIFF_CHARS = 20_000
"""A diff longer than this is cut (at a line end) with a note."""
MAX_DIFFED_BYTES = 256_000
"""Either side of a file larger than this gets a note instead of a line diff."""
_CONTEXT_LINES = 3
_NO_NEWLINE = "\\ No newline at end of file\n"


class Snapshot(Struct, frozen=True):
    """A file before or after a tool call wrote it: whether it exists, its bytes (None when
    too large to diff, or unreadable) and its size."""

    exists: bool
    data: bytes | None
    size: int

    @classmethod
    def of(cls, data: bytes | None, size: int | None = None) -> Snapshot:
        """A file that holds ``data`` (None: more than is diffed, ``size`` bytes)."""
        if data is not None and len(data) > MAX_DIFFED_BYTES:
            return cls(True, None, len(data))
        return cls(True, data, len(data) if data is not None else size or 0)

    def appended(self, data: bytes) -> Snapshot:
        """This file with ``data`` added at its end."""
        if self.data is None:
            return Snapshot(True, None, self.size + len(data))
        return Snapshot.of(self.data + data)


MISSING = Snapshot(False, b"", 0)


def read_before(ctx: ToolContext, ws: Workspace, path: str) -> Snapshot | None:
    """``path`` (workspace-relative) as it is now, for ``note_change``; None when nobody
    records changes (nothing is read then)."""
    if ctx.changes is None:
        return None
    try:
        with ws.open(path) as file:
            size = file.info.st_size
            if not stat.S_ISREG(file.info.st_mode) or size > MAX_DIFFED_BYTES:
                return Snapshot(True, None, size)
            data = os.pread(file.fd, MAX_DIFFED_BYTES + 1, 0)
    except FileNotFoundError:
        return MISSING
    except (OSError, FabricError):  # there, but not ours to read: the write will say more
        return Snapshot(True, None, 0)
    return Snapshot.of(data)


def note_change(ctx: ToolContext, rel: str, before: Snapshot | None, after: Snapshot) -> None:
    """Record that the call changed ``rel`` from ``before`` to ``after`` (``MISSING``:
    deleted), if anyone records and anything changed."""
    if ctx.changes is None or before is None:
        return
    same = before.data is not None and before.data == after.data
    if before.exists == after.exists and (same or not before.exists):
        return
    ctx.changes.append(
        FileChange(
            rel,
            unified_diff(rel, before, after),
            created=not before.exists,
            deleted=not after.exists,
        )
    )


def unified_diff(rel: str, before: Snapshot, after: Snapshot) -> str:
    """The change as a unified diff (``--- a/rel``, ``+++ b/rel``; ``/dev/null`` for a side
    that does not exist), or a note when a side is binary or too large."""
    old, new = before.data, after.data
    if old is None or new is None:
        return f"[{rel}: {_size(before.size)} -> {_size(after.size)}; too large to show a diff]\n"
    if b"\0" in old[:8192] or b"\0" in new[:8192]:
        return f"[{rel}: binary file, {_size(before.size)} -> {_size(after.size)}; no diff shown]\n"
    lines = difflib.unified_diff(
        _lines(old),
        _lines(new),
        fromfile=f"a/{rel}" if before.exists else "/dev/null",
        tofile=f"b/{rel}" if after.exists else "/dev/null",
        n=_CONTEXT_LINES,
    )
    return _capped(_with_newline_notes(lines))


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def _with_newline_notes(lines: Iterator[str]) -> Iterator[str]:
    """Diff lines, each ending in a newline; a file's last line without one is followed by
    the note ``diff`` and ``git`` print for it."""
    for line in lines:
        if line.endswith(("\n", "\r")):
            yield line
        else:
            yield line + "\n" + _NO_NEWLINE


def _capped(lines: Iterator[str]) -> str:
    kept: list[str] = []
    size = 0
    for line in lines:
        if size + len(line) > MAX_DIFF_CHARS:
            left = 1 + sum(1 for _ in lines)
            kept.append(
                f"[... diff cut at {MAX_DIFF_CHARS:,} characters: {left:,} more diff "
                "line(s) not shown ...]\n"
            )
            break
        kept.append(line)
        size += len(line)
    return "".join(kept)


def _size(count: int) -> str:
    return f"{count:,} bytes"

"""File tools confined to the workspace: read, write, list, search (``edit.py``: edit).

read_file numbers the lines it shows (``  12| text``), as search_files and edit_file number
them; a path a model made up is forgiven or answered with the closest existing ones
(``near_paths``)."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import stat
import time
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import IO, TYPE_CHECKING, Annotated

if TYPE_CHECKING:
    import regex

from fabric.application.context import ToolContext
from fabric.domain.errors import SandboxError, ToolError

from .changes import Snapshot, note_change, read_before
from .function_tool import PACK_SETTING, reads_only, runs_inline
from .near_paths import open_existing, writable_path
from .snippets import number_lines
from .walk import walk
from .workspace import Opened, Workspace

EMPTY = "(empty)"
"""What list_files says of a folder with nothing in it."""

_COUNT_LINES_UP_TO = 5_000_000
"""read_file counts all lines of files up to this size; of bigger ones only up to the window."""
_MAX_READ_CHARS = 500_000
_MAX_SEARCH_FILE_BYTES = 2_000_000
_SEARCH_SECONDS = 10
_INLINE_READ_BYTES = 1_000_000
_WHOLE_READ_BYTES = 256_000
"""read_file reads files up to this size in one go (``_small_window``)."""
_MAX_LINE = 400

MIN_READ_LINES = 40
"""The narrowest window read_file shows: small models ask for two lines at a time and spend
their steps paging."""


def _is_binary(fd: int) -> bool:
    return b"\x00" in os.pread(fd, 8192, 0)


def _text(fd: int) -> IO[str]:
    """The open file ``fd`` as text, from its start; closing it leaves ``fd`` open."""
    return open(fd, encoding="utf-8", errors="replace", closefd=False)


@reads_only
async def read_file(ctx: ToolContext, path: str, start_line: int = 1, max_lines: int = 400) -> str:
    """Read a text file from the workspace.

    Args:
        path: File path relative to the workspace root.
        start_line: First line to return (1-based).
        max_lines: How many lines to return at most.
    """
    try:
        with Workspace(ctx) as ws, open_existing(ws, ctx, path, "read_file") as (file, note):
            if not stat.S_ISREG(file.info.st_mode):
                raise ToolError(f"{path!r} is not a file", hint="use list_files to see what exists")
            if file.info.st_size <= _INLINE_READ_BYTES:  # quick: no worker thread needed
                return note + _read_window(file, path, start_line, max_lines)
            return note + await asyncio.to_thread(_read_window, file, path, start_line, max_lines)
    except OSError as exc:  # it could not be opened
        raise ToolError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _read_window(file: Opened, path: str, start_line: int, max_lines: int) -> str:
    # at least MIN_READ_LINES, whatever max_lines says; the description stays as every
    # recorded runlog has it (ADR 0017), the output says which lines it shows
    first, count = max(start_line, 1), max(max_lines, MIN_READ_LINES)
    large = file.info.st_size > _COUNT_LINES_UP_TO
    chosen: list[str] = []
    chars = total = cut = 0
    more = False
    window = _small_window(file, path, first, count)
    if window is not None:
        chosen, total = window
        more = first - 1 + len(chosen) < total
        return _shown(path, start_line, first, chosen, total, 0, more, large=False)
    try:
        if _is_binary(file.fd):
            raise ToolError(f"{path!r} looks binary; read_file only reads text")
        # Lines as search_files numbers them (\n, \r\n or \r), read one at a time so a big
        # file costs only the window asked for.
        with _text(file.fd) as fh:
            for total, line in enumerate(fh, 1):
                if total < first:
                    continue
                if len(chosen) < count and chars < _MAX_READ_CHARS:
                    if len(line) > _MAX_READ_CHARS - chars:
                        cut, line = total, line[: _MAX_READ_CHARS - chars] + "\n"
                    chosen.append(line)
                    chars += len(line)
                    continue
                more = True
                if large:
                    break
    except OSError as exc:
        raise ToolError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    chosen = [line.removesuffix("\n") for line in chosen]
    return _shown(path, start_line, first, chosen, total, cut, more, large=large)


def _small_window(file: Opened, path: str, first: int, count: int) -> tuple[list[str], int] | None:
    """The lines (without ends) ``_read_window`` shows of a small file, and how many it has,
    from one read and one split: the line-by-line loop costs ~10x more for a file of a few
    dozen lines, read on most steps. None when the loop must decide: a bigger file, one that
    grew meanwhile, or a window that reaches ``_MAX_READ_CHARS``."""
    if file.info.st_size > _WHOLE_READ_BYTES:
        return None
    try:
        data = os.pread(file.fd, file.info.st_size + 1, 0)
    except OSError as exc:
        raise ToolError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    if len(data) > file.info.st_size:
        return None
    if b"\x00" in data[:8192]:  # what _is_binary reads
        raise ToolError(f"{path!r} looks binary; read_file only reads text")
    # As the text file object reads it: UTF-8 with replacements, \r\n and \r read as \n.
    text = data.decode("utf-8", "replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines[-1] == "":  # a final line end starts no new line (and an empty file has none)
        lines.pop()
    window = lines[first - 1 : first - 1 + count]
    if sum(map(len, window)) + len(window) >= _MAX_READ_CHARS:
        return None
    return window, len(lines)


def _shown(
    path: str,
    start_line: int,
    first: int,
    chosen: list[str],
    total: int,
    cut: int,
    more: bool,
    *,
    large: bool,
) -> str:
    """The window as read_file answers it: numbered lines and what comes after them."""
    if first > 1 and not chosen:
        raise ToolError(
            f"{path!r} has {total} lines; start_line={start_line} is past the end",
            hint="call read_file with a smaller start_line",
        )
    if not chosen:
        return "(the file is empty)"
    text = number_lines(chosen, first)
    last = first + len(chosen) - 1
    if cut:
        text += f"[... line {cut} is longer than {_MAX_READ_CHARS} characters; cut here ...]\n"
    if more and large:
        text += (
            f"\n[... lines {first}-{last} shown; the file is large and goes on; call read_file "
            f"with start_line={last + 1} for more, or search_files to find the part you need ...]"
        )
    elif more:
        text += (
            f"\n[... lines {first}-{last} of {total} shown; "
            f"call read_file with start_line={last + 1} for more ...]"
        )
    return text


@runs_inline
def write_file(
    ctx: ToolContext,
    path: str,
    content: str,
    append: bool = False,
    replace_files: Annotated[bool, PACK_SETTING] = True,
) -> str:
    """Write a text file in the workspace, creating folders as needed.

    Args:
        path: File path relative to the workspace root.
        content: The full text to write (or to add at the end, with append).
        append: Add to the end of the file instead of replacing it.
    """
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(
            f"content holds a character that cannot be written as UTF-8 ({exc.reason})",
            hint="send plain text",
        ) from None
    try:
        with Workspace(ctx) as ws:
            path = writable_path(ws, ctx, path)
            unchanged = not append and _holds(ws, path, data)
            before = None if unchanged else read_before(ctx, ws, path)
            # creating only: opened without emptying, so every refusal of a place (host code,
            # protected, kept) comes first and an existing file is left whole
            create = not append and not replace_files
            with (
                ws.open_for_writing(path, append=append or create) as file,
                open(file.fd, "wb", closefd=False) as fh,
            ):
                if create and file.info.st_size and not unchanged:
                    raise _exists(ws, file.rel, file.info.st_size)
                if not (create and unchanged):
                    fh.write(data)
            if before is not None:
                after = before.appended(data) if append else Snapshot.of(data)
                note_change(ctx, file.rel, before, after)
    except OSError as exc:
        raise ToolError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    if unchanged:
        return (
            f"wrote {len(data)} bytes to {file.rel}: no change, the file already held exactly "
            "this text"
        )
    verb = "appended" if append else "wrote"
    return f"{verb} {len(data)} bytes to {file.rel}"


def _exists(ws: Workspace, rel: str, size: int) -> ToolError:
    """Why write_file, creating files only, leaves an existing one as it is (a small model
    "fixes" a file by writing one line over all of it)."""
    shown = f"{size:,} bytes"
    if size <= _MAX_SEARCH_FILE_BYTES:
        try:
            with ws.open(rel) as file:
                lines = os.pread(file.fd, size, 0).count(b"\n") or 1
            shown = f"{lines} lines"
        except (OSError, SandboxError):
            pass
    return ToolError(
        f"{rel} already exists ({shown}): in this pack write_file only creates new files, so "
        "that the rest of a file is never lost",
        hint=f"change {rel} with edit_file: the lines to change in old, their new text in new",
    )


def _holds(ws: Workspace, path: str, data: bytes) -> bool:
    """Whether ``path`` is a file that holds exactly ``data`` already."""
    try:
        with ws.open(path) as file:
            if not stat.S_ISREG(file.info.st_mode) or file.info.st_size != len(data):
                return False
            return os.pread(file.fd, len(data) + 1, 0) == data
    except (OSError, SandboxError):
        return False


@reads_only
def list_files(
    ctx: ToolContext, path: str = ".", recursive: bool = False, max_entries: int = 500
) -> str:
    """List files and folders in the workspace; folders end with '/'.

    Args:
        path: Folder relative to the workspace root.
        recursive: Also list everything below (skips .git, __pycache__, node_modules, venvs).
        max_entries: Stop after this many entries.
    """
    entries: list[str] = []
    try:
        with (
            Workspace(ctx) as ws,
            open_existing(ws, ctx, path, "list_files", folder=True) as (folder, note),
        ):
            for entry in walk(ws, folder, recursive, files_only=False):
                entries.append(entry)
                if len(entries) >= max_entries:
                    entries.append(f"[... stopped at {max_entries} entries ...]")
                    break
    except OSError:  # it could not be opened as a folder (the walk skips what it cannot read)
        raise ToolError(
            f"{path!r} is not a folder", hint="list '.' to see the workspace root"
        ) from None
    return note + ("\n".join(entries) if entries else EMPTY)


@reads_only
def search_files(
    ctx: ToolContext,
    pattern: str,
    path: str = ".",
    glob: str | None = None,
    regex: bool = False,
    case_sensitive: bool = False,
    max_results: int = 100,
) -> str:
    """Find text in the workspace's files; answers 'path:line: text' for each matching line.

    Args:
        pattern: Text to find (a regular expression when regex is true).
        path: Folder (or file) to search, relative to the workspace root.
        glob: Only search files whose name matches, e.g. '*.py'.
        regex: Treat pattern as a Python regular expression.
        case_sensitive: Match case exactly.
        max_results: Stop after this many matching lines.
    """
    import regex as regex_lib  # only searches need it; importing it costs ~8 ms

    flags = regex_lib.V0 if case_sensitive else regex_lib.V0 | regex_lib.IGNORECASE
    try:
        matcher = regex_lib.compile(pattern if regex else regex_lib.escape(pattern), flags)
    except regex_lib.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    deadline = time.monotonic() + _SEARCH_SECONDS
    results: list[str] = []
    too_big: list[str] = []
    with Workspace(ctx) as ws:
        for rel in _searched(ws, path):
            if glob and not fnmatch.fnmatch(PurePosixPath(rel).name, glob):
                continue
            try:
                with ws.open(rel) as file:
                    # Only regular files: reading a FIFO or a device would block or never end.
                    if not stat.S_ISREG(file.info.st_mode):
                        continue
                    if file.info.st_size > _MAX_SEARCH_FILE_BYTES:
                        too_big.append(rel)
                        continue
                    if _is_binary(file.fd):
                        continue
                    with _text(file.fd) as fh:
                        for number, line in enumerate(fh, 1):
                            if _matches(matcher, line[:4096], deadline):
                                results.append(f"{rel}:{number}: {line.rstrip()[:_MAX_LINE]}")
                                if len(results) >= max_results:
                                    results.append(f"[... stopped at {max_results} matches ...]")
                                    return "\n".join(results)
            except (SandboxError, OSError):
                continue  # a symlink out, a protected file, unreadable or gone: skip it
    if not results:
        results.append(f"no matches for {pattern!r}")
    if too_big:
        shown = ", ".join(too_big[:10]) + (", ..." if len(too_big) > 10 else "")
        results.append(
            f"[not searched: {len(too_big)} file(s) over {_MAX_SEARCH_FILE_BYTES // 1_000_000} MB "
            f"({shown}); page through them with read_file]"
        )
    return "\n".join(results)


def _matches(matcher: regex.Pattern[str], line: str, deadline: float) -> bool:
    """Whether ``matcher`` finds something in ``line``. A search past the deadline (a pattern
    that backtracks without end) is reported to the model instead of hanging the run."""
    left = deadline - time.monotonic()
    try:
        if left > 0:
            return matcher.search(line, timeout=left, concurrent=True) is not None
    except TimeoutError:
        pass
    raise ToolError(
        f"the search took longer than {_SEARCH_SECONDS} s",
        hint="use a simpler pattern (avoid nested repeats like (a+)+), a literal string, "
        "or a narrower path or glob",
    )


def _searched(ws: Workspace, path: str) -> Iterator[str]:
    """The files search_files looks at: ``path`` itself, or every file below it."""
    try:
        with ws.open(path) as start:
            if stat.S_ISREG(start.info.st_mode):
                yield start.rel
            elif stat.S_ISDIR(start.info.st_mode):
                yield from walk(ws, start, True, files_only=True)
    except OSError:
        return  # nothing there: nothing found

"""File tools confined to the workspace: read, write, list, search."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import regex

from fabric.application.context import ToolContext
from fabric.domain.errors import SandboxError, ToolError

from .function_tool import runs_inline
from .workspace import check_unprotected, display, resolve_in_workspace

_SKIP_DIRS = {".git", "__pycache__", "node_modules", ".venv", "venv", ".mypy_cache", ".tox"}
_COUNT_LINES_UP_TO = 5_000_000
"""read_file counts all lines of files up to this size; of bigger ones only up to the window."""
_MAX_READ_CHARS = 500_000
_MAX_SEARCH_FILE_BYTES = 2_000_000
_SEARCH_SECONDS = 10
_INLINE_READ_BYTES = 1_000_000
_MAX_LINE = 400


def _is_binary(path: Path) -> bool:
    with path.open("rb") as fh:
        return b"\x00" in fh.read(8192)


async def read_file(ctx: ToolContext, path: str, start_line: int = 1, max_lines: int = 400) -> str:
    """Read a text file from the workspace.

    Args:
        path: File path relative to the workspace root.
        start_line: First line to return (1-based).
        max_lines: How many lines to return at most.
    """
    target = resolve_in_workspace(ctx.workspace, path)
    check_unprotected(target, ctx.protected)
    if not target.is_file():
        raise ToolError(f"{path!r} is not a file", hint="use list_files to see what exists")
    if target.stat().st_size <= _INLINE_READ_BYTES:  # quick: no worker thread needed
        return _read_window(target, path, start_line, max_lines)
    return await asyncio.to_thread(_read_window, target, path, start_line, max_lines)


def _read_window(target: Path, path: str, start_line: int, max_lines: int) -> str:
    first, count = max(start_line, 1), max(max_lines, 1)
    large = target.stat().st_size > _COUNT_LINES_UP_TO
    chosen: list[str] = []
    chars = total = cut = 0
    more = False
    try:
        if _is_binary(target):
            raise ToolError(f"{path!r} looks binary; read_file only reads text")
        # Lines as search_files numbers them (\n, \r\n or \r), read one at a time so a big
        # file costs only the window asked for.
        with target.open(encoding="utf-8", errors="replace") as fh:
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
    if first > 1 and not chosen:
        raise ToolError(
            f"{path!r} has {total} lines; start_line={start_line} is past the end",
            hint="call read_file with a smaller start_line",
        )
    text = "".join(chosen)
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
def write_file(ctx: ToolContext, path: str, content: str, append: bool = False) -> str:
    """Write a text file in the workspace, creating folders as needed.

    Args:
        path: File path relative to the workspace root.
        content: The full text to write (or to add at the end, with append).
        append: Add to the end of the file instead of replacing it.
    """
    target = resolve_in_workspace(ctx.workspace, path)
    check_unprotected(target, ctx.protected)
    if ".git" in Path(display(ctx.workspace, target)).parts:
        raise SandboxError(
            f"{path!r} is inside .git/, which tools may not change (a hook or config written "
            "there would run later, outside the sandbox)",
            hint="change the repository with git commands through shell",
        )
    if target.is_dir():
        raise ToolError(f"{path!r} is a directory", hint="give a file path")
    if target.exists() and not target.is_file():  # a FIFO or device would block or worse
        raise ToolError(f"{path!r} is not a regular file", hint="write to a normal file")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a" if append else "w", encoding="utf-8") as fh:
            fh.write(content)
    except OSError as exc:
        raise ToolError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    verb = "appended" if append else "wrote"
    return f"{verb} {len(content.encode())} bytes to {display(ctx.workspace, target)}"


def list_files(
    ctx: ToolContext, path: str = ".", recursive: bool = False, max_entries: int = 500
) -> str:
    """List files and folders in the workspace; folders end with '/'.

    Args:
        path: Folder relative to the workspace root.
        recursive: Also list everything below (skips .git, __pycache__, node_modules, venvs).
        max_entries: Stop after this many entries.
    """
    folder = resolve_in_workspace(ctx.workspace, path)
    if not folder.is_dir():
        raise ToolError(f"{path!r} is not a folder", hint="list '.' to see the workspace root")
    entries: list[str] = []
    for entry in _walk(ctx.workspace, folder, recursive, files_only=False):
        entries.append(entry)
        if len(entries) >= max_entries:
            entries.append(f"[... stopped at {max_entries} entries ...]")
            break
    return "\n".join(entries) if entries else "(empty)"


def search_files(
    ctx: ToolContext,
    pattern: str,
    path: str = ".",
    glob: str | None = None,
    regex: bool = False,
    case_sensitive: bool = False,
    max_results: int = 100,
) -> str:
    """Search text files in the workspace for a string or regular expression.

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
    start = resolve_in_workspace(ctx.workspace, path)
    files = [display(ctx.workspace, start)] if start.is_file() else None
    results: list[str] = []
    too_big: list[str] = []
    for rel in files or _walk(ctx.workspace, start, True, files_only=True):
        if glob and not fnmatch.fnmatch(Path(rel).name, glob):
            continue
        try:
            target = resolve_in_workspace(ctx.workspace, rel)
            check_unprotected(target, ctx.protected)
        except SandboxError:
            continue  # a symlink that points out of the workspace
        # Only regular files: opening a FIFO or a device would block or never end.
        if not target.is_file():
            continue
        if target.stat().st_size > _MAX_SEARCH_FILE_BYTES:
            too_big.append(rel)
            continue
        try:
            if _is_binary(target):
                continue
            with target.open(encoding="utf-8", errors="replace") as fh:
                for number, line in enumerate(fh, 1):
                    if _matches(matcher, line[:4096], deadline):
                        results.append(f"{rel}:{number}: {line.rstrip()[:_MAX_LINE]}")
                        if len(results) >= max_results:
                            results.append(f"[... stopped at {max_results} matches ...]")
                            return "\n".join(results)
        except OSError:
            continue  # unreadable (permissions, vanished): skip it like a binary file
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


def _walk(root: Path, folder: Path, recursive: bool, *, files_only: bool) -> Iterator[str]:
    """Workspace-relative paths below ``folder``, sorted, never following symlinked folders."""
    for current, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        here = Path(current)
        if not files_only:
            yield from (display(root, here / d) + "/" for d in dirs)
        yield from (display(root, here / n) for n in sorted(names))
        if not recursive:
            return

"""File tools confined to the workspace: read, write, list, search."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path

from fabric.application.context import ToolContext
from fabric.domain.errors import SandboxError, ToolError

from .workspace import check_writable, display, resolve_in_workspace

_SKIP_DIRS = {".git", "__pycache__", "node_modules", ".venv", "venv", ".mypy_cache", ".tox"}
_MAX_READ_BYTES = 5_000_000
_MAX_SEARCH_FILE_BYTES = 2_000_000
_MAX_LINE = 400


def _is_binary(path: Path) -> bool:
    with path.open("rb") as fh:
        return b"\x00" in fh.read(8192)


def read_file(ctx: ToolContext, path: str, start_line: int = 1, max_lines: int = 400) -> str:
    """Read a text file from the workspace.

    Args:
        path: File path relative to the workspace root.
        start_line: First line to return (1-based).
        max_lines: How many lines to return at most.
    """
    target = resolve_in_workspace(ctx.workspace, path)
    if not target.is_file():
        raise ToolError(f"{path!r} is not a file", hint="use list_files to see what exists")
    if target.stat().st_size > _MAX_READ_BYTES:
        raise ToolError(
            f"{path!r} is larger than {_MAX_READ_BYTES} bytes",
            hint="use search_files to find the part you need",
        )
    if _is_binary(target):
        raise ToolError(f"{path!r} looks binary; read_file only reads text")
    lines = target.read_text("utf-8", errors="replace").splitlines(keepends=True)
    start = max(start_line, 1) - 1
    chosen = lines[start : start + max(max_lines, 1)]
    text = "".join(chosen)
    end = start + len(chosen)
    if end < len(lines):
        text += (
            f"\n[... lines {start + 1}-{end} of {len(lines)} shown; "
            f"call read_file with start_line={end + 1} for more ...]"
        )
    return text


def write_file(ctx: ToolContext, path: str, content: str, append: bool = False) -> str:
    """Write a text file in the workspace, creating folders as needed.

    Args:
        path: File path relative to the workspace root.
        content: The full text to write (or to add at the end, with append).
        append: Add to the end of the file instead of replacing it.
    """
    target = resolve_in_workspace(ctx.workspace, path)
    check_writable(target, ctx.protected)
    if target.is_dir():
        raise ToolError(f"{path!r} is a directory", hint="give a file path")
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a" if append else "w", encoding="utf-8") as fh:
        fh.write(content)
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
    flags = 0 if case_sensitive else re.IGNORECASE
    try:
        matcher = re.compile(pattern if regex else re.escape(pattern), flags)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    start = resolve_in_workspace(ctx.workspace, path)
    files = [display(ctx.workspace, start)] if start.is_file() else None
    results: list[str] = []
    for rel in files or _walk(ctx.workspace, start, True, files_only=True):
        if glob and not fnmatch.fnmatch(Path(rel).name, glob):
            continue
        try:
            target = resolve_in_workspace(ctx.workspace, rel)
        except SandboxError:
            continue  # a symlink that points out of the workspace
        if target.stat().st_size > _MAX_SEARCH_FILE_BYTES or _is_binary(target):
            continue
        with target.open(encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                if matcher.search(line[:4096]):
                    results.append(f"{rel}:{number}: {line.rstrip()[:_MAX_LINE]}")
                    if len(results) >= max_results:
                        results.append(f"[... stopped at {max_results} matches ...]")
                        return "\n".join(results)
    return "\n".join(results) if results else f"no matches for {pattern!r}"


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

"""Walking the workspace's folders without following symlinks out (list_files, search_files,
and the path suggestions for a path that does not exist)."""

from __future__ import annotations

import os
from collections.abc import Iterator

from .workspace import Opened, Workspace

SKIP_DIRS = frozenset(
    {".git", "__pycache__", "node_modules", ".venv", "venv", ".mypy_cache", ".tox"}
)
"""Folders a walk lists but never enters."""
_MAX_DEPTH = 100
"""Folders deeper than this in the workspace are not walked."""
_SUBFOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def walk(ws: Workspace, folder: Opened, recursive: bool, *, files_only: bool) -> Iterator[str]:
    """Workspace-relative paths below the open ``folder``, sorted; each folder is entered by
    its fd with O_NOFOLLOW, so symlinked folders are listed, never walked into. Protected
    folders and those that cannot be read are not entered either."""
    try:
        with os.scandir(folder.fd) as found:
            entries = sorted((e.name, _is_dir(e)) for e in found)
    except OSError:
        return
    prefix = "" if folder.rel == "." else f"{folder.rel}/"
    dirs = [name for name, is_dir in entries if is_dir and name not in SKIP_DIRS]
    if not files_only:
        yield from (f"{prefix}{name}/" for name in dirs)
    yield from (prefix + name for name, is_dir in entries if not is_dir)
    if not recursive or prefix.count("/") >= _MAX_DEPTH:
        return
    for name in dirs:
        try:
            fd = os.open(name, _SUBFOLDER, dir_fd=folder.fd)
        except OSError:
            continue  # a symlink (or swapped for one meanwhile), or gone
        try:
            if not ws.is_protected(fd):
                below = Opened(fd, prefix + name, os.fstat(fd))
                yield from walk(ws, below, recursive, files_only=files_only)
        finally:
            os.close(fd)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """A folder, or a symlink to one (listed with '/', as os.walk does; never entered)."""
    try:
        return entry.is_dir()
    except OSError:  # a symlink loop
        return False

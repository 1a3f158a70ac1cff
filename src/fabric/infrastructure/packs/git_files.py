"""Reading, removing and rewriting files in a repository's folder for the git audit, whatever a
command did to them: a file is read only when it is a regular one (never through a link, never
a pipe), the rights a command took from the owner are given back before a removal, and a
rewritten file is a new one renamed over the old (never written through a link).

Standard library only: the git audit runs in the run ledger too.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

LIMIT = 1 << 20
"""The longest config (or todo list, or pointer) file read, in bytes: more is not git's own."""


def read_small(path: Path, limit: int = LIMIT) -> str | None:
    """The text of ``path`` when it is a regular file (never a link, a pipe or a device) of at
    most ``limit`` bytes; bytes that are no UTF-8 kept as they are (``surrogateescape``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if len(data) > limit else data.decode("utf-8", "surrogateescape")


def entries(folder: Path) -> list[Path]:
    """What ``folder`` holds (empty when it is no readable folder), opened up first when a
    command took away its owner's rights to it."""
    for _ in range(2):
        try:
            with os.scandir(folder) as found:
                return sorted(Path(entry.path) for entry in found)
        except PermissionError:
            _grant(folder)
        except OSError:
            return []
    return []


def remove(path: Path) -> str | None:
    """Delete ``path`` (a folder with everything in it); None, or why it could not be."""
    return _insisting(path, _delete)


def replace(path: Path, text: str) -> str | None:
    """Put ``text`` in place of ``path``; None, or why it could not be."""
    return _insisting(path, lambda p: _replace(p, text))


def _insisting(path: Path, change: Callable[[Path], None]) -> str | None:
    try:
        change(path)
    except OSError:
        _open_up(path)  # a command may have taken its owner's rights away to keep it
        try:
            change(path)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _open_up(path: Path) -> None:
    """Give the owner back its rights to the folder holding ``path`` and, when ``path`` is a
    folder, to it and every folder inside it (root needs none of them)."""
    _grant(path.parent)
    if path.is_dir() and not path.is_symlink():
        _grant(path, inside=True)


def _grant(folder: Path, *, inside: bool = False) -> None:
    """Read, write and search rights on ``folder`` for its owner (and on the folders inside
    it, with ``inside``)."""
    try:
        folder.chmod(stat.S_IMODE(folder.lstat().st_mode) | stat.S_IRWXU)
        with os.scandir(folder) as found:
            folders = [Path(e.path) for e in found if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for below in folders if inside else ():
        _grant(below, inside=True)


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _replace(path: Path, text: str) -> None:
    fresh = path.with_name(f".{path.name}.fabric-{os.getpid()}")
    fresh.unlink(missing_ok=True)  # left by an audit cut short (a link: removed, not followed)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(fresh, flags, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as out:
            out.write(text)
        fresh.replace(path)
    except OSError:
        fresh.unlink(missing_ok=True)
        raise

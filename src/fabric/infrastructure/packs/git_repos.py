"""Where the repositories of a workspace are, as git on the host would find them: a ``.git``
folder, a ``.git`` file naming the folder git uses instead (``gitdir:``), a bare repository,
and the submodules an index registers (gitlinks), at any depth: ``git status`` looks into each
of them and runs git there.

Shared by ``host_code.py`` (what a run may not change) and the git audit (what a run planted).
Standard library only: the git audit runs in the run ledger too.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path

from .git_config import parse
from .git_files import read_small

SEARCH_DEPTH = 4
"""How deep below the workspace root virtualenvs and repositories are looked for: as host code
when a run starts (``host_code.py``), and by the audit after every command."""
SKIP = {"node_modules", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
INDEX_LIMIT = 256 << 20
"""The largest index read for gitlinks, in bytes (a checkout of some two million files)."""

_HEAD = re.compile(r"ref: refs/\S+\s*|[0-9a-f]{40}\s*|[0-9a-f]{64}\s*")
_GITLINK = 0o160000


def folders(root: Path, depth: int) -> Iterator[Path]:
    """``root`` and the real folders below it, ``depth`` levels deep (no symlinks), not
    going into an environment (it is host code whole) nor into a repository's own folder."""
    yield root
    if depth == 0 or (root / "pyvenv.cfg").is_file() or (root / "conda-meta").is_dir():
        return
    if is_git_dir(root):
        return
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name in SKIP or entry.name == ".git":
            continue
        if entry.is_dir(follow_symlinks=False):
            yield from folders(Path(entry.path), depth - 1)


def is_git_dir(folder: Path) -> bool:
    """Whether git takes ``folder`` for a repository's own folder (a bare repository, or one
    a ``.git`` file names): a ``HEAD`` naming a branch or a commit, and ``objects/`` and
    ``refs/`` (or a ``commondir`` naming where they are), as git's ``is_git_directory``."""
    head = read_small(folder / "HEAD", 4096)
    if head is None or not _HEAD.fullmatch(head):
        return False
    shared = os.path.lexists(folder / "commondir")
    return shared or ((folder / "objects").is_dir() and (folder / "refs").is_dir())


def gitdir_of(pointer: Path) -> Path | None:
    """The real path of the folder git uses for the ``.git`` at ``pointer`` when that is no
    folder: where a link leads, or what a ``gitdir: <path>`` file names (relative to the folder
    ``pointer`` is in, also when read through a link); None when it names none."""
    if pointer.is_symlink():
        target = Path(os.path.realpath(pointer))
        if target.is_dir():
            return target
        text = read_small(target, 4096)
    else:
        text = read_small(pointer, 4096)
    if text is None or not text.startswith("gitdir: "):
        return None
    named = text.removeprefix("gitdir: ").rstrip("\r\n").strip()
    return real(pointer.parent, named) if named else None


def owner(gitdir: Path) -> Path | None:
    """The ``.git`` folder ``gitdir`` lies in (a submodule's or a worktree's folder under
    ``.git/modules`` or ``.git/worktrees``), or None."""
    for folder in (gitdir, *gitdir.parents):
        if folder.name == ".git":
            return folder
    return None


def gitlinks(gitdir: Path) -> list[str]:
    """The paths (relative to the work tree) that ``gitdir``'s index registers as submodules,
    its split index's shared part included."""
    found: list[str] = []
    for path in [gitdir / "index", *sorted(gitdir.glob("sharedindex.*"))]:
        try:
            info = path.lstat()
        except OSError:
            continue
        key = (str(path), info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        found += _gitlinks(key)
    return found


@functools.lru_cache(maxsize=64)
def _gitlinks(key: tuple[str, int, int, int, int]) -> tuple[str, ...]:
    """The gitlinks of the index file ``key[0]`` (the rest of ``key``: its state, so that a
    changed index is read again)."""
    try:
        fd = os.open(key[0], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            data = os.read(fd, INDEX_LIMIT) if key[2] <= INDEX_LIMIT else b""
        finally:
            os.close(fd)
    except OSError:
        return ()
    for hash_size in (20, 32):  # SHA-1 or SHA-256 object names
        found = _entries(data, hash_size)
        if found is not None:
            return tuple(n.decode("utf-8", "surrogateescape") for n in found)
    return ()


def _entries(data: bytes, hash_size: int) -> list[bytes] | None:
    """The gitlink paths of an index (versions 2 to 4, gitformat-index(5)), or None when
    ``data`` is no index with object names of ``hash_size`` bytes."""
    if len(data) < 12 or data[:4] != b"DIRC":
        return None
    version, count = int.from_bytes(data[4:8], "big"), int.from_bytes(data[8:12], "big")
    if version not in (2, 3, 4):
        return None
    at, previous, found = 12, b"", []
    try:
        for _ in range(count):
            start, mode = at, int.from_bytes(data[at + 24 : at + 28], "big")
            flags = int.from_bytes(data[at + 40 + hash_size : at + 42 + hash_size], "big")
            at += 42 + hash_size + (2 if version >= 3 and flags & 0x4000 else 0)
            if version == 4:
                strip, at = _varint(data, at)
                if strip > len(previous):
                    return None
                end = data.index(b"\0", at)
                name = previous[: len(previous) - strip] + data[at:end]
                at = end + 1
            else:
                end = data.index(b"\0", at)
                name = data[at:end]
                at = start + ((end - start + 8) & ~7)
            if (flags & 0xFFF) != min(len(name), 0xFFF):
                return None
            if mode == _GITLINK:
                found.append(name)
            previous = name
    except (ValueError, IndexError):
        return None
    return found


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """Git's offset varint (``decode_varint``) at ``at``, and where it ends."""
    c = data[at]
    at += 1
    value = c & 127
    while c & 128:
        c = data[at]
        at += 1
        value = ((value + 1) << 7) + (c & 127)
    return value, at


def looks_like_git_dir(folder: Path) -> bool:
    """Whether ``folder`` (under ``.git/modules``) holds a repository's own files: a loose
    look, so that a planted one is audited too."""
    return any(os.path.lexists(folder / name) for name in ("HEAD", "config", "commondir", "refs"))


def points_to(pointer: Path, folder: Path) -> bool:
    """Whether the file ``pointer`` names ``folder``, as git reads it: one path, relative to
    the folder ``pointer`` is in (read only when it is a regular file: never a pipe)."""
    named = (read_small(pointer, 4096) or "").strip()
    target = pointer.parent / named  # realpath, not resolve: no error on a loop of links
    return bool(named) and os.path.realpath(target) == os.path.realpath(folder)


def work_tree(gitdir: Path, *, module: bool) -> Path | None:
    """Where the work tree of a submodule's folder (``module``: its ``core.worktree``) or a
    linked worktree's folder (its ``gitdir`` file names the tree's ``.git``) is."""
    if module:
        trees = [
            s.value
            for s in parse(read_small(gitdir / "config") or "")[0]
            if s.key == "core.worktree" and s.value
        ]
        return real(gitdir, trees[-1]) if trees else None
    pointer = (read_small(gitdir / "gitdir", 4096) or "").strip()
    return real(gitdir, pointer).parent if pointer else None


def real(folder: Path, named: str) -> Path:
    """The real path of ``named`` (``~`` for the home folder) taken from ``folder``."""
    return Path(os.path.realpath(folder / Path(named).expanduser()))


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or lies below it (both real paths; compared as text, which
    is cheap enough for every file tool call)."""
    text, folder = str(path), str(root)
    return text == folder or text.startswith(folder.rstrip("/") + "/")

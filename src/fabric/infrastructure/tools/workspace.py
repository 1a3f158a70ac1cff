"""Keeping file tools inside the workspace.

Every path a model names is taken relative to the workspace root; absolute paths, ``~`` and
NUL bytes are refused outright. The root is opened once per tool call (``Workspace``) and every
path is opened beneath it in one step (``beneath.open_beneath``): '..' above the root and
symlinks that point out are refused by the same call that opens, so a command that swaps a
folder for a symlink meanwhile cannot redirect the tool. What was opened is then judged by
where it really is (its fd's path), never by a path resolved again: protected places are
neither read nor written, host code (``write_rules``) is not written.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from types import TracebackType

from msgspec import Struct

from fabric.application.context import ToolContext
from fabric.domain.errors import SandboxError, ToolError
from fabric.infrastructure.packs.git_repos import inside

from .beneath import DIRECTORY, LeadsOutside, find_beneath, open_beneath, real_path
from .write_rules import refuse_name, refuse_write, refuse_written_place

_READ = os.O_RDONLY | os.O_NONBLOCK  # a FIFO opens at once (and is then refused), never blocks
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Opened(Struct, frozen=True):
    """A file or folder open beneath the workspace."""

    fd: int
    rel: str
    """Where it is, as the model should see it: relative to the workspace, '/'-separated."""
    info: os.stat_result


class Workspace:
    """One tool call's view of the workspace: the root, opened once, and the rules of
    ``ctx``. Use it as a context manager; it closes the root."""

    def __init__(self, ctx: ToolContext) -> None:
        try:
            self.fd = os.open(ctx.workspace, DIRECTORY)
        except OSError as exc:
            raise ToolError(f"the workspace cannot be opened: {exc.strerror or exc}") from None
        try:
            self._root = real_path(self.fd)
        except OSError as exc:
            os.close(self.fd)
            raise ToolError(f"cannot tell where the workspace is (/proc): {exc}") from None
        self.root = _path(self._root)
        self._below = self._root.rstrip("/") + "/"
        self.protected, self.read_only = ctx.protected, ctx.read_only
        self.kept, self.kept_why = ctx.kept, ctx.kept_why

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        os.close(self.fd)

    @contextlib.contextmanager
    def open(self, path: str, *, folder: bool = False) -> Iterator[Opened]:
        """Open ``path`` for reading (a folder: for listing); refuses protected places.
        Raises SandboxError for a path that leads out, OSError when it cannot be opened."""
        rel = relative_path(path)
        try:
            fd = open_beneath(self.fd, rel, _READ | (os.O_DIRECTORY if folder else 0))
        except LeadsOutside:
            raise _outside(path) from None
        try:
            real = self._where(path, fd)
            check_unprotected(real, self.protected)
            yield Opened(fd, self.display(real), os.fstat(fd))
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def open_for_writing(self, path: str, *, append: bool = False) -> Iterator[Opened]:
        """Open ``path`` for writing, emptied unless ``append``; missing folders are made.
        Refuses protected places and host code before anything is made or opened (and the
        file opened, by its inode). Raises ToolError for a folder or an odd file, OSError when
        it cannot be opened."""
        rel = relative_path(path)
        refuse_name(path, PurePosixPath(rel).name)
        for _ in range(8):  # again if the name is swapped for a symlink between look and open
            try:
                dir_fd, name = find_beneath(self.fd, rel, lambda d, n: self._may_write(path, d, n))
            except LeadsOutside:
                raise _outside(path) from None
            try:
                self._may_write(path, dir_fd, name)
                fd = os.open(name, _WRITE | (os.O_APPEND if append else 0), 0o666, dir_fd=dir_fd)
                break
            except OSError as exc:
                if exc.errno == errno.EISDIR:
                    raise ToolError(f"{path!r} is a directory", hint="give a file path") from None
                if exc.errno == errno.ENXIO:  # a FIFO nobody reads
                    raise _not_regular(path) from None
                if exc.errno != errno.ELOOP:
                    raise
            finally:
                os.close(dir_fd)
        else:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):  # a FIFO or device would block or worse
                raise _not_regular(path)
            refuse_written_place(path, info, self.protected, self.read_only)
            if not append:
                os.ftruncate(fd, 0)
            yield Opened(fd, self.display(self._where(path, fd)), info)
        finally:
            os.close(fd)

    def is_protected(self, fd: int) -> bool:
        """Whether the open ``fd`` is in a protected place (a walk does not enter those)."""
        try:
            check_unprotected(Path(real_path(fd)), self.protected)
        except SandboxError:
            return True
        return False

    def display(self, real: Path) -> str:
        """A real path beneath the root as the model should see it."""
        text = str(real)
        if text == self._root:
            return "."
        if not text.startswith(self._below):
            raise ValueError(f"{text!r} is not beneath {self._root!r}")
        return text[len(self._below) :]

    def _where(self, path: str, fd: int) -> Path:
        """Where ``fd`` really is; SandboxError if that is not beneath the root (a folder
        on the way was moved out meanwhile). Compared as text: both are real paths from the
        kernel, and this runs on every file a tool opens."""
        real = real_path(fd)
        if real != self._root and not real.startswith(self._below):
            raise _outside(path)
        return Path(real)

    def _may_write(self, path: str, dir_fd: int, name: str) -> None:
        folder = self._where(path, dir_fd)
        target = folder / name if name != "." else folder
        check_unprotected(target, self.protected)
        refuse_write(path, target, self.root, self.read_only)
        if target in self.kept:
            raise ToolError(
                f"{self.display(target)} is kept as it is in this run: {self.kept_why}",
                hint="change other files; the pack's settings say when files are kept",
            )


@functools.lru_cache(maxsize=64)
def _path(text: str) -> Path:
    """The workspace root as a Path, built once per root (a tool call asks for it each time)."""
    return Path(text)


def relative_path(path: str) -> str:
    """``path`` as a workspace-relative path; SandboxError for NUL bytes, absolute paths and
    paths from a home folder."""
    if "\x00" in path:
        raise SandboxError("the path contains a NUL byte", hint="use a plain relative path")
    text = path.strip() or "."
    if text.startswith(("/", "~")):  # absolute, as a (Posix) Path says, at a tenth of the cost
        raise SandboxError(
            f"absolute path {path!r} refused: tools only see the workspace",
            hint="use a path relative to the workspace root, e.g. 'src/app.py'",
        )
    return text


def resolve_in_workspace(root: Path, path: str) -> Path:
    """The real path of ``path`` under ``root``; raise SandboxError if it would leave it.

    For pack authors' own tools. A path is only a snapshot: a command running meanwhile can
    swap a folder on it for a symlink, so open it through ``Workspace`` (as the file tools
    do) wherever that matters."""
    text = relative_path(path)
    real_root = Path(os.path.realpath(root))
    resolved = Path(os.path.realpath(real_root / text))
    if resolved != real_root and real_root not in resolved.parents:
        raise _outside(path)
    return resolved


def check_unprotected(target: Path, protected: tuple[Path, ...]) -> None:
    """Refuse protected places, for reading and writing: the runs folder (this and other
    runs' logs), and for the HTTP service its task database and config."""
    for place in protected:  # real paths (execute_task resolves them once per run)
        if inside(target, place):
            raise SandboxError(
                f"{target.name!r} is in a protected place ({place.name}) that tools may not "
                "read or change",
                hint="work with other files in the workspace",
            )


def _outside(path: str) -> SandboxError:
    return SandboxError(
        f"path {path!r} leads outside the workspace",
        hint="stay inside the workspace; '..' and symlinks that point out are refused",
    )


def _not_regular(path: str) -> ToolError:
    return ToolError(f"{path!r} is not a regular file", hint="write to a normal file")

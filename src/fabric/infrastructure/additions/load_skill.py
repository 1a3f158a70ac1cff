"""The ``load_skill`` tool (ADR 0027): a skill's instructions, as read when the run started,
and the paths of its files; or one file of the skill, opened beneath its folder. A workspace
skill's folder is opened by the file tools' rules, a configured one where it is configured."""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from msgspec import Struct

from fabric.application.context import ToolContext
from fabric.application.skills import Skill, loaded_text
from fabric.domain.errors import SandboxError, ToolError
from fabric.infrastructure.tools.beneath import LeadsOutside, open_beneath, real_path
from fabric.infrastructure.tools.function_tool import reads_only
from fabric.infrastructure.tools.walk import SKIP_DIRS
from fabric.infrastructure.tools.workspace import Workspace, check_unprotected, relative_path

from .skill_folders import ENTRIES, FILE, FOLDER, SKILL_FILE

FILES_LISTED = 50
"""Files of a skill ``load_skill`` lists at most."""
_DEPTH = 4
_SUBFOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Book(Struct, frozen=True):
    """The skills a run was offered, by name, and how much of a skill's file is read."""

    skills: Mapping[str, Skill]
    max_bytes: int


@reads_only
def load_skill(ctx: ToolContext, name: str, file: str | None = None, *, book: Book) -> str:
    """Load a skill listed under Skills: its instructions and the paths of its files. Call it
    before doing what a skill describes. With file, read one file of the skill instead.

    Args:
        name: The skill's name, as listed.
        file: A file of the skill, relative to its folder (e.g. 'scripts/check.py').
    """
    skill = book.skills.get(name)
    if skill is None:
        raise ToolError(
            f"no skill is called {name!r} in this run",
            hint=f"the skills are: {', '.join(book.skills)}",
        )
    if skill.body is None:  # a resumed or replayed run's, changed since
        raise ToolError(
            f"skill {name!r} is not the one this run was offered: its SKILL.md changed or "
            "went away since the run started",
            hint="go on without it",
        )
    try:
        with _folder(ctx, skill) as fd:
            if file is not None:
                return _read_file(ctx, skill, fd, file, book.max_bytes)
            files = list(itertools.islice(_files(fd, "", 0), FILES_LISTED + 1))
    except FileNotFoundError:
        raise ToolError(
            f"the folder of skill {name!r} ({skill.folder}) is gone",
            hint="go on without it, or ask for it to be restored",
        ) from None
    except OSError as exc:
        raise ToolError(
            f"cannot read skill {name!r}: {exc.strerror or exc}", hint="go on without it"
        ) from None
    shown = [f"{skill.folder.rstrip('/')}/{rel}" for rel in files[:FILES_LISTED]]
    return loaded_text(skill, shown, more=len(files) > FILES_LISTED)


@contextlib.contextmanager
def _folder(ctx: ToolContext, skill: Skill) -> Iterator[int]:
    """The skill's folder, open: beneath the workspace for a workspace skill (by the file
    tools' rules), at its configured place otherwise."""
    if skill.source == "workspace":
        with Workspace(ctx) as ws, ws.open(skill.folder, folder=True) as opened:
            fd = os.dup(opened.fd)
    else:
        fd = os.open(skill.folder, FOLDER)
    try:
        yield fd
    finally:
        os.close(fd)


def _read_file(ctx: ToolContext, skill: Skill, folder: int, file: str, most: int) -> str:
    """One file of the skill, opened beneath its folder (no '..', no symlink out), cut at
    ``most`` bytes."""
    rel = relative_path(file)
    try:
        fd = open_beneath(folder, rel, FILE)
    except LeadsOutside:
        raise SandboxError(
            f"{file!r} leads out of the folder of skill {skill.name!r}",
            hint="give a path inside the skill's folder, as load_skill listed its files",
        ) from None
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(
            f"skill {skill.name!r} has no file {file!r}",
            hint=f'load_skill(name="{skill.name}") lists its files',
        ) from None
    try:
        check_unprotected(Path(real_path(fd)), ctx.protected)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(
                f"{file!r} of skill {skill.name!r} is not a regular file",
                hint=f'load_skill(name="{skill.name}") lists its files',
            )
        data = os.read(fd, most + 1)
    finally:
        os.close(fd)
    if b"\x00" in data[:8192]:
        raise ToolError(
            f"{file!r} of skill {skill.name!r} is not text",
            hint="run it with shell if it is a program",
        )
    text = data[:most].decode("utf-8", errors="replace")
    if len(data) > most:
        text += f"\n[... cut at {most} bytes of {info.st_size} ...]"
    return text


def _files(fd: int, prefix: str, depth: int) -> Iterator[str]:
    """The skill's files below the open folder ``fd``, sorted, its SKILL.md left out;
    folders are entered by fd with O_NOFOLLOW (a symlinked folder is never walked)."""
    with os.scandir(fd) as found:
        listed = itertools.islice(found, ENTRIES)
        entries = sorted((e.name, _is_dir(e)) for e in listed if not e.name.startswith("."))
    for name, is_dir in entries:
        if not is_dir and not (depth == 0 and name == SKILL_FILE):
            yield prefix + name
    if depth >= _DEPTH:
        return
    for name, is_dir in entries:
        if not is_dir or name in SKIP_DIRS:
            continue
        try:
            below = os.open(name, _SUBFOLDER, dir_fd=fd)
        except OSError:
            continue  # a symlink, or gone
        try:
            yield from _files(below, f"{prefix}{name}/", depth + 1)
        finally:
            os.close(below)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False

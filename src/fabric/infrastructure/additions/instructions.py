"""The workspace's instructions for agents (ADR 0026): the root's ``AGENTS.md`` joins the
system prompt after the pack's own; a subfolder's joins the output of the first tool call
that reaches below it (``Nested``), once a run. Every file is opened beneath the workspace
like the file tools open theirs (no symlink out, no protected place), only if it is a regular
file the policy lets ``read_file`` read, and only as much of it as the run has room for."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Mapping, Sequence, Set
from typing import Any

from msgspec import Struct, field

from fabric.application.additions import Addition, started_in
from fabric.application.context import ToolContext
from fabric.application.instructions import (
    NAME,
    Given,
    Skipped,
    cleaned,
    given_before,
    given_entries,
    nested_text,
    recorded_meta,
    recovered,
    root_prompt,
    touched_folders,
)
from fabric.application.pack import Appended
from fabric.application.paths import resolved
from fabric.domain.errors import SandboxError, ToolError
from fabric.domain.policy import decide
from fabric.infrastructure.tools.workspace import Workspace

from . import Where

_MISSING = (errno.ENOENT, errno.ENOTDIR)


def instructions(where: Where) -> Addition:
    """The root's instructions for a run in ``where.workspace`` and, with ``nested``, the
    hook that gives the subfolders' as the run reaches into them."""
    settings = where.settings.instructions
    found = _root(where)
    root = found if isinstance(found, Given) else None
    meta = {
        "given": [root.meta()] if root is not None else [],
        "skipped": [found.meta()] if isinstance(found, Skipped) else [],
        "nested": settings.nested,
    }
    return _addition(where, root, meta, used=len(root.text) if root else 0, folders={""})


def _root(where: Where) -> Given | Skipped | None:
    """The root's instructions, or why not: a stat a file name when there are none; the
    protected places resolved (as the run's tools compare them) only when there is one."""
    settings = where.settings.instructions
    if not any(os.path.lexists(where.workspace / name) for name in settings.files):
        return None
    protected = tuple(map(resolved, where.protected))
    ctx = ToolContext("", where.workspace, where.settings.sandbox, protected)
    return _look(ctx, "", settings.files, settings.max_chars)


def _addition(
    where: Where,
    root: Given | None,
    meta: Mapping[str, Any],
    *,
    used: int,
    folders: set[str],
) -> Addition:
    settings = where.settings.instructions
    nested = None
    if settings.nested:
        nested = Nested(settings.files, settings.max_chars - used, set(folders))
    return Addition(
        NAME,
        root_prompt(root) if root is not None else "",
        meta=meta,
        after_call=nested,
        restore=lambda events: _restored(where, events),
    )


def _restored(where: Where, events: Sequence[Mapping[str, Any]]) -> Addition:
    """The instructions as the recorded run had them: the root's from its recorded system
    prompt (the file may have changed since; read now when it cannot be found there), the
    subfolders it was given not given again."""
    started = started_in(events)
    meta = recorded_meta(started)
    root = None
    for entry in given_entries(meta):
        root = recovered(str(started.get("system_prompt", "")), entry)
        if root is None:  # not as recorded: as it is now (a replay says where it differs)
            return instructions(where)
    folders, used = given_before(events)
    return _addition(where, root, meta, used=used, folders={"", *folders})


class Nested(Struct):
    """The after-call hook (``AfterCall``): the instructions of the folders a tool call's
    paths reach below, each folder looked at once a run, farther ones first."""

    files: tuple[str, ...]
    room: int
    """Characters of instructions the run may still be given."""
    looked: set[str] = field(default_factory=set)
    """Folders looked at already ('' the root), with instructions given or none found."""

    async def __call__(
        self, name: str, arguments: Mapping[str, Any], ctx: ToolContext
    ) -> Appended | None:
        reached = touched_folders(arguments)
        folders = [f for f in reached if f not in self.looked]
        if not folders:
            return None
        self.looked.update(folders)
        found = await asyncio.to_thread(self._look_all, ctx, folders, set(reached))
        if not found:
            return None
        given = [f for f in found if isinstance(f, Given)]
        skipped = [f.meta() for f in found if isinstance(f, Skipped)]
        meta = {"given": [g.meta() for g in given], "skipped": skipped}
        return Appended(nested_text(given) if given else "", meta)

    def _look_all(
        self, ctx: ToolContext, folders: Sequence[str], reached: set[str]
    ) -> list[Given | Skipped]:
        found: list[Given | Skipped] = []
        for folder in folders:
            one = _look(ctx, folder, self.files, self.room, reached)
            if isinstance(one, Given):
                self.room -= len(one.text)
            if one is not None:
                found.append(one)
        return found


def _look(
    ctx: ToolContext,
    folder: str,
    files: Sequence[str],
    room: int,
    reached: Set[str] = frozenset(),
) -> Given | Skipped | None:
    """The instructions of ``folder`` (workspace-relative, '' the root): the first of
    ``files`` there, or why it is not given; None when the folder has none (or is none).
    ``reached``: the paths of the tool call that asks; a file among them is its own work."""
    try:
        ws = Workspace(ctx)
    except ToolError:  # the workspace cannot be opened: nothing to give
        return None
    with ws:
        for name in files:
            path = f"{folder}/{name}" if folder else name
            try:
                return _read(ws, ctx, path, room, reached)
            except SandboxError as exc:  # a symlink that leads out, a protected place
                return Skipped(path, exc.message)
            except OSError as exc:
                if exc.errno in _MISSING:
                    continue
                return Skipped(path, f"it cannot be read: {exc.strerror or exc}")
    return None


def _read(
    ws: Workspace, ctx: ToolContext, path: str, room: int, reached: Set[str]
) -> Given | Skipped:
    """The file at ``path`` as instructions, or why it is not given."""
    with ws.open(path) as file:
        if not stat.S_ISREG(file.info.st_mode):
            return Skipped(path, "not a regular file")
        if path in reached:
            return Skipped(path, "the tool call itself reads or writes it")
        if decide(ctx.sandbox.policy, "read_file", {"path": path}).verdict == "deny":
            return Skipped(path, "the pack's policy denies read_file of it")
        if room <= 0:
            return Skipped(path, "no room left: the run had instructions.max_chars of them")
        raw = _head(file.fd, 4 * room + 4)
        return cleaned(path, raw, room, more=file.info.st_size > len(raw))


def _head(fd: int, limit: int) -> bytes:
    """The first ``limit`` bytes of the open file (fewer if it is shorter)."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)

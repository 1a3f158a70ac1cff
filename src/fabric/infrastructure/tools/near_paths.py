"""Paths a model gets almost right.

Small models invent paths: ``workspace/src/app.py`` (a ``workspace/`` folder that does not
exist), ``myproject/app.py`` (the workspace folder's own name in front), the absolute path of a
file in the workspace, or ``app.py`` for ``src/app.py``. Reading, listing and editing tools
resolve the first three to the file or folder meant when it exists and the run's policy allows
the same call with the corrected path (a path rule must not be sidestepped by a spelling);
otherwise the error names the closest existing files. ``write_file`` never guesses: it
refuses a leading ``workspace/`` that is no real folder, and says what to write instead.

Nothing here widens what a tool may open: every path is still opened beneath the workspace
root by ``Workspace``, with all its refusals.
"""

from __future__ import annotations

import contextlib
import errno
import posixpath
from collections.abc import Iterator
from difflib import SequenceMatcher, get_close_matches
from itertools import islice
from pathlib import Path, PurePosixPath

from fabric.application.context import ToolContext
from fabric.domain.errors import SandboxError, ToolError
from fabric.domain.policy import decide

from .walk import walk
from .workspace import Opened, Workspace, relative_path

_MISSING = (errno.ENOENT, errno.ENOTDIR)
_MAX_FILES = 5_000
"""Files looked at, at most, when suggesting paths."""
_SUGGESTIONS = 3


@contextlib.contextmanager
def open_existing(
    ws: Workspace, ctx: ToolContext, path: str, tool: str, *, folder: bool = False
) -> Iterator[tuple[Opened, str]]:
    """Open ``path`` for reading (a ``folder``: for listing), or what a model most likely
    meant by it (see the module docstring); yields it with a note for the model when it is
    not the path given. Raises ToolError naming the closest existing files when there is no
    such file (for a folder: the OSError), and what ``Workspace.open`` raises otherwise."""
    rel = _inside(ws, ctx, path, tool)
    with contextlib.ExitStack() as stack:
        try:
            opened = stack.enter_context(ws.open(rel, folder=folder))
        except OSError as exc:
            if exc.errno not in _MISSING:
                raise
            meant = _without_prefix(ws, ctx, rel, folder=folder)
            if meant is None:
                if folder:
                    raise
                raise missing(ws, path, rel, tool) from None
            _check_allowed(ctx, tool, path, meant)
            opened, rel = stack.enter_context(ws.open(meant, folder=folder)), meant
        note = ""
        if rel != path:
            note = (
                f"[{path!r} is not a path in the workspace; used {rel!r}: paths are relative "
                "to the workspace root]\n"
            )
        yield opened, note


def writable_path(ws: Workspace, ctx: ToolContext, path: str) -> str:
    """``path`` as given, unless it is a path a model invented: an absolute path in the
    workspace, or one that starts with a ``workspace/`` (or the workspace's own name) that is
    no real folder. Those raise an error that says which path to write instead."""
    text = path.strip()
    rel = _absolute_inside(ws, ctx, text)
    if rel is not None:
        raise SandboxError(
            f"absolute path {path!r} refused: tools take paths relative to the workspace root",
            hint=f"write to {rel!r}",
        )
    parts = PurePosixPath(relative_path(path)).parts
    if len(parts) < 2 or text.startswith("./") or parts[0] not in _own_names(ws, ctx):
        return path
    with contextlib.suppress(OSError, SandboxError), ws.open(parts[0], folder=True):
        return path  # a real folder of that name
    rest = "/".join(parts[1:])
    raise ToolError(
        f"{path!r} starts with '{parts[0]}/', but the workspace has no folder {parts[0]!r}: "
        "paths are relative to the workspace root",
        hint=f"write to {rest!r} instead (for a new folder really named {parts[0]!r}, write "
        f"'./{path.strip()}')",
    )


def missing(ws: Workspace, path: str, rel: str, tool: str) -> ToolError:
    """The error for a path that does not exist, naming the closest existing files; for an
    edit, also the tool that creates files (a small model tried to create one by editing)."""
    where = PurePosixPath(posixpath.normpath(rel))
    folder = where.parent.as_posix()
    try:
        with ws.open(folder, folder=True):
            place = "the workspace root" if folder == "." else f"'{folder}/'"
            message = f"there is no file {where.name!r} in {place}"
    except (OSError, SandboxError):
        message = f"{path!r} does not exist (there is no folder {folder!r} in the workspace)"
    found = suggestions(ws, where.as_posix())
    if found:
        message += f"; did you mean {' or '.join(repr(f) for f in found)}?"
    hint = "paths are relative to the workspace root; use list_files or search_files to see "
    hint += "what exists"
    if tool == "edit_file":
        hint += "; to create a new file, call write_file with its path and content"
    return ToolError(message, hint=hint)


def suggestions(ws: Workspace, rel: str) -> list[str]:
    """Existing files whose path is most like ``rel``: same name first, then similar ones."""
    try:
        with ws.open(".", folder=True) as root:
            files = list(islice(walk(ws, root, True, files_only=True), _MAX_FILES))
    except (OSError, SandboxError):
        return []
    name = PurePosixPath(rel).name
    same = [f for f in files if PurePosixPath(f).name == name]
    if same:
        return sorted(same, key=lambda f: (-SequenceMatcher(None, rel, f).ratio(), f))[
            :_SUGGESTIONS
        ]
    by_name: dict[str, list[str]] = {}
    for f in files:
        by_name.setdefault(PurePosixPath(f).name, []).append(f)
    close = [
        f for n in get_close_matches(name, list(by_name), _SUGGESTIONS, 0.75) for f in by_name[n]
    ]
    close += get_close_matches(rel, files, _SUGGESTIONS, 0.6)
    return list(dict.fromkeys(close))[:_SUGGESTIONS]


def _inside(ws: Workspace, ctx: ToolContext, path: str, tool: str) -> str:
    """``path``, or for an absolute path in the workspace its relative form (if the policy
    allows the call with it)."""
    rel = _absolute_inside(ws, ctx, path.strip())
    if rel is None:
        return path
    _check_allowed(ctx, tool, path, rel)
    return rel


def _absolute_inside(ws: Workspace, ctx: ToolContext, text: str) -> str | None:
    """The workspace-relative form of an absolute path that lies in the workspace."""
    if "\x00" in text or not text.startswith("/"):
        return None
    normal = posixpath.normpath(text)
    for root in dict.fromkeys((ws.root.as_posix(), posixpath.normpath(str(ctx.workspace)))):
        if normal == root:
            return "."
        if normal.startswith(root.rstrip("/") + "/"):
            return normal[len(root.rstrip("/")) + 1 :]
    return None


def _without_prefix(ws: Workspace, ctx: ToolContext, rel: str, *, folder: bool) -> str | None:
    """``rel`` without a leading ``workspace/`` or the workspace's own name, if that names
    an existing file (or folder: the root too)."""
    parts = PurePosixPath(posixpath.normpath(rel)).parts
    if len(parts) < (1 if folder else 2) or parts[0] not in _own_names(ws, ctx):
        return None
    rest = "/".join(parts[1:]) or "."
    try:
        with ws.open(rest, folder=folder):
            return rest
    except (OSError, SandboxError):
        return None


def _own_names(ws: Workspace, ctx: ToolContext) -> set[str]:
    return {name for name in ("workspace", ws.root.name, Path(ctx.workspace).name) if name}


def _check_allowed(ctx: ToolContext, tool: str, path: str, meant: str) -> None:
    """Use ``meant`` for ``path`` only if the policy lets the call through with it as it is
    (an ``ask`` or ``deny`` rule for it must get its say)."""
    if decide(ctx.sandbox.policy, tool, {"path": meant}).verdict != "allow":
        raise ToolError(
            f"{path!r} is not a path in the workspace; the file meant is probably {meant!r}",
            hint=f"call {tool} again with path={meant!r} (paths are relative to the workspace "
            "root)",
        )

"""Keeping file tools inside the workspace.

Every path a model names is taken relative to the workspace root and resolved with symlinks
followed; the result must still lie under the root's real path. Absolute paths are refused
outright, and so is any path whose resolution leaves the root (``..``, a symlink pointing out).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from fabric.domain.errors import SandboxError


def resolve_in_workspace(root: Path, path: str) -> Path:
    """The real path of ``path`` under ``root``; raise SandboxError if it would leave it."""
    if "\x00" in path:
        raise SandboxError("the path contains a NUL byte", hint="use a plain relative path")
    text = path.strip() or "."
    if PurePosixPath(text).is_absolute() or Path(text).is_absolute() or text.startswith("~"):
        raise SandboxError(
            f"absolute path {path!r} refused: tools only see the workspace",
            hint="use a path relative to the workspace root, e.g. 'src/app.py'",
        )
    real_root = Path(os.path.realpath(root))
    resolved = Path(os.path.realpath(real_root / text))
    if resolved != real_root and real_root not in resolved.parents:
        raise SandboxError(
            f"path {path!r} leads outside the workspace",
            hint="stay inside the workspace; '..' and symlinks that point out are refused",
        )
    return resolved


def check_unprotected(target: Path, protected: tuple[Path, ...]) -> None:
    """Refuse protected places, for reading and writing: the runs folder (this and other
    runs' logs), and for the HTTP service its task database and config."""
    for place in protected:
        real = Path(os.path.realpath(place))
        if target == real or real in target.parents:
            raise SandboxError(
                f"{target.name!r} is in a protected place ({real.name}) that tools may not "
                "read or change",
                hint="work with other files in the workspace",
            )


def display(root: Path, path: Path) -> str:
    """A path as the model should see it: relative to the workspace, with forward slashes."""
    rel = path.relative_to(os.path.realpath(root))
    return rel.as_posix() or "."

"""What file tools may not write even inside the workspace: host code (ADR 0013).

Host code is what fabric, the Python interpreter or the user's own tools execute later,
outside any sandbox: the run's ``read_only`` places (fabric.yaml, pack sources, virtualenvs,
.git hooks and config), anything in ``.git/``, anything inside a virtualenv (a folder holding
``pyvenv.cfg``), and, wherever they are, the files the interpreter runs at start-up
(``sitecustomize.py``, ``usercustomize.py``, ``*.pth``). Every check here is made on real
paths: where the folder a tool opened really is, never a path the model named.
"""

from __future__ import annotations

import os
from pathlib import Path

from fabric.domain.errors import SandboxError
from fabric.infrastructure.packs.git_repos import inside

_STARTUP_FILES = ("sitecustomize.py", "usercustomize.py")
_LEAVE_IT = "leave it as it is: put your work in other files, or say in your answer what to change"


def refuse_name(path: str, name: str) -> None:
    """Refuse a file the interpreter runs at start-up, wherever it is."""
    if name in _STARTUP_FILES or name.endswith(".pth"):
        what = ".pth files" if name.endswith(".pth") else "sitecustomize.py and usercustomize.py"
        raise SandboxError(
            f"{path!r} is read-only for tools: the Python interpreter runs {what} at start-up, "
            "outside the sandbox",
            hint="choose another file name",
        )


def refuse_write(path: str, target: Path, root: Path, read_only: tuple[Path, ...]) -> None:
    """Refuse writing ``target`` (a real path beneath the real workspace ``root``) if it
    is host code."""
    if ".git" in target.relative_to(root).parts:
        raise SandboxError(
            f"{path!r} is inside .git/, which tools may not change (a hook or config written "
            "there would run later, outside the sandbox)",
            hint="change the repository with git commands through shell",
        )
    for place in read_only:  # real paths (execute_task resolves them once per run)
        if inside(target, place):
            where = f"it is inside '{_shown(place, root)}/'" if target != place else "host code"
            raise SandboxError(
                f"{path!r} is read-only for tools: fabric or your own tools execute it later "
                f"outside the sandbox ({where})",
                hint=_LEAVE_IT,
            )
    refuse_name(path, target.name)
    for folder in target.parents:
        if folder != root and root not in folder.parents:
            break
        if (folder / "pyvenv.cfg").exists():
            raise SandboxError(
                f"{path!r} is read-only for tools: it is inside the virtualenv "
                f"'{_shown(folder, root)}/', whose scripts and packages run later outside the "
                "sandbox",
                hint="write your own code elsewhere in the workspace",
            )


def refuse_written_place(
    path: str, info: os.stat_result, protected: tuple[Path, ...], read_only: tuple[Path, ...]
) -> None:
    """Refuse a file opened for writing that is a protected or read-only file under another
    name (a hard link): judged by its inode, whatever the path."""
    for kind, places in (("protected", protected), ("read-only", read_only)):
        for place in places:
            try:
                known = place.stat()
            except OSError:
                continue
            if (known.st_dev, known.st_ino) == (info.st_dev, info.st_ino):
                raise SandboxError(
                    f"{path!r} is another name (a hard link) for {place.name!r}, which is "
                    f"{kind} for tools",
                    hint=_LEAVE_IT,
                )


def _shown(real: Path, root: Path) -> str:
    return real.relative_to(root).as_posix() if root in real.parents else str(real)

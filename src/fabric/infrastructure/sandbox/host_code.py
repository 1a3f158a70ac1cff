"""Host code in the workspace: files that fabric, the Python interpreter or the user's own tools
execute (or load as configuration) later, outside any sandbox. A run may read them but never
write, rename, replace or symlink over them (ADR 0013).

Two kinds:

- **fixed**, known from fabric's own start: the config file, the pack modules its builders
  name, the interpreter's folders (a virtualenv holding site-packages, ``*.pth`` files,
  ``sitecustomize.py``), fabric's own source (an editable install) and every folder on the
  import path that is not the workspace itself (those are guarded instead, see
  ``packs/import_guard.py``);
- **found** in the workspace when a run starts: virtualenvs (a folder holding ``pyvenv.cfg``)
  and git repositories' ``config`` and ``hooks`` (``core.hooksPath``, ``core.fsmonitor``,
  aliases and hooks all start programs when the user next runs git there).

Both backends bind these read-only inside the command's mount namespace, and bind every folder
between the workspace and them onto itself, so that renaming a parent (``mv .git x; mkdir .git``)
fails too: a mount point cannot be moved.
"""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import fabric
from fabric.domain.errors import SandboxError
from fabric.infrastructure.packs.import_guard import STARTUP_PATH, open_folders

_SEARCH_DEPTH = 2
"""How deep below the workspace root virtualenvs and repositories are looked for."""
_SKIP = {"node_modules", "__pycache__", ".mypy_cache", ".tox", ".cache"}
_GIT_PARTS = ("config", "hooks")
"""What in a ``.git`` folder starts programs: the config (hooksPath, fsmonitor, sshCommand,
pager, editor, aliases, filter and diff drivers) and the hooks."""


@dataclass(frozen=True, slots=True)
class HostCode:
    """The host code of one fabric process; ``in_workspace`` says what of it a run's
    workspace holds."""

    fixed: tuple[Path, ...]
    startup: tuple[Path, ...] = ()
    """Folders the interpreter looked in for ``sitecustomize`` at start-up (PYTHONPATH, .pth
    files): a workspace that is one of them cannot be protected by read-only files."""

    def check(self, workspace: Path) -> None:
        """Refuse a workspace whose new files Python itself would run at its next start."""
        root = Path(os.path.realpath(workspace))
        if root in self.startup:
            raise SandboxError(
                f"the workspace {root} is on Python's start-up import path (PYTHONPATH or a "
                ".pth file): a sitecustomize.py a command left there would run, unconfined, "
                "the next time Python starts",
                hint="take the folder off PYTHONPATH, or give fabric another --workspace",
            )

    def in_workspace(self, workspace: Path) -> list[Path]:
        """Existing host-code paths inside ``workspace`` (its real path), outermost first."""
        root = Path(os.path.realpath(workspace))
        found = {p for p in self.fixed if _inside(p, root) and p != root}
        found.update(_found_in(root))
        return sorted((p for p in found if os.path.lexists(p)), key=lambda p: len(p.parts))


def host_code(
    config_file: Path | None = None, base_dir: Path | None = None, modules: Iterable[str] = ()
) -> HostCode:
    """The fixed host code of this process: ``config_file``, the top-level ``modules`` pack
    builders import from ``base_dir`` (the config folder), the interpreter's folders,
    fabric's own source and the open folders of the import path."""
    paths: list[Path] = []
    if config_file is not None:
        paths.append(config_file)
    if base_dir is not None:
        for module in modules:
            top = module.split(".")[0]
            paths += [base_dir / top, base_dir / f"{top}.py"]
        paths.append(base_dir / "__pycache__")
    paths += map(Path, {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix})
    paths += map(Path, site.getsitepackages())
    if site.ENABLE_USER_SITE:
        paths.append(Path(site.getusersitepackages()))
    paths.append(Path(fabric.__file__).parent)
    paths += map(Path, open_folders())
    paths += (Path(entry) for entry in sys.path if entry and os.path.isdir(entry))
    real = {Path(os.path.realpath(p)) for p in paths if os.path.lexists(p)}
    startup = {Path(os.path.realpath(p)) for p in STARTUP_PATH if p and os.path.isdir(p)}
    return HostCode(tuple(sorted(real)), tuple(sorted(startup)))


def pins(read_only: Sequence[Path], workspace: Path) -> list[Path]:
    """The folders between ``workspace`` and each read-only path (neither included): bound
    onto themselves, they cannot be renamed away with the protected path inside."""
    root = Path(os.path.realpath(workspace))
    found: dict[Path, None] = {}
    for path in read_only:
        for parent in reversed(path.parents):
            if _inside(parent, root) and parent != root and parent not in read_only:
                found[parent] = None
    return sorted(found, key=lambda p: len(p.parts))


def _found_in(root: Path) -> Iterator[Path]:
    for folder in _folders(root, _SEARCH_DEPTH):
        if (folder / "pyvenv.cfg").is_file():
            yield folder
        git = folder / ".git"
        if git.is_dir() and not git.is_symlink():
            yield from (git / part for part in _GIT_PARTS)
            modules = git / "modules"  # submodules keep their own config and hooks here
            if modules.is_dir():
                yield from (m / part for m in _folders(modules, 2) for part in _GIT_PARTS)
        elif os.path.lexists(git):
            yield git  # a `gitdir:` pointer (worktrees, submodules): where git looks next


def _folders(root: Path, depth: int) -> Iterator[Path]:
    """``root`` and the real folders below it, ``depth`` levels deep (no symlinks)."""
    yield root
    if depth == 0:
        return
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name in _SKIP or entry.name == ".git":
            continue
        if entry.is_dir(follow_symlinks=False):
            yield from _folders(Path(entry.path), depth - 1)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents

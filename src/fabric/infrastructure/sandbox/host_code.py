"""Host code in the workspace: files that fabric, the Python interpreter or the user's own tools
execute (or load as configuration) later, outside any sandbox. A run may read them but never
write, rename, replace or symlink over them (ADR 0013).

Two kinds:

- **fixed**, known from fabric's own start: the config file, the pack modules its builders
  name, the interpreter's folders (a virtualenv holding site-packages, ``*.pth`` files,
  ``sitecustomize.py``), fabric's own source (an editable install), every folder on the
  import path that is not the workspace itself (those are guarded instead, see
  ``packs/import_guard.py``), and the packs' configured skill folders (instructions later
  runs trust, ADR 0027);
- **found** in the workspace when a run starts: virtualenvs (a folder holding ``pyvenv.cfg``)
  and git repositories' ``config``, ``config.worktree`` and ``hooks`` (``core.hooksPath``,
  ``core.fsmonitor``, aliases and hooks all start programs when the user next runs git
  there), and what their settings (or the user's own, ``~/.gitconfig``) take from the work
  tree: the hooks folder ``core.hooksPath`` names (husky's ``.husky``), the files
  ``include.path`` names, and the files the other settings name (a ``core.fsmonitor`` script).

Both backends bind these read-only inside the command's mount namespace, and bind every folder
between the workspace and them onto itself, so that renaming a parent (``mv .git x; mkdir .git``)
fails too: a mount point cannot be moved.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import site
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from msgspec import Struct

import fabric
from fabric.domain.errors import SandboxError
from fabric.infrastructure.packs import git_repos
from fabric.infrastructure.packs.git_config import Setting, parse, runs_nothing
from fabric.infrastructure.packs.git_files import read_small
from fabric.infrastructure.packs.git_repos import SEARCH_DEPTH, folders, inside, real
from fabric.infrastructure.packs.import_guard import STARTUP_PATH, open_folders

_GIT_PARTS = ("config", "config.worktree", "hooks")
HOOK_MANAGER_FILES = (
    ".pre-commit-config.yaml",
    ".pre-commit-config.yml",
    "lefthook.yml",
    "lefthook.yaml",
    ".lefthook.yml",
    ".lefthook.yaml",
    "lefthook-local.yml",
    ".lefthook-local.yml",
)
"""Files in a work tree whose commands the hooks of pre-commit and lefthook run at the next
commit (only those that exist are host code)."""
"""What in a repository's own folder starts programs: the config (hooksPath, fsmonitor,
sshCommand, pager, editor, aliases, filter and diff drivers), the worktree's config (read with
extensions.worktreeConfig) and the hooks."""
_INCLUDES = 10
"""How deep git follows ``include.path`` (its own limit)."""


class HostCode(Struct, frozen=True):
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
        found = {p for p in self.fixed if inside(p, root) and p != root}
        found.update(_found_in(root))
        return sorted((p for p in found if os.path.lexists(p)), key=lambda p: len(p.parts))


def host_code(
    config_file: Path | None = None,
    base_dir: Path | None = None,
    modules: Iterable[str] = (),
    also: Iterable[Path] = (),
) -> HostCode:
    """The fixed host code of this process: ``config_file``, the top-level ``modules`` pack
    builders import from ``base_dir`` (the config folder), the interpreter's folders,
    fabric's own source and the open folders of the import path; and ``also`` (the packs'
    configured skill folders, whose instructions later runs trust)."""
    paths: list[Path] = list(also)
    if config_file is not None:
        paths.append(config_file)
    tops = {"fabric", "packs", *(module.split(".")[0] for module in modules)}
    if base_dir is not None:
        for top in tops:
            paths += [base_dir / top, base_dir / f"{top}.py"]
        paths.append(base_dir / "__pycache__")
    for top in tops:  # where Python would really import them from (editable installs too)
        paths += _module_places(top)
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
            if inside(parent, root) and parent != root and parent not in read_only:
                found[parent] = None
    return sorted(found, key=lambda p: len(p.parts))


def _module_places(name: str) -> list[Path]:
    """The file or folders a top-level module is imported from, found without running it
    (also through an editable install's finder); none when it cannot be found."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []  # refused by the import guard, or broken: fabric will not load it either
    if spec is None:
        return []
    places = [Path(p) for p in spec.submodule_search_locations or ()]
    if spec.has_location and spec.origin:
        origin = Path(spec.origin)
        places.append(origin.parent if origin.name == "__init__.py" else origin)
    return places


def _found_in(root: Path) -> Iterator[Path]:
    user = _user_settings()
    for setting in user:  # git reads them in any repository, one the run makes too
        if setting.key == "include.path":
            yield from _named_files(setting.value or "", root, root)
    for folder in folders(root, SEARCH_DEPTH):  # the git audit's search too
        if (folder / "pyvenv.cfg").is_file() or (folder / "conda-meta").is_dir():
            yield folder  # a virtualenv, or a conda / pixi environment
        git = folder / ".git"
        if git.is_dir() and not git.is_symlink():
            yield from _repository(git, folder, root, user)
            yield from _nested(git / "modules", root, user)
            yield from (wt / "config.worktree" for wt in _subfolders(git / "worktrees"))
        elif os.path.lexists(git):
            yield git  # a `gitdir:` pointer (worktrees, submodules): where git looks next
            target = git_repos.gitdir_of(git)
            if target and inside(target, root) and git_repos.owner(target) is None:
                yield from _repository(target, folder, root, user)  # --separate-git-dir
        elif git_repos.is_git_dir(folder):
            yield from _repository(folder, folder, root, user)  # a bare repository


def _nested(modules: Path, root: Path, user: list[Setting], depth: int = 0) -> Iterator[Path]:
    """What the repositories of submodules under ``.git/modules`` run, nested ones included
    (``git status`` recurses into them), also under names with slashes."""
    for module in _subfolders(modules) if depth < 8 else ():
        if git_repos.looks_like_git_dir(module):
            tree = git_repos.work_tree(module, module=True)
            yield from _repository(module, tree, root, user)
            yield from _nested(module / "modules", root, user, depth + 1)
        else:
            yield from _nested(module, root, user, depth + 1)


def _repository(gitdir: Path, tree: Path | None, root: Path, user: list[Setting]) -> Iterator[Path]:
    """A repository's config and hooks, and what in the workspace its settings (and the
    user's own) make git run or read: the hooks folder, included files, named programs.
    ``tree``: where git runs hooks and programs (the work tree; a bare repository's own
    folder)."""
    yield from (gitdir / part for part in _GIT_PARTS)
    settings = [*user, *_settings(gitdir / "config")]
    if tree is None:
        return
    yield from (tree / name for name in HOOK_MANAGER_FILES)  # their hooks run what these say
    for setting in settings:
        if setting.key == "core.hookspath" and setting.value:
            hooks = real(tree, setting.value)
            if inside(hooks, root) and hooks != root:
                yield hooks
                husky = (hooks / "h").is_file() or (hooks / "husky.sh").is_file()
                if husky and hooks.parent != root:
                    yield hooks.parent  # husky's stubs in .husky/_ run the scripts of .husky
        elif not runs_nothing(setting):
            yield from _named_files(setting.value or "", tree, root)


def _settings(config: Path, depth: int = 0, read: list[Path] | None = None) -> Iterator[Setting]:
    """The settings of ``config`` and of the files it includes (``include.path``, and
    ``includeIf`` whatever its condition), an include naming the file's real path. Each file
    looked at is added to ``read``, when given."""
    if read is not None:
        read.append(config)
    for setting in parse(read_small(config) or "")[0]:
        if setting.section not in ("include", "includeif") or setting.name != "path":
            yield setting
        elif setting.value and depth < _INCLUDES:
            included = real(config.parent, setting.value)
            yield Setting("include", None, "path", str(included))
            yield from _settings(included, depth + 1, read)


def _named_files(value: str, tree: Path, root: Path) -> Iterator[Path]:
    """The files in the workspace a setting's value names with a path (``./tools/fsmon.sh``,
    ``!scripts/x`` for an alias), taken from the work tree, where git runs them."""
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    for word in words:
        word = word.lstrip("!")
        if "/" in word:
            path = real(tree, word)
            if inside(path, root) and path != root and path.is_file():
                yield path


def _user_settings() -> list[Setting]:
    """The user's own git settings (system and global), which apply in every repository.
    Parsed again only when one of the files they come from (an included one too) is not
    as it was when they were last read: every run looks (``in_workspace``), and parsing
    them costs more than the rest of that look."""
    global _USER_SETTINGS
    files = []
    if os.environ.get("GIT_CONFIG_NOSYSTEM", "").lower() in ("", "0", "false", "no", "off"):
        files.append(Path(os.environ.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"))
    if os.environ.get("GIT_CONFIG_GLOBAL"):
        files.append(Path(os.environ["GIT_CONFIG_GLOBAL"]))
    else:
        xdg = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
        files += [Path(xdg) / "git" / "config", Path.home() / ".gitconfig"]
    kept = _USER_SETTINGS
    if kept is not None and kept[0] == files and all(_state(p) == was for p, was in kept[1]):
        return kept[2]
    read: list[Path] = []
    states = [(p, _state(p)) for p in files]  # taken first: a change while parsing is seen
    settings = [setting for file in files for setting in _settings(file, read=read)]
    states += [(p, _state(p)) for p in read if p not in files]  # the included files
    _USER_SETTINGS = (files, states, settings)
    return settings


_USER_SETTINGS: tuple[list[Path], list[tuple[Path, object]], list[Setting]] | None = None
"""The user's git settings as last read: the files named, each file read with its state then
(``_state``), and the settings."""


def _state(path: Path) -> object:
    """What tells whether a file changed: its inode, size and times (None: no such file)."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _subfolders(folder: Path) -> list[Path]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]

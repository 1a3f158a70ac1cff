"""The git audit: control files a run planted in a repository's ``.git`` folder, removed.

Host code keeps the ``config`` and ``hooks`` of the repositories a run finds read-only (ADR
0013), but ``.git/`` itself must stay writable (git writes its index, refs and objects there,
by renaming), and no mount can forbid one new name in a writable folder. Git on the host
honours some names a command could create there: a ``commondir`` naming a folder the run
wrote makes the next ``git status`` read that folder's config, whose ``core.fsmonitor`` is a
program; so do a ``config.worktree``, a worktree's ``commondir``, the config and hooks of a
nested submodule under ``.git/modules`` and the filter drivers of ``info/attributes``.

So after every command, and when a run ends, fabric looks into each repository's own folder
in the workspace (``git_repos.py``: ``.git`` folders, the folders ``.git`` files name, bare
repositories, and every repository an index registers as a submodule, at any depth) and
removes what was created or changed since the command (or the run) started (its ctime, which
no program can set back) and is either a file git acts on or something git itself never writes
there. A ``config`` created or changed since is cut down to settings that run nothing
(``git_config.py``): a repository the run made is its output, but git reads that config on
the user's every command there. What git writes in its normal work (objects, refs, the index,
an interrupted merge's or rebase's state, lock files) is kept, whenever written, but the
``exec`` lines of a rebase's todo list changed since.

Standard library only: the run ledger calls it too, for a run whose fabric died.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Literal

from . import git_files
from .git_config import Setting, runs_nothing, sanitized
from .git_files import read_small
from .git_repos import (
    SEARCH_DEPTH,
    folders,
    gitdir_of,
    gitlinks,
    inside,
    is_git_dir,
    looks_like_git_dir,
    owner,
    points_to,
    real,
    work_tree,
)

_WRITTEN_BY_GIT = frozenset(
    {
        *("objects", "refs", "logs", "info", "hooks", "modules", "worktrees", "reftable"),
        *("HEAD", "ORIG_HEAD", "FETCH_HEAD", "AUTO_MERGE", "index", "packed-refs", "shallow"),
        *("MERGE_HEAD", "MERGE_MSG", "MERGE_MODE", "MERGE_RR", "MERGE_AUTOSTASH", "SQUASH_MSG"),
        *("CHERRY_PICK_HEAD", "REVERT_HEAD", "REBASE_HEAD", "sequencer", "rebase-merge"),
        *("rebase-apply", "rr-cache", "lost-found", "gc.pid", "gc.log", "description"),
        *("COMMIT_EDITMSG", "TAG_EDITMSG", "NOTES_EDITMSG", "EDIT_DESCRIPTION", "gitk.cache"),
        *("NOTES_MERGE_REF", "NOTES_MERGE_PARTIAL", "NOTES_MERGE_WORKTREE", "lfs", "annex"),
        *("fsmonitor--daemon", "fsmonitor--daemon.ipc"),
    }
)
"""What git (and git-lfs, git-annex, whose folders hold file contents) writes at the top of a
``.git`` folder in normal work (gitrepository-layout(5)): none of it names a program to run
(``config`` and the todo lists of ``rebase-merge`` and ``sequencer`` are looked into)."""
_WRITTEN_BY_GIT_LIKE = ("BISECT_*", "*.lock", "sharedindex.*")
_WORKTREE_WRITES = frozenset({"gitdir", "locked", "commondir"})
"""Also in a worktree's folder (``.git/worktrees/<id>``): where its checkout is, its lock, and
the repository's own folder (another ``commondir`` is a control file)."""

_WHY = {
    "commondir": "git would take the config and hooks, which name programs to run, from the "
    "folder it names",
    "config.worktree": "git reads settings from it (extensions.worktreeConfig), and they can "
    "name programs to run",
    "attributes": "its filter and diff drivers name programs git runs",
    "branches": "git reads remotes (where to fetch from and push to) from it",
    "remotes": "git reads remotes (where to fetch from and push to) from it",
}
_HOOK = "git runs the hooks in .git/hooks"
_LINK = "git makes no links in its own folder: this one would lead git elsewhere"
_UNKNOWN = "git itself never writes this there, so it can only be meant for something else"
_SETTINGS = (
    "git would run the programs they name, or read settings where they point; a repository "
    "a run made or changed keeps only settings that run nothing"
)
_TODO = "git runs them as commands when the user continues the rebase (or cherry-pick)"

_EXEC = re.compile(r"[ \t]*(?:exec|x)(?:\s|$)")
"""A todo list's ``exec`` line (``x`` for short), as git's sequencer reads it."""
_TODO_LIMIT = 16 << 20
_DEEPEST = 8
"""How deep the audit follows submodules registered in submodules, and folders in folders
under ``.git/modules`` (a submodule's name may hold slashes)."""

Kind = Literal["main", "module", "worktree"]


def sweep(workspace: str | Path, since: float, keep: Collection[Path] | None = None) -> list[str]:
    """Remove, from every repository's own folder in ``workspace``, what a run may have
    planted there since ``since`` (a time.time()), and cut its config down to settings that
    run nothing; return a line per change, saying why. ``keep``: paths the run could not
    change (read-only for its commands): left alone, with everything inside them, even when
    changed since (by the user, then). None: not known (a run whose fabric died, audited at
    the next start): then only the config of a repository wholly made since is cut down, as
    the user may have changed their own since."""
    root = Path(os.path.realpath(workspace))
    audit = _Audit(root, since, None if keep is None else {Path(p) for p in keep})
    for folder in folders(audit.root, SEARCH_DEPTH):
        audit.repository_at(folder)
    return audit.told


class _Audit:
    def __init__(self, root: Path, since: float, keep: set[Path] | None) -> None:
        self.root, self.since, self.keep = root, since, keep or set()
        self.host_code_known = keep is not None
        self.told: list[str] = []
        self.seen: set[Path] = set()

    def repository_at(self, folder: Path, depth: int = 0) -> None:
        """The repository whose work tree (or own folder: a bare one) ``folder`` is, if any."""
        git = folder / ".git"
        if git.is_dir() and not git.is_symlink():
            self._repository(git, folder, depth)
        elif os.path.lexists(git):  # a link or a `gitdir:` file: git looks where it leads
            target = gitdir_of(git)
            if target is None or not target.is_dir() or not inside(target, self.root):
                return
            home = owner(target)  # a submodule's or worktree's folder: in its repository's
            if home is None:
                self._repository(target, folder, depth)
            elif inside(home.parent, self.root):
                self._repository(home, home.parent, depth)
        elif is_git_dir(folder):
            self._repository(folder, None, depth)

    def _repository(self, gitdir: Path, tree: Path | None, depth: int) -> None:
        """A repository's own folder (``tree``: its work tree, None for a bare one), and the
        repositories its index registers as submodules, once each."""
        if Path(os.path.realpath(gitdir)) not in self.seen:
            self.seen.add(Path(os.path.realpath(gitdir)))
            self._git_folder(gitdir, "main")
            self._submodules(gitdir, tree, depth)

    def _submodules(self, gitdir: Path, tree: Path | None, depth: int) -> None:
        """The repositories ``gitdir``'s index registers (gitlinks), wherever they lie in the
        work tree: ``git status`` runs git in each."""
        if tree is None or not inside(tree, self.root) or depth >= _DEEPEST:
            return
        for name in gitlinks(gitdir):
            path = Path(os.path.realpath(tree / name))
            if inside(path, self.root) and path != self.root:
                self.repository_at(path, depth + 1)

    def _git_folder(self, git: Path, kind: Kind, depth: int = 0) -> None:
        """One repository's folder: the main one, a submodule's under ``modules/``, or a
        worktree's under ``worktrees/``."""
        for path in git_files.entries(git):
            name = path.name
            if self._kept(path):
                continue
            if path.is_symlink():
                self._remove_if_new(path, _LINK)
            elif name in ("hooks", "branches", "remotes"):
                self._new_inside(path, _HOOK if name == "hooks" else _WHY[name])
            elif name == "info" and not self._kept(path / "attributes"):
                self._remove_if_new(path / "attributes", _WHY["attributes"])
            elif name in ("modules", "worktrees") and depth < _DEEPEST:
                self._nested(path, "module" if name == "modules" else "worktree", depth + 1)
            elif name == "config" and kind != "worktree":
                self._config(path, git)
            elif name in ("rebase-merge", "sequencer"):
                self._todo(path / ("todo" if name == "sequencer" else "git-rebase-todo"))
            elif _controls(path, kind):
                self._remove_if_new(path, _WHY[name])
            elif _written_by_git(name, kind):
                continue
            elif path.is_dir():
                if self._wholly_new(path):
                    self._remove(path, _UNKNOWN)
            else:
                self._remove_if_new(path, _UNKNOWN)

    def _nested(self, folder: Path, kind: Kind, depth: int) -> None:
        """The repositories under ``modules/`` (a submodule's name may hold slashes, so they
        can lie deeper) or ``worktrees/``, and the submodules their indexes register."""
        for path in git_files.entries(folder):
            if self._kept(path):
                continue
            if path.is_symlink():
                self._remove_if_new(path, _LINK)
            elif path.is_dir() and (kind == "worktree" or looks_like_git_dir(path)):
                self._git_folder(path, kind, depth)
                self._submodules(path, work_tree(path, module=kind == "module"), depth)
            elif path.is_dir() and depth < _DEEPEST:
                self._nested(path, kind, depth + 1)

    def _new_inside(self, folder: Path, why: str) -> None:
        """Everything in ``folder`` (a control folder: hooks, remotes) created or changed
        since, but hook samples (git runs none)."""
        for path in git_files.entries(folder):
            if self._kept(path) or path.name.endswith(".sample"):
                continue
            if path.is_dir() and not path.is_symlink() and not self._wholly_new(path):
                self._new_inside(path, why)
            else:
                self._remove_if_new(path, why)

    def _config(self, path: Path, gitdir: Path) -> None:
        """A repository's settings, created or changed since: cut down to those that run
        nothing (removed when git could not read it as a config)."""
        if not self._new(path) or not (self.host_code_known or self._wholly_new(gitdir)):
            return
        text = read_small(path)
        if text is None:
            self._remove(path, _UNKNOWN)
            return
        new, dropped = sanitized(text, self._harmless(gitdir))
        if new is not None:
            more = f" and {len(dropped) - 6} more" if dropped[6:] else ""
            self._rewrite(path, new, f"took out {', '.join(dropped[:6])}{more}: {_SETTINGS}")

    def _harmless(self, gitdir: Path) -> Callable[[Setting], bool]:
        """What a rewritten config keeps: ``RUNS_NOTHING``, and a work tree in the workspace
        (a submodule's folder names its own)."""

        def harmless(setting: Setting) -> bool:
            if setting.key == "core.worktree" and setting.value:
                return inside(real(gitdir, setting.value), self.root)
            return runs_nothing(setting)

        return harmless

    def _todo(self, todo: Path) -> None:
        """A rebase's (or cherry-pick's) todo list, created or changed since: without the
        ``exec`` lines, which git runs as commands when the user continues."""
        if self._kept(todo) or not self._new(todo):
            return
        text = None if todo.is_symlink() else read_small(todo, _TODO_LIMIT)
        if text is None:
            self._remove(todo, _LINK if todo.is_symlink() else _UNKNOWN)
            return
        lines = text.splitlines(keepends=True)
        kept = [line for line in lines if not _EXEC.match(line)]
        if len(kept) < len(lines):
            count = len(lines) - len(kept)
            self._rewrite(todo, "".join(kept), f"took out {count} exec lines: {_TODO}")

    def _kept(self, path: Path) -> bool:
        return path in self.keep or any(parent in self.keep for parent in path.parents)

    def _new(self, path: Path) -> bool:
        try:
            return os.lstat(path).st_ctime >= self.since
        except OSError:
            return False

    def _wholly_new(self, folder: Path) -> bool:
        """Whether ``folder`` and everything in it was created or changed since: a folder of
        some other tool that only had files added keeps what it had."""
        return self._new(folder) and all(
            self._wholly_new(path) if path.is_dir() and not path.is_symlink() else self._new(path)
            for path in git_files.entries(folder)
        )

    def _remove_if_new(self, path: Path, why: str) -> None:
        if self._new(path):
            self._remove(path, why)

    def _remove(self, path: Path, why: str) -> None:
        self._tell(path, git_files.remove(path), "remove", why)

    def _rewrite(self, path: Path, text: str, why: str) -> None:
        self._tell(path, git_files.replace(path, text), "rewrite", why)

    def _tell(self, path: Path, failed: str | None, what: str, why: str) -> None:
        shown = os.path.relpath(path, self.root)
        could_not = f"could not {what} it ({failed}): " if failed else ""
        self.told.append(f"{shown}: {could_not}{why}")


def _controls(path: Path, kind: Kind) -> bool:
    """Whether git reads ``path`` (at the top of a repository's folder) as settings, or as
    where to find them."""
    if path.name == "commondir":  # `git worktree add` writes one naming the repository
        return kind != "worktree" or not points_to(path, path.parent.parent.parent)
    return path.name == "config.worktree"


def _written_by_git(name: str, kind: Kind) -> bool:
    return (
        name in _WRITTEN_BY_GIT
        or any(fnmatch.fnmatchcase(name, pattern) for pattern in _WRITTEN_BY_GIT_LIKE)
        or (kind == "worktree" and name in _WORKTREE_WRITES)
    )

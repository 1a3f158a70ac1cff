"""A cgroup per command, where the machine lets fabric make one: it caps the number of
processes (a fork bomb stops at the cap) and the memory of the whole command, and it lets
fabric kill every process the command started, even one that left its process group.

cgroup v2 is used where fabric's own cgroup may have children with the ``pids`` and
``memory`` controllers (the root cgroup, or a delegated subtree); otherwise the v1 ``pids``
and ``memory`` hierarchies. Where neither is writable (an unprivileged user without
delegation), commands still get their rlimits, and ``fabric doctor`` says so.

Each cgroup is named ``fabric-<pid>-<random>`` after the fabric process that made it, which
removes it after the command. A fabric killed with SIGKILL cannot: the next fabric process to
make a cgroup removes those left empty by processes no longer alive.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
from functools import cache
from pathlib import Path

from msgspec import Struct

from fabric.infrastructure.packs.run_ledger import pid_alive

_ROOT = Path("/sys/fs/cgroup")
_NAME = re.compile(r"fabric-(\d+)-[0-9a-f]+")


class CgroupLayout(Struct, frozen=True):
    """Where per-command cgroups go: ``version`` 1 or 2, and the parent folder per
    controller (v2: one folder for both)."""

    version: int
    pids_parent: Path
    memory_parent: Path | None


class CommandCgroup(Struct, frozen=True):
    """The cgroup folders of one command (one for v2, one per controller for v1)."""

    version: int
    folders: tuple[Path, ...]

    @property
    def procs_files(self) -> list[str]:
        return [str(f / "cgroup.procs") for f in self.folders]

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup, repeating while new ones appear."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                (self.folders[0] / "cgroup.kill").write_text("1")
        for _ in range(100):
            pids = self._pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def _pids(self) -> set[int]:
        found: set[int] = set()
        for folder in self.folders:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
        return found

    def remove(self) -> bool:
        """Remove the folders; False while a process (a zombie not yet reaped) remains."""
        done = True
        for folder in self.folders:
            try:
                folder.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


@cache
def layout() -> CgroupLayout | None:
    """Where this process may create cgroups, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    own: dict[str, str] = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path.lstrip("/")
    v1_pids = _ROOT / "pids"
    if (v1_pids / "cgroup.procs").exists():
        pids_parent = v1_pids / own.get("pids", "")
        memory_parent = _ROOT / "memory" / own.get("memory", "")
        if os.access(pids_parent, os.W_OK):
            memory = memory_parent if os.access(memory_parent, os.W_OK) else None
            return CgroupLayout(1, pids_parent, memory)
    v2 = _ROOT / own.get("", "")
    if (_ROOT / "cgroup.controllers").exists() and os.access(v2, os.W_OK):
        try:
            enabled = (v2 / "cgroup.subtree_control").read_text().split()
        except OSError:
            return None
        if "pids" in enabled:
            return CgroupLayout(2, v2, v2 if "memory" in enabled else None)
    return None


def create(processes: int, memory_bytes: int) -> CommandCgroup | None:
    """A fresh cgroup capped at ``processes`` and ``memory_bytes``, or None when the machine
    does not allow it."""
    where = layout()
    if where is None:
        return None
    _remove_stale(where)
    name = f"fabric-{os.getpid()}-{secrets.token_hex(4)}"
    folders: list[Path] = []
    try:
        pids = where.pids_parent / name
        pids.mkdir()
        folders.append(pids)
        (pids / "pids.max").write_text(str(processes))
        if where.memory_parent is not None:
            if where.version == 2:
                (pids / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):  # absent without swap accounting
                    (pids / "memory.swap.max").write_text("0")
            else:
                memory = where.memory_parent / name
                memory.mkdir()
                folders.append(memory)
                (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
    except OSError:
        CommandCgroup(where.version, tuple(folders)).remove()
        return None
    return CommandCgroup(where.version, tuple(folders))


@cache
def _remove_stale(where: CgroupLayout) -> None:
    """Once per process: remove the cgroups that fabric processes no longer alive left behind
    (killed with SIGKILL, they could not). ``rmdir`` removes only an empty cgroup, so one that
    still holds a process stays; so does one whose creator's pid now names another process."""
    parents = {where.pids_parent, where.memory_parent}  # the same folder for v2
    for parent in (p for p in parents if p is not None):
        for folder in parent.glob("fabric-*"):
            found = _NAME.fullmatch(folder.name)
            if found and not pid_alive(int(found[1])):
                with contextlib.suppress(OSError):
                    folder.rmdir()


def describe() -> str | None:
    """``"v1"``/``"v2"`` with the controllers in use, or None."""
    where = layout()
    if where is None:
        return None
    controllers = "pids+memory" if where.memory_parent is not None else "pids"
    return f"v{where.version} ({controllers})"

"""Runs one command under the pack's confinement: the CommandRunner adapter.

Every command goes through the launcher (``launcher.py``) in a new session, with stdin closed,
its output in a temporary file (an orphan holding the output open cannot hang fabric), the
resource limits, a cgroup where the machine allows one, and one of the backends: bubblewrap,
Landlock + seccomp, or none. On a timeout, a flood of output or cancellation fabric asks the
launcher to kill everything under it, then kills the process group and the cgroup too.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import marshal
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import IO, Any, Literal

from msgspec import Struct
from msgspec.structs import replace

from fabric.application.commands import CommandOutcome
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import SandboxError
from fabric.infrastructure.packs import git_audit, git_files

from . import cgroup, seccomp
from .host_code import pins
from .launcher import LAUNCH_FAILED, PREFIX
from .profile import bwrap_args, hidden_paths, landlock_rules

LAUNCHER = str(Path(__file__).with_name("launcher.py"))
OUTPUT_BYTES = 1_000_000
OUTPUT_KILL_BYTES = 32_000_000
"""A command whose output passes this size is killed (the model sees the first MB anyway)."""
_MiB = 1024 * 1024
CTIME_MARGIN = 1.0
"""Seconds before a command's start from which the git audit counts a change as the
command's: a file's ctime comes from the kernel's coarse clock (some milliseconds behind
time.time()), and some file systems keep whole seconds. The price: a control file the user
changed in .git in the second before a command started is removed too, and the removal is
told (in the command's output), never silent."""
_STOP_GRACE = 1.0
_KILL_GRACE = 2.0
_POLL = 0.2


class Backend(Struct, frozen=True):
    """The chosen confinement and why it was chosen."""

    name: Literal["bwrap", "landlock", "none"]
    reason: str
    bwrap: str | None = None
    landlock_abi: int | None = None
    namespaces: bool = False
    """Landlock: the probe found that commands can get namespaces of their own (root, or a
    user namespace where the kernel lets users make one)."""

    @property
    def private_mounts(self) -> bool:
        """Landlock with namespaces: the command also gets mount and pid namespaces of its own
        with the host read-only and a fresh /proc (Landlock governs neither metadata,
        /dev/shm nor which processes /proc lists)."""
        return self.name == "landlock" and self.namespaces


@cache
def _filter(network: bool) -> str:
    return seccomp.build_filter(network=network).hex()


def rlimits(sandbox: SandboxSettings) -> dict[str, int]:
    """The per-process limits; the process count only where the kernel applies it (it never
    does to root, whose fork bombs the cgroup bounds instead)."""
    res = sandbox.resources
    limits = {
        "cpu_seconds": res.cpu_seconds,
        "address_space": res.memory_mb * _MiB,
        "file_size": res.file_size_mb * _MiB,
        "open_files": res.open_files,
        "core": 0,
    }
    if os.getuid() != 0:  # the limit counts all of the user's processes: add those running
        limits["processes"] = res.processes + _processes_of(os.getuid())
    return limits


SPEC_ARG_CHARS = 64 * 1024
"""The launcher's spec goes in arguments of at most this many characters: Linux refuses any one
argument over 128 KiB (E2BIG), and under Landlock the spec lists every entry of each folder on
the way to a hidden place (``profile._read_grants``), which in a crowded /tmp or home folder
runs past it. Together the arguments may take what the system allows (ARG_MAX, 2 MiB here)."""


def launch_argv(
    backend: Backend,
    sandbox: SandboxSettings,
    *,
    workspace: Path,
    hidden: Sequence[Path],
    temp: Path,
    command: Sequence[str],
    cgroups: Sequence[str],
    search_path: str = "",
    read_only: Sequence[Path] = (),
    chdir: Path | None = None,
    readable: Sequence[Path] = (),
) -> list[str]:
    """The launcher's command line for ``command`` under ``backend`` (``search_path``: the
    command's PATH, whose folders must stay visible; ``read_only``: host code inside the
    workspace; ``chdir``: where it starts under bubblewrap, default the workspace;
    ``readable``: folders outside the workspace it may read, see ``bwrap_args``; Landlock
    lets commands read every place that is not hidden anyway)."""
    spec: dict[str, Any] = {
        "mode": backend.name,
        "limits": rlimits(sandbox),
        "cgroups": list(cgroups),
        "drop_caps": backend.name != "none",
        "parent": os.getpid(),  # the launcher dies with fabric (launcher.py)
    }
    if backend.name != "none" and seccomp.supported():
        spec["seccomp"] = _filter(sandbox.network)
    if backend.name == "bwrap":
        assert backend.bwrap is not None
        spec["argv"] = bwrap_args(
            backend.bwrap,
            workspace=workspace,
            hidden=hidden,
            network=sandbox.network,
            command=command,
            programs=[command[0], *search_path.split(os.pathsep)],
            read_only=read_only,
            chdir=chdir,
            readable=readable,
        )
    else:
        spec["argv"] = list(command)
    if backend.name == "landlock":
        spec["landlock"] = landlock_rules(
            workspace=workspace, temp=temp, hidden=hidden, network=sandbox.network
        )
        if backend.private_mounts:
            inside = [p for p in hidden if p == workspace or workspace in p.parents]
            spec["private_mounts"] = {
                "writable": [str(workspace), str(temp)],
                "pinned": [str(p) for p in pins(read_only, workspace)],
                "readonly": [str(p) for p in read_only],
                "hidden": [str(p) for p in inside],
            }
    encoded = marshal.dumps(spec).hex()
    pieces = [encoded[at : at + SPEC_ARG_CHARS] for at in range(0, len(encoded), SPEC_ARG_CHARS)]
    return [sys.executable, "-I", "-S", "-B", LAUNCHER, *pieces]


class SandboxedCommands(Struct):
    """The CommandRunner for one run: its workspace, its pack's sandbox, one backend."""

    backend: Backend
    sandbox: SandboxSettings
    workspace: Path
    protected: tuple[Path, ...] = ()
    """Hidden from commands (with the credential stores in the home folder); looked up again
    for every command, so a folder created or deleted during the run is handled."""
    read_only: tuple[Path, ...] = ()
    """Host code inside the workspace, as found when the run started (``host_code.py``)."""
    readable: tuple[Path, ...] = ()
    """Folders outside the workspace commands may read: the pack's configured skill folders
    (ADR 0027), bound read-only where the backend would otherwise hide them (/tmp)."""
    unaudited: bool = False
    """A command started whose git audit has not run (it was cut short): the run's end
    audits then (``compose.Runner``)."""

    def __post_init__(self) -> None:
        self.workspace = self.workspace.resolve()
        if self.read_only and self.backend.name == "landlock" and not self.backend.private_mounts:
            raise SandboxError(
                "this machine's Landlock confinement cannot keep files inside the workspace "
                f"read-only, and {self.workspace} holds code fabric or your tools run later "
                f"({', '.join(p.name for p in self.read_only[:3])}, ...)",
                hint="install bubblewrap (apt-get install bubblewrap), or use a --workspace "
                "that holds no fabric.yaml, pack code, virtualenv or .git",
            )

    @property
    def confinement(self) -> Mapping[str, Any]:
        res = self.sandbox.resources
        return {
            "backend": self.backend.name,
            "reason": self.backend.reason,
            "network": self.sandbox.network,
            "seccomp": self.backend.name != "none" and seccomp.supported(),
            "landlock_abi": self.backend.landlock_abi,
            "private_mounts": self.backend.private_mounts,
            "cgroup": cgroup.describe(),
            "limits": res.model_dump(),
        }

    async def run(
        self, argv: Sequence[str], *, env: Mapping[str, str], timeout: float
    ) -> CommandOutcome:
        res = self.sandbox.resources
        started = time.time() - CTIME_MARGIN
        group = cgroup.create(res.processes, res.memory_mb * _MiB)
        temp = Path(tempfile.mkdtemp(prefix="fabric-cmd-"))
        self.unaudited = True
        try:
            command = launch_argv(
                self.backend,
                self.sandbox,
                workspace=self.workspace,
                hidden=hidden_paths(self.protected),
                temp=temp,
                command=argv,
                cgroups=group.procs_files if group else [],
                search_path=env.get("PATH", ""),
                read_only=[p for p in self.read_only if os.path.lexists(p)],
                readable=self.readable,
            )
            child_env = dict(env)
            if self.backend.name != "bwrap":
                child_env["TMPDIR"] = str(temp)
            outcome = await _run(command, self.workspace, child_env, timeout, group)
        finally:
            if group is not None:
                await _remove(group)
            git_files.remove(temp)  # however the command locked it (chmod 0, 555)
        return await self._audited(outcome, started)

    async def _audited(self, outcome: CommandOutcome, started: float) -> CommandOutcome:
        """``outcome``, telling what the git audit removed after the command: control files
        it planted in a repository's ``.git`` (``packs/git_audit.py``). Nothing of the command runs
        any more (its cgroup is empty), so nothing can plant after the look."""
        kept = self.read_only if self.backend.name != "none" else ()  # unconfined: no mounts
        removed = await asyncio.to_thread(git_audit.sweep, self.workspace, started, kept)
        self.unaudited = False
        if not removed:
            return outcome
        lines = [f"- {line}" for line in removed]
        note = "fabric removed what this command created or changed in .git that git on your "
        note += "machine would act on (run programs from, or take settings from):"
        return replace(outcome, output="\n".join([outcome.output.rstrip("\n"), note, *lines]))


async def _run(
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    group: cgroup.CommandCgroup | None,
) -> CommandOutcome:
    with tempfile.TemporaryFile() as out:
        try:
            proc = await asyncio.create_subprocess_exec(
                *command,
                cwd=cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError) and exc.errno == errno.E2BIG:
                raise SandboxError(
                    "cannot start the sandbox launcher: what it must be told is more than the "
                    "system lets a program be given (a folder on the way to a place commands "
                    "may not read holds too many entries for Landlock to grant one by one)",
                    hint="install bubblewrap (apt-get install bubblewrap), or clear out the "
                    "crowded folder (often /tmp)",
                ) from None
            raise SandboxError(f"cannot start the sandbox launcher: {exc}") from None
        try:
            stopped = await _wait(proc, out, timeout)
        finally:  # also when cancelled: leave nothing running behind us
            await _stop(proc, group)
        text = _read_capped(out)
    if proc.returncode == LAUNCH_FAILED and text.startswith(PREFIX):
        raise SandboxError(
            f"the sandbox could not start the command: {text[len(PREFIX) :].strip()}",
            hint="run `fabric doctor` to see what confinement this machine supports",
        )
    return CommandOutcome(None if stopped else proc.returncode, text, stopped)


async def _wait(proc: asyncio.subprocess.Process, out: IO[bytes], limit: float) -> str | None:
    """Wait for ``proc`` to exit; if it runs past ``limit`` seconds or floods its output,
    return why it must be stopped."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    waiter = asyncio.ensure_future(proc.wait())
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return f"killed after {limit:g}s timeout"
            done, _ = await asyncio.wait({waiter}, timeout=min(remaining, _POLL))
            if done:
                return None
            if os.fstat(out.fileno()).st_size > OUTPUT_KILL_BYTES:
                return f"killed: output passed {OUTPUT_KILL_BYTES // 1_000_000} MB"
    finally:
        waiter.cancel()


async def _stop(proc: asyncio.subprocess.Process, group: cgroup.CommandCgroup | None) -> None:
    """Ask the launcher to kill what it started, then make sure: the process group and the
    cgroup get SIGKILL."""
    if proc.returncode is None:
        with contextlib.suppress(OSError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), _STOP_GRACE)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    if group is not None:
        group.kill_all()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), _KILL_GRACE)


async def _remove(group: cgroup.CommandCgroup) -> None:
    for _ in range(50):  # killed processes leave the cgroup once reaped
        if group.remove():
            return
        group.kill_all()
        await asyncio.sleep(0.02)


def _read_capped(out: IO[bytes]) -> str:
    size = out.seek(0, os.SEEK_END)
    out.seek(0)
    data = out.read(OUTPUT_BYTES)
    text = data.decode("utf-8", errors="replace")
    if size > OUTPUT_BYTES:
        text += f"\n[... output cut at {OUTPUT_BYTES} of {size} bytes ...]"
    return text


def _processes_of(uid: int) -> int:
    """Tasks (processes and their threads) of ``uid`` now: RLIMIT_NPROC counts both, and
    zombies too (the kernel releases a task's count only when its parent reaps it), so they
    are counted here: left out, they would take their share of ``resources.processes``."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
    return count

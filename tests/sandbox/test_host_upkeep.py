"""What fabric keeps right on the host between and around commands, with the real kernel: the
cgroups a killed fabric left behind, and the process limit of a non-root user."""

from __future__ import annotations

import contextlib
import os
import pwd
import resource
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabric.config.schema import ResourceLimits, SandboxSettings
from fabric.infrastructure.sandbox import cgroup
from fabric.infrastructure.sandbox.runner import rlimits

from .host import user_exists

NEXT_FABRIC = """
from fabric.infrastructure.sandbox import cgroup
group = cgroup.create(4, 64 << 20)
assert group is not None and group.remove()
"""


def _dead_pid() -> int:
    with subprocess.Popen(["true"]) as proc:
        proc.wait()
    return proc.pid


@pytest.mark.skipif(cgroup.layout() is None, reason="no writable cgroup on this machine")
def test_the_next_fabric_removes_the_empty_cgroups_a_killed_one_left() -> None:
    """A fabric killed with SIGKILL leaves its commands' cgroups (``fabric-PID-RANDOM``); the
    next fabric process to make a cgroup removes them, but not one whose creator still runs,
    nor one that still holds a process."""
    where = cgroup.layout()
    assert where is not None
    parents = [p for p in dict.fromkeys((where.pids_parent, where.memory_parent)) if p]
    dead = _dead_pid()
    names = {
        "stale": f"fabric-{dead}-{secrets.token_hex(4)}",
        "busy": f"fabric-{dead}-{secrets.token_hex(4)}",
        "creator alive": f"fabric-{os.getpid()}-{secrets.token_hex(4)}",
    }
    made = [parent / name for parent in parents for name in names.values()]
    for folder in made:
        folder.mkdir()
    busy = where.pids_parent / names["busy"]
    with subprocess.Popen(["sleep", "60"]) as sleeper:
        try:
            (busy / "cgroup.procs").write_text(str(sleeper.pid))
            done = subprocess.run(
                [sys.executable, "-c", NEXT_FABRIC], capture_output=True, text=True, check=False
            )
            assert done.returncode == 0, done.stderr
            left = {key for key, name in names.items() if (parents[0] / name).exists()}
            assert left == {"busy", "creator alive"}
            assert not any((p / names["stale"]).exists() for p in parents)
        finally:
            sleeper.kill()
            sleeper.wait()
            for folder in made:
                with contextlib.suppress(FileNotFoundError):
                    folder.rmdir()


ZOMBIES = 20
PROCESSES = 8


def _forks_allowed(read_back: int) -> None:
    """In a forked child (as nobody when the test runs as root): make ``ZOMBIES`` zombies, set
    the process limit fabric computes for ``PROCESSES`` processes, fork until the kernel
    refuses, write how many forks worked to ``read_back``, and reap everything."""
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.setgroups([])
        os.setresgid(nobody.pw_gid, nobody.pw_gid, nobody.pw_gid)
        os.setresuid(nobody.pw_uid, nobody.pw_uid, nobody.pw_uid)
    zombies = []
    for _ in range(ZOMBIES):
        child = os.fork()
        if child == 0:
            os._exit(0)
        zombies.append(child)
    deadline = time.monotonic() + 10
    while not all(_state(pid) == "Z" for pid in zombies) and time.monotonic() < deadline:
        time.sleep(0.01)
    hold_r, hold_w = os.pipe()
    limit = rlimits(SandboxSettings(resources=ResourceLimits(processes=PROCESSES)))["processes"]
    resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
    held = []
    for _ in range(2 * PROCESSES):
        try:
            child = os.fork()
        except OSError:
            break
        if child == 0:
            os.close(hold_w)
            os.read(hold_r, 1)  # until the parent closes its end
            os._exit(0)
        held.append(child)
    os.write(read_back, str(len(held)).encode())
    os.close(hold_w)
    for pid in zombies + held:
        os.waitpid(pid, 0)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(
    os.geteuid() == 0 and not user_exists("nobody"),
    reason="root is exempt from the process limit, and there is no user nobody to become",
)
def test_a_users_zombies_do_not_shrink_a_commands_process_budget() -> None:
    """The kernel counts a user's zombies against RLIMIT_NPROC until they are reaped, so the
    limit fabric sets (the command's budget plus the user's tasks) counts them too: a user
    with unreaped children still gets ``resources.processes`` for each command."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            os.close(read_end)
            _forks_allowed(write_end)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        forks = answer.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and forks
    # PROCESSES exactly, but for the user's other processes starting or ending meanwhile
    assert int(forks) >= PROCESSES - 2, f"only {forks} of {PROCESSES} processes could start"

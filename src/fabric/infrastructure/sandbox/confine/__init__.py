"""The launcher's second half, for the Landlock and none backends (bubblewrap does this work
itself): become a child subreaper, fork the command, confine the child (no_new_privs, Landlock,
no capabilities, seccomp) and exec it; then wait, and kill whatever the command left behind.

With ``private_mounts`` in the spec (the Landlock backend where namespaces can be had), the
launcher first takes a user namespace that maps the user to itself (when not root: it gives
the rights to make the others), and a pid namespace for its child. That child is pid 1 there:
it takes a mount namespace (the host read-only, the writable places bound back, a fresh /proc
that lists only the namespace's processes), forks the command, reaps every process of the
namespace, and exits with the command's status; the kernel then kills whatever is left in it.

    launcher (subreaper; user ns)  ->  pid 1 (mount ns, /proc)  ->  command (Landlock, seccomp)

The launcher stays in the host's mount namespace, so it still sees every process under it in
the host's /proc (with host pids) when it has to kill them.

Standard library only, like ``launcher.py``, which imports this package by path (its folder on
``sys.path``: here the package is plain ``confine``, so its modules import each other
relatively). This module supervises; the confining is done by ``landlock.py``,
``privileges.py`` (capabilities, seccomp) and ``namespaces.py`` (namespaces, mounts, /proc),
with the libc calls and the way a failure ends in ``syscalls.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from . import syscalls
from .landlock import apply_landlock
from .namespaces import mount_proc, new_pid_namespace, private_mounts
from .privileges import drop_capabilities, install_seccomp
from .syscalls import check, libc

_PR_SET_CHILD_SUBREAPER, _PR_SET_PDEATHSIG = 36, 1
LAUNCHER_GONE = 137
"""Pid 1's exit status when the launcher died before pid 1 could tie its life to it."""
_STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _descendants(root: int) -> list[int]:
    """Every live process below ``root``, from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        current = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == current:
                found.append(pid)
                frontier.append(pid)
    return found


def kill_everything() -> None:
    """Kill and reap every process under the launcher, repeating while any remain (a process
    forking while we sweep is caught in the next round)."""
    me = os.getpid()
    for _ in range(200):
        pids = _descendants(me)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _reap(block=bool(pids))
        if not pids:
            return


def _reap(*, block: bool) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        block = False


def supervise(spec: dict[str, Any], on_failure: Callable[[str], NoReturn]) -> NoReturn:
    """Fork the confined command, wait for it, then leave nothing behind."""
    syscalls.fail = on_failure
    check(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")

    def stop(signum: int, _frame: object) -> None:
        kill_everything()
        os._exit(128 + signum)

    for signum in _STOP:
        signal.signal(signum, stop)
    if spec.get("private_mounts"):
        new_pid_namespace()
    alive, held = os.pipe()  # held open by this launcher alone: EOF once it is gone
    child = os.fork()
    if child == 0:
        for signum in _STOP:
            signal.signal(signum, signal.SIG_DFL)
        os.close(held)
        if spec.get("private_mounts"):
            _init(spec, alive)
        os.close(alive)
        _confine_and_exec(spec)
    os.close(alive)
    status = _wait_for(child)
    kill_everything()
    os._exit(status)


def _init(spec: dict[str, Any], alive: int) -> NoReturn:
    """Pid 1 of the command's pid namespace: private mounts and a fresh /proc, then the
    command; reap every process re-parented here, and exit with the command's status when it
    ends (the kernel then kills the rest of the namespace). Signals from inside the namespace
    cannot reach it: pid 1 gets only those it has a handler for, and it has none. Should the
    launcher die (SIGKILL), the kernel kills pid 1, and with it the whole namespace."""
    check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    os.set_blocking(alive, False)
    try:  # the launcher died before the line above: no signal will come, so stop here
        if os.read(alive, 1) == b"":
            os._exit(LAUNCHER_GONE)
    except BlockingIOError:
        pass  # still there: from now on its death kills this namespace
    os.close(alive)
    private_mounts(spec["private_mounts"])
    mount_proc()
    command = os.fork()
    if command == 0:
        _confine_and_exec(spec)
    os._exit(_wait_for(command))


def _confine_and_exec(spec: dict[str, Any]) -> NoReturn:
    if spec.get("landlock"):
        apply_landlock(spec["landlock"])
    if spec.get("drop_caps"):
        drop_capabilities()
    if spec.get("seccomp"):
        install_seccomp(bytes.fromhex(spec["seccomp"]))
    argv = spec["argv"]
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"cannot start {argv[0]}: {exc.strerror}\n")
        os._exit(127)


def _wait_for(child: int) -> int:
    """Reap children (orphans are re-parented to us) until ``child`` ends; its exit status,
    128 + the signal number when a signal killed it."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == child:
            status = os.waitstatus_to_exitcode(wait_status)
            return status if status >= 0 else 128 - status

"""The launcher: the small program between fabric and a confined command.

fabric starts it as ``python -I -S -B launcher.py SPEC...`` (standard library only, so it starts
in a few milliseconds and imports nothing from the workspace). SPEC is a dict in ``marshal``
format, hex-encoded (``marshal`` is built in; ``json`` alone would add 10 ms to every command),
in as many arguments as it takes (``runner.SPEC_ARG_CHARS``: the kernel limits each one).
The launcher

1. dies with fabric: the kernel sends it a signal when fabric's process ends, however it ends
   (``PR_SET_PDEATHSIG``; SIGKILL of fabric included). Bubblewrap keeps that (and arms its
   own, ``--die-with-parent``); its pid namespace takes every process of the command with it.
   The supervisor below gets SIGTERM and kills everything under it. Should fabric already be
   gone when the launcher starts (its parent is then another process), it starts nothing;
2. joins the command's cgroups (so every process the command starts is counted and can be
   killed as one) and sets the resource limits (CPU time, address space, file size, open
   files, processes, no core dumps);
3. with bubblewrap: puts the seccomp filter in a memory file and becomes ``bwrap`` (exec), which
   builds the namespaces, drops every capability and installs the filter (``--seccomp FD``);
4. otherwise: becomes a child subreaper, forks, and in the child sets no_new_privs, applies
   Landlock (Landlock backend), drops every capability, installs the seccomp filter and execs
   the command. The launcher waits; when the command ends, or when fabric asks it to stop
   (SIGTERM), it kills every process left under it (orphans are re-parented to it) and exits
   with the command's status.

Failures of the launcher itself exit with status 125 and one line on stderr that starts with
``fabric-sandbox:``, so fabric can tell them from the command's own failures.
"""

from __future__ import annotations

import importlib
import marshal
import os
import resource
import sys

TYPE_CHECKING = False  # typing costs 6 ms at start-up, which every command pays
if TYPE_CHECKING:
    from typing import Any, NoReturn

LAUNCH_FAILED = 125
PREFIX = "fabric-sandbox:"
_PR_SET_PDEATHSIG, _SIGKILL, _SIGTERM = 1, 9, 15  # signal imports enum: 0.5 ms

_RLIMITS = {
    "cpu_seconds": resource.RLIMIT_CPU,
    "address_space": resource.RLIMIT_AS,
    "file_size": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
    "processes": resource.RLIMIT_NPROC,
    "core": resource.RLIMIT_CORE,
}


def fail(message: str) -> NoReturn:
    sys.stderr.write(f"{PREFIX} {message}\n")
    sys.stderr.flush()
    os._exit(LAUNCH_FAILED)


def die_with_parent(parent: int, signum: int) -> None:
    """Have the kernel send ``signum`` when the parent (fabric, pid ``parent``) exits; the
    check afterwards closes the gap where fabric died before this was asked for. ctypes (a few
    milliseconds to import) is the only way to reach prctl from the standard library."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        fail(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != parent:
        fail(f"fabric (pid {parent}) exited before the command started")


def join_cgroups(procs_files: list[str]) -> None:
    for path in procs_files:
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        except OSError as exc:
            fail(f"cannot join cgroup {path}: {exc.strerror}")


def set_limits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        try:
            resource.setrlimit(_RLIMITS[name], (value, value))
        except (OSError, ValueError) as exc:
            fail(f"cannot set the {name} limit to {value}: {exc}")


def exec_bwrap(spec: dict[str, Any]) -> NoReturn:
    argv: list[str] = list(spec["argv"])
    if spec.get("seccomp"):
        fd = os.memfd_create("fabric-seccomp", 0)  # inherited by bwrap
        os.write(fd, bytes.fromhex(spec["seccomp"]))
        os.lseek(fd, 0, os.SEEK_SET)
        argv = [str(fd) if a == "{seccomp_fd}" else a for a in argv]
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        fail(f"cannot start bubblewrap ({argv[0]}): {exc.strerror}")


def main() -> NoReturn:
    if len(sys.argv) < 2:
        fail("usage: launcher.py SPEC... (hex of a marshalled dict, in pieces)")
    spec = marshal.loads(bytes.fromhex("".join(sys.argv[1:])))  # noqa: S302 (fabric's own)
    if spec.get("parent"):  # bwrap: its pid namespace goes too; the supervisor cleans up
        die_with_parent(spec["parent"], _SIGKILL if spec["mode"] == "bwrap" else _SIGTERM)
    join_cgroups(spec.get("cgroups", []))
    set_limits(spec.get("limits", {}))
    if spec["mode"] == "bwrap":
        exec_bwrap(spec)
    # the confine package, beside us: only the Landlock and none backends need it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    importlib.import_module("confine").supervise(spec, fail)
    fail("the command's supervisor returned")


if __name__ == "__main__":
    main()

"""The launcher: the small program between fabric and a confined command.

fabric starts it as ``python -I -S -B launcher.py SPEC`` (standard library only, so it starts in
a few milliseconds and imports nothing from the workspace). SPEC is a dict in ``marshal``
format, hex-encoded (``marshal`` is built in; ``json`` alone would add 10 ms to every command).
The launcher

1. joins the command's cgroups (so every process the command starts is counted and can be
   killed as one) and sets the resource limits (CPU time, address space, file size, open
   files, processes, no core dumps);
2. with bubblewrap: puts the seccomp filter in a memory file and becomes ``bwrap`` (exec), which
   builds the namespaces, drops every capability and installs the filter (``--seccomp FD``);
3. otherwise: becomes a child subreaper, forks, and in the child sets no_new_privs, applies
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
    if len(sys.argv) != 2:
        fail("usage: launcher.py SPEC (hex of a marshalled dict)")
    spec = marshal.loads(bytes.fromhex(sys.argv[1]))  # noqa: S302 (written by fabric itself)
    join_cgroups(spec.get("cgroups", []))
    set_limits(spec.get("limits", {}))
    if spec["mode"] == "bwrap":
        exec_bwrap(spec)
    # ctypes and signal: only the Landlock and none backends need them (confine.py, beside us)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    importlib.import_module("confine").supervise(spec, fail)
    fail("the command's supervisor returned")


if __name__ == "__main__":
    main()

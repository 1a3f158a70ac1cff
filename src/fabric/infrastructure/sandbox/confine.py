"""The launcher's second half, for the Landlock and none backends (bubblewrap does this work
itself): become a child subreaper, fork the command, confine the child (no_new_privs, Landlock,
no capabilities, seccomp) and exec it; then wait, and kill whatever the command left behind.

Standard library only, like ``launcher.py``, which imports it by path. fabric's own process
imports it too, for ``landlock_abi``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn

_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_PR_CAPBSET_DROP, _PR_SET_SECCOMP, _PR_SET_NO_NEW_PRIVS = 24, 22, 38
_PR_SET_CHILD_SUBREAPER, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 36, 47, 4
_SECCOMP_MODE_FILTER = 2
_O_PATH = 0o10000000
_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
_CLONE_NEWNS, _MS_RDONLY, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20000, 1, 4096, 1 << 14, 1 << 18

# Landlock access rights (linux/landlock.h) and the ABI that introduced the later ones.
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int


def _raise(message: str) -> NoReturn:
    raise OSError(message)


fail: Callable[[str], NoReturn] = _raise
"""How a failure ends things: the launcher's exit with status 125 once ``supervise`` runs."""


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        fail(f"{what} failed: {os.strerror(err)} (errno {err})")
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is off or unknown."""
    version = _libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(1)
    )
    return int(version) if version > 0 else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def apply_landlock(rules: dict[str, Any]) -> None:
    """Restrict this process (and what it execs) to the given paths.

    ``rules``: ``read`` paths (read and execute beneath), ``write`` folders (everything
    beneath), ``write_files`` single files (read/write), ``network`` (False: no TCP)."""
    abi = landlock_abi()
    if abi < 1:
        fail("Landlock is not available in this kernel")
    handled = (1 << 13) - 1  # ABI 1: execute .. make_sym
    if abi >= 2:
        handled |= _FS_REFER
    if abi >= 3:
        handled |= _FS_TRUNCATE
    if abi >= 5:
        handled |= _FS_IOCTL_DEV
    attr = _RulesetAttr(handled, 0, 0)
    size = 8
    if abi >= 4 and not rules["network"]:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
        size = 16
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        size = 24
    ruleset = _check(
        _libc.syscall(
            ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
            ctypes.byref(attr),
            ctypes.c_size_t(size),
            ctypes.c_uint32(0),
        ),
        "landlock_create_ruleset",
    )
    read = _FS_READ | (_FS_IOCTL_DEV & handled)
    for path in rules["read"]:
        _add_rule(ruleset, path, read & handled)
    for path in rules["write"]:
        _add_rule(ruleset, path, handled)
    for path in rules["write_files"]:
        _add_rule(ruleset, path, (_FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE) & handled)
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    _check(
        _libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ruleset, ctypes.c_uint32(0)),
        "landlock_restrict_self",
    )
    os.close(ruleset)


def _add_rule(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, _O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone since fabric listed it: nothing to allow
    try:
        if not os.path.isdir(path):
            access &= _FILE_RIGHTS
        rule = _PathBeneath(access, fd)
        _check(
            _libc.syscall(
                ctypes.c_long(_SYS_LANDLOCK_ADD_RULE),
                ctypes.c_int(ruleset),
                ctypes.c_int(1),  # LANDLOCK_RULE_PATH_BENEATH
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            ),
            f"landlock_add_rule({path})",
        )
    finally:
        os.close(fd)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def private_mounts(plan: dict[str, list[str]]) -> None:
    """In a mount namespace of its own (root only): the whole tree read-only, the ``writable``
    folders bound read-write again, a private /dev/shm, and the ``hidden`` places inside
    them covered. Landlock alone governs neither metadata (chmod, chown, timestamps) nor
    /dev/shm, nor can it take a subfolder back from a writable folder; read-only mounts can."""
    _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _setattr("/", _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0))
    _mount("tmpfs", "/dev/shm", "tmpfs", 0)
    for path in plan["writable"]:
        _mount(path, path, None, _MS_BIND | _MS_REC)
        _setattr(path, _MountAttr(0, _MOUNT_ATTR_RDONLY, 0, 0))
    for path in plan["hidden"]:
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", _MS_RDONLY)
        elif os.path.exists(path):
            _mount("/dev/null", path, None, _MS_BIND)
            _setattr(path, _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0))
    os.chdir(os.getcwd())  # the working folder still pointed into the mount now covered


def _mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    def raw(text: str | None) -> bytes | None:
        return text.encode() if text is not None else None

    result = _libc.mount(raw(source), raw(target), raw(fstype), ctypes.c_ulong(flags), None)
    _check(result, f"mount({source}, {target})")


def _setattr(path: str, attr: _MountAttr) -> None:
    result = _libc.syscall(
        ctypes.c_long(_SYS_MOUNT_SETATTR),
        ctypes.c_int(_AT_FDCWD),
        path.encode(),
        ctypes.c_uint(_AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(result, f"mount_setattr({path})")


def drop_capabilities() -> None:
    """Empty the bounding and ambient sets: an exec'd program (even as root) gets no
    capabilities, so it cannot remount, load modules, change the network or write /proc/sys."""
    last = 40
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        pass
    for cap in range(last + 1):
        # EINVAL: a capability this kernel does not know; EPERM: already without
        # CAP_SETPCAP (not root), so the set cannot grow either
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() not in (1, 22):
            _check(-1, f"prctl(CAPBSET_DROP, {cap})")
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp(program: bytes) -> None:
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    _check(
        _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
        "installing the seccomp filter",
    )


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
    global fail
    fail = on_failure
    _check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")

    def stop(signum: int, _frame: object) -> None:
        kill_everything()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    program = bytes.fromhex(spec["seccomp"]) if spec.get("seccomp") else None
    child = os.fork()
    if child == 0:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        if spec.get("private_mounts"):
            private_mounts(spec["private_mounts"])
        if spec.get("landlock"):
            apply_landlock(spec["landlock"])
        if spec.get("drop_caps"):
            drop_capabilities()
        if program:
            install_seccomp(program)
        argv = spec["argv"]
        try:
            os.execv(argv[0], argv)
        except OSError as exc:
            sys.stderr.write(f"cannot start {argv[0]}: {exc.strerror}\n")
            os._exit(127)
    status = 0
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child:
            status = os.waitstatus_to_exitcode(wait_status)
            kill_everything()
            break
    os._exit(status if status >= 0 else 128 - status)

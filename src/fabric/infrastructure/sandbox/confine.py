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

Standard library only, like ``launcher.py``, which imports it by path. fabric's own process
imports it too, for ``landlock_abi``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import stat
import sys
from collections.abc import Callable
from typing import Any, NoReturn

_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_PR_CAPBSET_DROP, _PR_SET_SECCOMP, _PR_SET_NO_NEW_PRIVS = 24, 22, 38
_PR_SET_CHILD_SUBREAPER, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 36, 47, 4
_PR_SET_PDEATHSIG = 1
LAUNCHER_GONE = 137
"""Pid 1's exit status when the launcher died before pid 1 could tie its life to it."""
_SECCOMP_MODE_FILTER = 2
_O_PATH = 0o10000000
_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x20000, 0x10000000, 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 1 << 14, 1 << 18
_ENOENT, _ENOTDIR = 2, 20
_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
"""Kernel settings under /proc that root could write even without capabilities (as bwrap)."""
_STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

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
    beneath), ``write_files`` single files (read/write), ``network`` (False: no TCP). Paths
    are real ones, as fabric listed them (``profile.landlock_rules``): one that has become a
    symlink since, or has one on its way, is not granted."""
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
    """Allow ``access`` beneath ``path``, only if it is still what fabric listed, with no
    symlink in it: Landlock allows what a link leads to (a hidden place, a folder holding one,
    ``/``), and a link may have been put there since."""
    try:
        fd = os.open(path, _O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return  # gone since fabric listed it: nothing to allow
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISLNK(mode) or not _named(fd, path):
            return
        if not stat.S_ISDIR(mode):
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


def _named(fd: int, path: str) -> bool:
    """Whether the kernel's name for ``fd`` is ``path``: then no folder on the way to it was a
    link. Without a /proc to ask, only the last name (opened without following) is checked."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == path
    except OSError:
        return True


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def new_pid_namespace() -> None:
    """A pid namespace for this process's children; when not root, inside a user namespace
    that maps the user (and group) to itself (so files keep their owners and the command runs
    as the same user; after exec it has no capabilities in it)."""
    if os.geteuid() != 0:
        uid, gid = os.geteuid(), os.getegid()
        _check(_libc.unshare(_CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
        _write("/proc/self/setgroups", "deny")  # required before gid_map without privileges
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _check(_libc.unshare(_CLONE_NEWPID), "unshare(CLONE_NEWPID)")


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}")


def private_mounts(plan: dict[str, list[str]]) -> None:
    """In a mount namespace of its own: the whole tree read-only, the ``writable`` folders
    bound read-write again, the ``pinned`` folders inside them bound onto themselves (a mount
    point cannot be renamed away), the ``readonly`` files and folders bound read-only, a
    private /dev/shm, and the ``hidden`` places covered. Landlock alone governs neither
    metadata (chmod, chown, timestamps) nor /dev/shm, nor can it take a subfolder back from a
    writable folder; read-only mounts can. A path that vanished since fabric listed it is
    skipped (it has nothing left to protect)."""
    _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _setattr("/", _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0))
    _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV)
    for path in plan["writable"]:
        _mount(path, path, None, _MS_BIND | _MS_REC)
        _setattr(path, _MountAttr(0, _MOUNT_ATTR_RDONLY, 0, 0))
    for path in plan.get("pinned", []):
        _bind(path, read_only=False)
    for path in plan.get("readonly", []):
        _bind(path)
    for path in plan["hidden"]:  # a folder gets an empty tmpfs, anything else /dev/null
        if not _mount("tmpfs", path, "tmpfs", _MS_RDONLY, missing_ok=True):
            _bind(path, source="/dev/null")
    os.chdir(os.getcwd())  # the working folder still pointed into the mount now covered


def _bind(path: str, *, source: str | None = None, read_only: bool = True) -> None:
    """Bind ``source`` (default: the path itself) onto ``path``, read-only with everything
    beneath unless told otherwise; nothing when ``path`` is gone."""
    done = _mount(source or path, path, None, _MS_BIND | _MS_REC, missing_ok=True)
    if done and read_only:
        _setattr(path, _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0))


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, *, missing_ok: bool = False
) -> bool:
    """mount(2); False (with ``missing_ok``) when the target or source does not exist."""

    def raw(text: str | None) -> bytes | None:
        return text.encode() if text is not None else None

    result = _libc.mount(raw(source), raw(target), raw(fstype), ctypes.c_ulong(flags), None)
    if result < 0 and missing_ok and ctypes.get_errno() in (_ENOENT, _ENOTDIR):
        return False
    _check(result, f"mount({source}, {target})")
    return True


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


def mount_proc() -> None:
    """For pid 1 of a new pid namespace: a /proc of that namespace over the host's, with the
    kernel's settings read-only (``_PROC_READ_ONLY``), as bubblewrap does."""
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for name in _PROC_READ_ONLY:
        _bind(f"/proc/{name}")


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
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
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

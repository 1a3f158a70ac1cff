"""Namespaces and mounts for the Landlock backend's ``private_mounts``: the user and pid
namespaces the launcher takes for its child, and, in that child (pid 1 of the new pid
namespace), a mount namespace with the host read-only, the writable places bound back, the
hidden ones covered, and a /proc of the namespace's own."""

from __future__ import annotations

import ctypes
import os

from . import syscalls
from .syscalls import check, libc

_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x20000, 0x10000000, 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 1 << 14, 1 << 18
_ENOENT, _ENOTDIR = 2, 20
_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
"""Kernel settings under /proc that root could write even without capabilities (as bwrap)."""


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
        check(libc.unshare(_CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
        _write("/proc/self/setgroups", "deny")  # required before gid_map without privileges
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    check(libc.unshare(_CLONE_NEWPID), "unshare(CLONE_NEWPID)")


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:
        syscalls.fail(f"cannot write {path}: {exc.strerror}")


def private_mounts(plan: dict[str, list[str]]) -> None:
    """In a mount namespace of its own: the whole tree read-only, the ``writable`` folders
    bound read-write again, the ``pinned`` folders inside them bound onto themselves (a mount
    point cannot be renamed away), the ``readonly`` files and folders bound read-only, a
    private /dev/shm, and the ``hidden`` places covered. Landlock alone governs neither
    metadata (chmod, chown, timestamps) nor /dev/shm, nor can it take a subfolder back from a
    writable folder; read-only mounts can. A path that vanished since fabric listed it is
    skipped (it has nothing left to protect)."""
    check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
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

    result = libc.mount(raw(source), raw(target), raw(fstype), ctypes.c_ulong(flags), None)
    if result < 0 and missing_ok and ctypes.get_errno() in (_ENOENT, _ENOTDIR):
        return False
    check(result, f"mount({source}, {target})")
    return True


def _setattr(path: str, attr: _MountAttr) -> None:
    result = libc.syscall(
        ctypes.c_long(_SYS_MOUNT_SETATTR),
        ctypes.c_int(_AT_FDCWD),
        path.encode(),
        ctypes.c_uint(_AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    check(result, f"mount_setattr({path})")


def mount_proc() -> None:
    """For pid 1 of a new pid namespace: a /proc of that namespace over the host's, with the
    kernel's settings read-only (``_PROC_READ_ONLY``), as bubblewrap does."""
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for name in _PROC_READ_ONLY:
        _bind(f"/proc/{name}")

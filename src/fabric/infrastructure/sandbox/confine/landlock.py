"""Landlock (landlock(7)) for the command: the paths it may read and write and, where the
kernel can, no TCP (a pack without network) and no abstract socket or signal beyond its own
domain. A path is granted only while it is still what fabric listed
(``profile.landlock_rules``): a symlink put there since grants nothing.

fabric's own process imports this module too, for ``landlock_abi`` (``probe.py``)."""

from __future__ import annotations

import ctypes
import os
import stat
from typing import Any

from . import syscalls
from .syscalls import PR_SET_NO_NEW_PRIVS, check, libc

_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_O_PATH = 0o10000000

# Landlock access rights (linux/landlock.h) and the ABI that introduced the later ones.
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is off or unknown."""
    version = libc.syscall(
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
        syscalls.fail("Landlock is not available in this kernel")
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
    ruleset = check(
        libc.syscall(
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
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    check(
        libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ruleset, ctypes.c_uint32(0)),
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
        check(
            libc.syscall(
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

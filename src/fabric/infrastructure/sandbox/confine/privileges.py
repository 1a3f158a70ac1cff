"""The privileges the command gives up just before exec, besides its Landlock rules: every
capability (bounding and ambient sets), and the system calls the seccomp filter
(``seccomp.py``) refuses."""

from __future__ import annotations

import ctypes

from .syscalls import PR_SET_NO_NEW_PRIVS, check, libc

_PR_CAPBSET_DROP, _PR_SET_SECCOMP = 24, 22
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_SECCOMP_MODE_FILTER = 2


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
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() not in (1, 22):
            check(-1, f"prctl(CAPBSET_DROP, {cap})")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp(program: bytes) -> None:
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    check(
        libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
        "installing the seccomp filter",
    )

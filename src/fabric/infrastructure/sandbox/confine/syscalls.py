"""What the parts of the confinement share: libc (for the calls Python has no wrapper for), and
how a failed call ends things.

``fail`` is looked up here at each failure, so that ``supervise`` can swap in the launcher's
exit (status 125) once it runs: call it as ``syscalls.fail``; a copy of the name, imported
before the swap, would keep raising instead."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import NoReturn

PR_SET_NO_NEW_PRIVS = 38

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.prctl.restype = ctypes.c_int


def _raise(message: str) -> NoReturn:
    raise OSError(message)


fail: Callable[[str], NoReturn] = _raise
"""How a failure ends things: the launcher's exit with status 125 once ``supervise`` runs."""


def check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        fail(f"{what} failed: {os.strerror(err)} (errno {err})")
    return result

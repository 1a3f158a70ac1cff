"""What the host sees, for judging confined commands by their effects and never by their own
output: processes found by a unique word in their command line (the host's /proc lists them
with their real pids, whatever pid namespace they run in), and the backends this machine offers.

Nothing here signals a pid that a confined program printed: under bubblewrap that pid belongs to
the sandbox's pid namespace and names an unrelated process on the host.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time

from fabric.infrastructure.sandbox import host_report


def confining_backends() -> list[str]:
    """The confining backends to test here: every one that works on this machine. On CI
    (``CI=true``) bubblewrap is always listed, so a machine without it fails (with the
    install hint) instead of quietly testing less; with no backend at all, bubblewrap is
    listed too, for the same reason."""
    report = host_report()
    found = [
        name
        for name, error in (("bwrap", report.bwrap_error), ("landlock", report.landlock_error))
        if error is None
    ]
    if "bwrap" not in found and (os.environ.get("CI") == "true" or not found):
        found.insert(0, "bwrap")
    return found


def all_backends() -> list[str]:
    """The confining backends plus ``none`` (unconfined, but still limited and reaped)."""
    return [*confining_backends(), "none"]


def new_token() -> str:
    """A word to put in a command line, so its processes can be found on the host."""
    return f"fabric-probe-{secrets.token_hex(6)}"


def _cmdline(pid: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def token_pids(token: str, *, commands_only: bool = False) -> list[int]:
    """Host pids of live processes whose command line holds ``token``. ``commands_only``
    leaves out fabric's own launcher and bubblewrap (whose arguments carry the command)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        argv = _cmdline(entry)
        if not any(token in arg for arg in argv):
            continue
        if commands_only and (
            os.path.basename(argv[0]) == "bwrap" or any(a.endswith("launcher.py") for a in argv)
        ):
            continue
        found.append(int(entry))
    return sorted(found)


def wait_gone(token: str, timeout: float = 10.0) -> list[int]:
    """Wait (a kill takes effect asynchronously) until no process holds ``token``; returns
    those still there when ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        left = token_pids(token)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def kill_token(token: str) -> None:
    """Clean-up after a failed test: SIGKILL what the host lists with ``token``."""
    for pid in token_pids(token):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)

"""What the host sees, for judging confined commands by their effects and never by their own
output: processes found by a unique word in their command line (the host's /proc lists them
with their real pids, whatever pid namespace they run in), the backends this machine offers,
and how to run the probes as another (unprivileged) user.

Nothing here signals a pid that a confined program printed: under bubblewrap and Landlock that
pid belongs to the sandbox's pid namespace and names an unrelated process on the host.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shlex
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path

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


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def closed_folders(user: pwd.struct_passwd, needed: Sequence[Path]) -> dict[Path, list[Path]]:
    """Folders ``user`` cannot enter on the way to a ``needed`` path (a home folder of mode
    0700 holding the interpreter, say), each with the entries in it that lead there."""
    found: dict[Path, list[Path]] = {}
    for path in needed:
        parts = Path(os.path.realpath(path)).parts
        for depth in range(1, len(parts)):
            folder = Path(*parts[:depth])
            if not _can_enter(folder, user):
                entry = Path(*parts[: depth + 1])
                found.setdefault(folder, [])
                if entry not in found[folder]:
                    found[folder].append(entry)
                break
    return found


def _can_enter(folder: Path, user: pwd.struct_passwd) -> bool:
    info = folder.stat()
    if info.st_uid == user.pw_uid:
        return bool(info.st_mode & 0o100)
    if info.st_gid == user.pw_gid:  # the supplementary groups are cleared (as_user)
        return bool(info.st_mode & 0o010)
    return bool(info.st_mode & 0o001)


REAPER = """
import ctypes, os, sys
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
child = os.fork()
if child == 0:
    os.execv(sys.argv[1], sys.argv[1:])
while True:
    pid, status = os.wait()
    if pid == child:
        code = os.waitstatus_to_exitcode(status)
        sys.exit(code if code >= 0 else 128 - code)
"""
"""Runs its arguments and reaps every orphan below them at once. Without it the orphans of
one probe (a sandbox's helper process whose parent was killed) wait as zombies until the
host's init reaps them, which can take a while; a zombie still counts against the user's
process limit, and one reaped in the middle of the next probe gives that command one
process more than the limit fabric computed (from the user's processes at the start)."""


def as_user(user: pwd.struct_passwd, argv: Sequence[str], needed: Sequence[Path]) -> list[str]:
    """The command line that runs ``argv`` (a Python program: ``argv[0]`` is the interpreter)
    as ``user`` (for root: setpriv, no capabilities, no supplementary groups), under
    ``REAPER``. When ``closed_folders`` finds folders in the way of the ``needed`` paths (the
    interpreter, the repository, the lab), the command runs in a mount namespace of its own
    where each such folder is an empty tmpfs holding only the entries that lead to them,
    bound from the host: the host's permissions stay as they are, and the user sees nothing
    more of the closed folder than what it needs."""
    setpriv = shutil.which("setpriv") or "setpriv"
    become = [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    become += ["--inh-caps=-all", "--bounding-set=-all", "--", argv[0], "-c", REAPER, *argv]
    closed = closed_folders(user, needed)
    if not closed:
        return become
    script = ["set -e", "keep=$(mktemp -d)"]
    for n, (folder, entries) in enumerate(closed.items()):
        slots = [f'"$keep/{n}-{m}"' for m in range(len(entries))]
        makes = ["mkdir" if e.is_dir() else "touch" for e in entries]
        for entry, slot, make in zip(entries, slots, makes, strict=True):
            script += [f"{make} {slot}", f"mount --bind {shlex.quote(str(entry))} {slot}"]
        script.append(f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(folder))}")
        for entry, slot, make in zip(entries, slots, makes, strict=True):
            target = shlex.quote(str(entry))
            script += [f"{make} {target}", f"mount --move {slot} {target}", f"rm -d {slot}"]
    script += ['rm -d "$keep"', 'exec "$@"']
    unshare = shutil.which("unshare") or "unshare"
    wrapper = [unshare, "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)]
    return [*wrapper, "sh", *become]

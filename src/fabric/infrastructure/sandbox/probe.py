"""Which confinement this machine offers, found by trying it, and the choice for a pack.

A backend counts as available only after a real command (``true``) ran under it through the
same launcher every tool command goes through; a ``bwrap`` binary that cannot create
namespaces (a container without user namespaces, say) is reported with its own error.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from msgspec import Struct
from msgspec.structs import asdict

import fabric
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import SandboxError
from fabric.infrastructure.llm.probe_cache import default_path, write_json_atomic

from . import cgroup, seccomp
from .confine.landlock import landlock_abi
from .runner import Backend, launch_argv

INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
    "bubblewrap), or set `sandbox.confinement: none` for the pack in fabric.yaml to run its "
    "commands unconfined"
)
_PROBE_TIMEOUT = 15.0


class HostReport(Struct, frozen=True):
    """What confinement the machine offers (``fabric doctor`` prints it)."""

    bwrap: str | None
    bwrap_version: str | None
    bwrap_error: str | None
    landlock_abi: int
    landlock_error: str | None
    seccomp: bool
    cgroup: str | None
    root: bool
    landlock_namespaces: bool = False
    """Whether Landlock commands get namespaces of their own (mount and pid; a user namespace
    when not root), hence private mounts (host code in the workspace kept read-only, ADR 0013)
    and a /proc without host processes. Root gets them or no Landlock at all; without root,
    where the kernel refuses user namespaces, Landlock runs alone: a workspace holding host
    code is then refused (ADR 0012 lists what else that leaves open). ``fabric doctor`` shows
    it."""

    def backend(self, choice: str) -> Backend:
        """The backend for a pack's ``sandbox.confinement``; SandboxError when that cannot
        be had."""
        if choice == "none":
            return Backend("none", "chosen in the pack's sandbox.confinement")
        if choice in ("auto", "bwrap") and self.bwrap and not self.bwrap_error:
            reason = "auto: bubblewrap works" if choice == "auto" else "chosen in config"
            return Backend("bwrap", reason, bwrap=self.bwrap)
        if choice in ("auto", "landlock") and self.landlock_abi and not self.landlock_error:
            why = (
                f"auto: bubblewrap unavailable ({self.bwrap_error})"
                if choice == "auto"
                else "chosen in config"
            )
            return Backend(
                "landlock", why, landlock_abi=self.landlock_abi, namespaces=self.landlock_namespaces
            )
        problems = []
        if choice in ("auto", "bwrap"):
            problems.append(f"bubblewrap: {self.bwrap_error}")
        if choice in ("auto", "landlock"):
            problems.append(f"Landlock: {self.landlock_error}")
        raise SandboxError(
            f"this pack runs commands and needs a sandbox, but {choice!r} confinement is not "
            f"available here ({'; '.join(problems)})",
            hint=INSTALL_HINT,
        )


_CACHE_NAME = "sandbox_probe.json"
_SETTINGS = (
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
)
"""Kernel settings that decide whether bubblewrap (and Landlock without root) may create
namespaces."""


_memo: list[HostReport] = []


def host_report(*, fresh: bool = False) -> HostReport:
    """What confinement the machine offers. Probing costs tens of milliseconds, so the answer
    is kept for the process and on disk (``~/.cache/fabric/sandbox_probe.json``), keyed by
    what could change it (kernel, user, the bwrap binary, the user-namespace settings);
    ``fresh`` probes again (``fabric doctor`` does). A stale "works" cannot weaken anything:
    a backend that fails reports a sandbox error on the first command, never runs it
    unconfined."""
    if _memo and not fresh:
        return _memo[0]
    bwrap = shutil.which("bwrap")
    abi = landlock_abi()
    key = _fingerprint(bwrap, abi)
    path = default_path(name=_CACHE_NAME)
    report = None if fresh else _cached(path, key)
    if report is None:
        report = _probe(bwrap, abi)
        with contextlib.suppress(OSError):  # only a cache
            write_json_atomic(path, {"key": key, "report": asdict(report)})
    _memo[:] = [report]
    return report


def _probe(bwrap: str | None, abi: int) -> HostReport:
    with tempfile.TemporaryDirectory(prefix="fabric-probe-") as folder:
        workspace = Path(folder)
        version = bwrap_error = None
        if bwrap is None:
            bwrap_error = "the bwrap program is not installed"
        else:
            version = _output([bwrap, "--version"]).strip() or None
            bwrap_error = _try(Backend("bwrap", "probe", bwrap=bwrap), workspace)
        landlock_error, namespaces = None, False
        if not abi:
            landlock_error = "this kernel has no Landlock (Linux 5.13+ with the LSM enabled)"
        elif not seccomp.supported():
            landlock_error = "no seccomp filter for this CPU architecture"
        else:
            landlock_error, namespaces = _try_landlock(abi, workspace)
    return HostReport(
        bwrap=bwrap,
        bwrap_version=version,
        bwrap_error=bwrap_error,
        landlock_abi=abi,
        landlock_error=landlock_error,
        seccomp=seccomp.supported(),
        cgroup=cgroup.describe(),
        root=os.geteuid() == 0,
        landlock_namespaces=namespaces,
    )


def _try_landlock(abi: int, workspace: Path) -> tuple[str | None, bool]:
    """(what went wrong, whether with namespaces): with namespaces first; without them only
    when not root (root without a mount namespace could change any root-owned file's mode)."""
    error = _try(Backend("landlock", "probe", landlock_abi=abi, namespaces=True), workspace)
    if error is None or os.geteuid() == 0:
        return error, error is None
    return _try(Backend("landlock", "probe", landlock_abi=abi), workspace), False


def _fingerprint(bwrap: str | None, abi: int) -> str:
    parts = [fabric.__version__, "probe 2", platform.release(), platform.machine()]
    parts += [str(os.geteuid()), str(abi)]
    if bwrap is not None:
        with contextlib.suppress(OSError):
            info = Path(bwrap).stat()
            parts += [bwrap, str(info.st_size), str(info.st_mtime_ns)]
    for setting in _SETTINGS:
        with contextlib.suppress(OSError):
            parts.append(Path(setting).read_text().strip())
    parts.append(str(cgroup.describe()))
    return "|".join(parts)


def _cached(path: Path, key: str) -> HostReport | None:
    try:
        data = json.loads(path.read_text("utf-8"))
        if data["key"] != key:
            return None
        return HostReport(**data["report"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def backend_for(sandbox: SandboxSettings) -> Backend:
    return host_report().backend(sandbox.confinement)


def _try(backend: Backend, workspace: Path) -> str | None:
    """None when ``true`` runs under ``backend``, else what went wrong."""
    true = shutil.which("true") or "/bin/true"
    argv = launch_argv(
        backend,
        SandboxSettings(confinement=backend.name),
        workspace=workspace,
        hidden=[],
        temp=workspace,
        command=[true],
        cgroups=[],
    )
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT,
            env={"PATH": os.defpath},
            cwd=workspace,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode == 0:
        return None
    text = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
    return (text[-1] if text else f"exit code {done.returncode}")[:300]


def _output(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, timeout=5, check=False).stdout.decode()
    except (OSError, subprocess.TimeoutExpired):
        return ""

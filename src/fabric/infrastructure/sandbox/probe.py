"""Which confinement this machine offers, found by trying it, and the choice for a pack.

A backend counts as available only after a real command (``true``) ran under it through the
same launcher every tool command goes through; a ``bwrap`` binary that cannot create
namespaces (a container without user namespaces, say) is reported with its own error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from fabric.config.schema import SandboxSettings
from fabric.domain.errors import SandboxError

from . import cgroup, seccomp
from .confine import landlock_abi
from .runner import Backend, launch_argv

INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
    "bubblewrap), or set `sandbox.confinement: none` for the pack in fabric.yaml to run its "
    "commands unconfined"
)
_PROBE_TIMEOUT = 15.0


@dataclass(frozen=True, slots=True)
class HostReport:
    """What confinement the machine offers (``fabric doctor`` prints it)."""

    bwrap: str | None
    bwrap_version: str | None
    bwrap_error: str | None
    landlock_abi: int
    landlock_error: str | None
    seccomp: bool
    cgroup: str | None
    root: bool

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
            return Backend("landlock", why, landlock_abi=self.landlock_abi)
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


@cache
def host_report() -> HostReport:
    """Probe once per process (tens of milliseconds)."""
    with tempfile.TemporaryDirectory(prefix="fabric-probe-") as folder:
        workspace = Path(folder)
        bwrap = shutil.which("bwrap")
        version = bwrap_error = None
        if bwrap is None:
            bwrap_error = "the bwrap program is not installed"
        else:
            version = _output([bwrap, "--version"]).strip() or None
            bwrap_error = _try(Backend("bwrap", "probe", bwrap=bwrap), workspace)
        abi = landlock_abi()
        landlock_error = None
        if not abi:
            landlock_error = "this kernel has no Landlock (Linux 5.13+ with the LSM enabled)"
        elif not seccomp.supported():
            landlock_error = "no seccomp filter for this CPU architecture"
        else:
            landlock_error = _try(Backend("landlock", "probe", landlock_abi=abi), workspace)
    return HostReport(
        bwrap=bwrap,
        bwrap_version=version,
        bwrap_error=bwrap_error,
        landlock_abi=abi,
        landlock_error=landlock_error,
        seccomp=seccomp.supported(),
        cgroup=cgroup.describe(),
        root=os.geteuid() == 0,
    )


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

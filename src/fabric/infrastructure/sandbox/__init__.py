"""OS-level confinement of the commands tools start (bubblewrap, Landlock + seccomp, or none),
with resource limits and cgroups. See ADR 0012."""

from __future__ import annotations

from pathlib import Path

from fabric.config.schema import SandboxSettings

from .host_code import HostCode, host_code
from .probe import INSTALL_HINT, HostReport, backend_for, host_report
from .runner import Backend, SandboxedCommands


def command_runner(
    sandbox: SandboxSettings,
    workspace: Path,
    protected: tuple[Path, ...] = (),
    read_only: tuple[Path, ...] = (),
    readable: tuple[Path, ...] = (),
) -> SandboxedCommands:
    """The runner for one run's commands; SandboxError when the pack's confinement cannot be
    had on this machine (or cannot keep the ``read_only`` host code read-only). ``readable``:
    folders outside the workspace its commands may read (the configured skill folders)."""
    backend = backend_for(sandbox)
    return SandboxedCommands(backend, sandbox, workspace, protected, read_only, readable)


__all__ = [
    "INSTALL_HINT",
    "Backend",
    "HostCode",
    "HostReport",
    "SandboxedCommands",
    "backend_for",
    "command_runner",
    "host_code",
    "host_report",
]

"""The probes can see an escape: run unconfined (``confinement: none``) and unaudited (the git
audit, which runs after every command under every backend, turned off), each escape probe must
report one, so a probe that is "blocked" under a real backend was blocked by the sandbox (or
the audit) and not by a mistake in the probe.

Every escape probe runs here unless ``left_out`` names it with the reason (a new probe is
covered by default); bench/escape_matrix.py shows them all, unconfined too where it may."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fabric.infrastructure.packs import git_audit

from .conftest import probe_id
from .probes import ESCAPES, Probe, run_probe

_HOST_CHANGES = "as root its unconfined run would change the host (undone afterwards at best)"
_STILL_CONFINED = (
    "not confinement but what fabric does under every backend, none included (the launcher, "
    "rlimits and cgroup): it is blocked unconfined too"
)
LEFT_OUT = {
    "remount /": "it would change the host's mounts (not run unconfined by the matrix either)",
    "write /proc/sys": _HOST_CHANGES,
    "sysrq-trigger": _HOST_CHANGES,
    "netlink": _HOST_CHANGES,
    "int 0x80 (32-bit syscalls)": "needs gcc, x86-64 and a kernel with IA32 emulation",
    "io_uring": "io_uring is disabled on some kernels (kernel.io_uring_disabled)",
    "new namespaces": "user namespaces are refused to users on some machines",
    "mount": "unconfined, only root may mount, and then in the host's own mount table",
    "orphan survives a timeout": _STILL_CONFINED,
    "orphan survives the command's exit": _STILL_CONFINED,
    "orphan survives cancellation": _STILL_CONFINED,
    "fork bomb": _STILL_CONFINED,
    "memory bomb": _STILL_CONFINED,
    "huge file": _STILL_CONFINED,
    "file tools vs symlink swap": (
        "it attacks fabric's file tools, which run on the host, unconfined, under every "
        "backend: the command's confinement plays no part, so `none` blocks it as well"
    ),
}
"""Escape probes not run unconfined here, each with why."""


def _ptrace_scope() -> int:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return 0


def left_out() -> dict[str, str]:
    """``LEFT_OUT`` and, on this machine, the probes whose escape it does not allow."""
    found = dict(LEFT_OUT)
    if os.geteuid() != 0 and _ptrace_scope() != 0:
        found["read a host process's memory"] = "Yama lets only root read a non-child's memory"
    return found


@pytest.mark.parametrize("probe", [p for p in ESCAPES if p.name not in left_out()], ids=probe_id)
def test_an_unconfined_command_escapes(probe: Probe, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(git_audit, "sweep", lambda *args, **kwargs: [])
    verdict = run_probe(probe, "none")
    assert verdict.outcome == "escaped", f"{probe.name} sees nothing: {verdict.detail}"


def test_every_left_out_probe_exists() -> None:
    assert set(LEFT_OUT) <= {p.name for p in ESCAPES}

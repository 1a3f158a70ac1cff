"""The probes can see an escape: run unconfined (``confinement: none``), each of these must
report one, so a probe that is "blocked" under a real backend was blocked by the sandbox and
not by a mistake in the probe. (Probes whose unconfined run would change the host more than a
test may, or that need privileges or kernel features some machines lack, are left out here;
bench/escape_matrix.py shows them all.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import probe_id
from .probes import ESCAPES, Probe, run_probe


def _ptrace_scope() -> int:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return 0


DETECTORS = [
    "write outside",
    "write /dev/shm",
    "write via symlink",
    "write via hard link",
    "metadata outside",
    "parent's secrets",
    "home credentials",
    "protected folder",
    "protected folder in workspace",
    "TCP to the host",
    "UDP to the host",
    "unix socket (stream)",
    "unix socket (datagram)",
    "abstract unix socket",
    "signal a host process",
    "renice / prlimit a host process",
]
if os.geteuid() == 0 or _ptrace_scope() == 0:  # Yama lets only root read a non-child's memory
    DETECTORS.append("read a host process's memory")


@pytest.mark.parametrize("probe", [p for p in ESCAPES if p.name in DETECTORS], ids=probe_id)
def test_an_unconfined_command_escapes(probe: Probe) -> None:
    verdict = run_probe(probe, "none")
    assert verdict.outcome == "escaped", f"{probe.name} sees nothing: {verdict.detail}"


def test_every_detector_names_a_probe() -> None:
    assert set(DETECTORS) <= {p.name for p in ESCAPES}

"""Every probe, in the matrix's order: imported by the tests in this folder and by
bench/escape_matrix.py, so both judge the same attempts the same way."""

from __future__ import annotations

from . import (
    probes_files,
    probes_git,
    probes_kernel,
    probes_limits,
    probes_links,
    probes_net,
    probes_planted,
    probes_proc,
    probes_secrets,
    probes_tasks,
    probes_tools,
)
from .lab import PROBES as REGISTERED
from .lab import Probe, Verdict, run_probe

_ORDER = [
    m.__name__
    for m in (
        probes_files,
        probes_secrets,
        probes_links,
        probes_planted,
        probes_git,
        probes_net,
        probes_proc,
        probes_kernel,
        probes_limits,
        probes_tools,
        probes_tasks,
    )
]
PROBES = sorted(REGISTERED, key=lambda p: _ORDER.index(p.check.__module__))
"""Files, secrets (through links too), planted code (git's too), network, processes, kernel,
limits, file tools, then the normal tasks."""
ESCAPES = [p for p in PROBES if p.kind == "escape"]
TASKS = [p for p in PROBES if p.kind == "task"]

__all__ = ["ESCAPES", "PROBES", "TASKS", "Probe", "Verdict", "run_probe"]

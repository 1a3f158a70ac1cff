"""Normal work still runs inside every confining backend (judged on the host: the commit is
in the log, the program runs, the results file holds the right numbers)."""

from __future__ import annotations

import pytest

from .conftest import probe_id
from .probes import TASKS, Probe, run_probe


@pytest.mark.parametrize("task", [t for t in TASKS if t.required], ids=probe_id)
def test_normal_work_runs(task: Probe, backend: str) -> None:
    verdict = run_probe(task, backend)
    assert verdict.outcome == "works", f"{task.name} under {backend}: {verdict.detail}"

"""Each escape probe under each confining backend: the host must see no effect (no changed
file, no connection, no signal, no process left, limits kept). See probes_*.py for what each
probe tries and how it is judged; bench/escape_matrix.py prints the same as a table."""

from __future__ import annotations

import os

import pytest

from fabric.infrastructure.sandbox import host_report

from .conftest import BACKENDS, probe_id
from .probes import ESCAPES, Probe, run_probe


@pytest.mark.parametrize("probe", ESCAPES, ids=probe_id)
def test_the_host_sees_no_escape(probe: Probe, backend: str) -> None:
    verdict = run_probe(probe, backend)
    assert verdict.outcome == "blocked", (
        f"{probe.name} under {backend}: {verdict.outcome}: {verdict.detail}\n"
        f"(the probe: {probe.what})"
    )


def test_ci_covers_bubblewrap() -> None:
    """.ci/run installs bubblewrap; on CI a missing or broken bwrap is a failure, not a
    reason to test less."""
    report = host_report()
    if os.environ.get("CI") == "true":
        assert report.bwrap_error is None, f"bubblewrap does not work on CI: {report.bwrap_error}"
        assert "bwrap" in BACKENDS
    assert BACKENDS, "no confining backend to test"

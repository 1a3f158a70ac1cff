"""Each escape probe under each confining backend: the host must see no effect (no changed
file, no connection, no signal, no process left, limits kept). See probes_*.py for what each
probe tries and how it is judged; bench/escape_matrix.py prints the same as a table."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fabric.infrastructure.sandbox import host_report

from .conftest import BACKENDS, probe_id
from .host import user_exists
from .probes import ESCAPES, TASKS, Probe, run_probe

MATRIX = Path(__file__).resolve().parents[2] / "bench" / "escape_matrix.py"


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


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can run the probes as another user")
@pytest.mark.skipif(not user_exists("nobody"), reason="no user nobody here")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is missing")
def test_an_unprivileged_user_sees_no_escape_either() -> None:
    """Every probe and task again, as nobody, under every confining backend nobody has here:
    without root the backends work differently (a user namespace for Landlock, no cgroup, the
    process limit applies). The matrix script runs itself as nobody (about a minute)."""
    argv = [sys.executable, str(MATRIX), "--user", "nobody", "--json", "--no-doc"]
    done = subprocess.run(
        [*argv, "--no-reference", "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.stdout.startswith("["), f"the matrix failed as nobody: {done.stderr[-3000:]}"
    (run,) = json.loads(done.stdout)
    assert run["user"] == "nobody" and run["uid"] != 0
    assert run["backends"], f"no confining backend works for nobody here ({run['setup']})"
    wrong = [
        f"{probe.name} under {backend}: {verdict['outcome']}: {verdict['detail'][:300]}"
        for probe in [*ESCAPES, *(t for t in TASKS if t.required)]
        for backend, verdict in run["results"][probe.name].items()
        if verdict["outcome"] != ("blocked" if probe.kind == "escape" else "works")
    ]
    assert not wrong, f"as nobody ({run['setup']}):\n" + "\n".join(wrong)

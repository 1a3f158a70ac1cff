"""``fabric doctor`` and a pack that cannot be confined, as a user meets them: real commands in
child processes, a real loopback model server, the runlog on disk."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from support import assert_valid_runlog, run_fabric

from fabric.interfaces.cli.doctor import print_report
from fabric.testing import MockOpenAIServer, completion

CONFIG = """\
llm:
  backend: openai
  backends:
    openai: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
  retry: {attempts: 1}
runs_dir: runs
packs:
  engineering:
    builder: packs.engineering:build
    sandbox: {allowed_commands: [python], confinement: CONFINEMENT}
  research:
    builder: packs.research:build
"""


def fabric(
    *args: str, cwd: Path, path: str | None = None, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(extra or {})}
    if path is not None:
        env["PATH"] = path
    return run_fabric(*args, cwd=cwd, env=env)


def project(tmp_path: Path, confinement: str) -> Path:
    (tmp_path / "fabric.yaml").write_text(CONFIG.replace("CONFINEMENT", confinement))
    (tmp_path / "ws").mkdir()
    return tmp_path


def test_doctor_reports_the_machine_and_each_pack(tmp_path: Path) -> None:
    folder = project(tmp_path, "auto")
    proc = fabric("doctor", "--json", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True
    assert report["bwrap"]["works"] or report["landlock"]["works"]
    landlock = report["landlock"]
    if landlock["works"] and report["root"]:  # root gets namespaces or no Landlock at all
        assert landlock["namespaces"] is True
    packs = {p["name"]: p for p in report["packs"]}
    assert packs["engineering"]["backend"] in ("bwrap", "landlock")
    assert packs["engineering"]["network"] is False
    assert packs["research"]["backend"] is None

    text = fabric("doctor", cwd=folder)
    assert text.returncode == 0
    assert "Confinement on this machine" in text.stdout and "engineering" in text.stdout
    if landlock["works"]:  # it says whether Landlock keeps host code read-only: here, and
        assert ("stays read-only" in text.stdout) is landlock["namespaces"]
        for namespaces in (True, False):  # as it would on a machine with the other answer
            printed = io.StringIO()
            print_report({**report, "landlock": {**landlock, "namespaces": namespaces}}, printed)
            said = " ".join(printed.getvalue().split())
            assert ("host code in a workspace stays read-only" in said) is namespaces
            assert ("cannot keep host code in a workspace read-only" in said) is not namespaces


def test_a_pack_that_needs_bubblewrap_refuses_to_run_without_it(tmp_path: Path) -> None:
    """No bwrap on PATH and `confinement: bwrap`: doctor says NOT READY (exit 1) and a run
    fails before any command runs, with the install hint, and its runlog says so."""
    folder = project(tmp_path, "bwrap")
    no_bwrap = str(Path(sys.executable).parent)  # python is found, bwrap is not
    doctor = fabric("doctor", cwd=folder, path=no_bwrap)
    assert doctor.returncode == 1
    assert "NOT READY" in doctor.stdout and "apt-get install bubblewrap" in doctor.stdout

    script = [completion(None, [("shell", {"command": "python -c 'print(1)'"})])]
    with MockOpenAIServer(script) as server:
        run = fabric(
            "run", "--pack", "engineering", "--workspace", "ws", "--json", "say hi",
            cwd=folder, path=no_bwrap, extra={"FABRIC_BASE_URL": server.base_url},
        )  # fmt: skip
        assert server.requests == []  # refused before the model was asked anything
    assert run.returncode == 1, run.stderr
    out = json.loads(run.stdout)
    assert out["status"] == "failed"
    assert "apt-get install bubblewrap" in out["error"]["hint"]
    events = assert_valid_runlog(Path(out["runlog"]))
    assert events[-1]["kind"] == "run_finished" and events[-1]["error"]["code"] == "sandbox_error"

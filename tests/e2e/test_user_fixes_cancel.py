"""Ctrl-C, as a new user meets it: `fabric run --json` still prints the result (cancelled, with
its run id and runlog) and exits 1, and `fabric resume` continues the cancelled run in the same
runlog. A real `fabric` process, a real SIGINT, a loopback model server that stalls."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from support import assert_valid_runlog, run_fabric

from fabric.testing import MockOpenAIServer, completion

CONFIG = """\
version: 1
llm:
  backend: openai
  backends: {openai: {kind: openai, base_url: "http://127.0.0.1:9/v1"}}
  models: {default: mock}
  retry: {attempts: 1}
runs_dir: runs
packs:
  engineering: {builder: packs.engineering:build}
"""


def _cancelled_run(folder: Path) -> tuple[subprocess.CompletedProcess[str], int]:
    """`fabric run --json` stopped by SIGINT while the model is still thinking; returns the
    finished process and how many requests the model server got."""
    release = threading.Event()

    def stalling(body: dict[str, Any]) -> tuple[int, Any]:
        release.wait(60)  # the model "thinks" until the run is gone
        return 500, {"error": {"message": "too late"}}

    argv = [sys.executable, "-P", "-m", "fabric", "run", "--json", "--pack", "engineering"]
    with MockOpenAIServer(stalling) as server:
        env = {**os.environ, "FABRIC_BASE_URL": server.base_url}
        proc = subprocess.Popen(
            [*argv, "--workspace", "ws", "say hello"],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not server.requests and proc.poll() is None:
                assert time.monotonic() < deadline, "the run never asked the model"
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        asked = len(server.requests)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), asked


def test_ctrl_c_prints_the_json_result_and_the_run_resumes(tmp_path: Path) -> None:
    (tmp_path / "fabric.yaml").write_text(CONFIG)
    (tmp_path / "ws").mkdir()

    cancelled, asked = _cancelled_run(tmp_path)
    assert asked == 1, cancelled.stderr
    assert cancelled.returncode == 1, cancelled.stderr
    result = json.loads(cancelled.stdout)  # one JSON object, even on Ctrl-C
    assert result["status"] == "cancelled"
    runlog = Path(result["runlog"])
    assert runlog.is_file() and runlog.parent.name == result["run_id"]
    assert f"fabric resume {result['run_id']}" in cancelled.stderr
    events = assert_valid_runlog(runlog)
    assert events[-1]["status"] == "cancelled"

    answer = completion(None, [("finish_task", {"summary": "said hello"})])
    with MockOpenAIServer([answer]) as server:
        env = {**os.environ, "FABRIC_BASE_URL": server.base_url}
        resumed = run_fabric("resume", result["run_id"], "--json", cwd=tmp_path, env=env)
        requests = server.requests
    assert resumed.returncode == 3, resumed.stderr  # done, unconfirmed
    done = json.loads(resumed.stdout)
    assert (done["status"], done["run_id"]) == ("completed_unconfirmed", result["run_id"])
    assert done["payload"]["summary"] == "said hello"
    # the step cut by Ctrl-C had no reply: the model is asked it again, with the same task
    [request] = requests
    assert request["messages"][-1]["role"] == "user"
    assert request["messages"][-1]["content"].startswith("say hello\n\nBefore you start")

    events = assert_valid_runlog(runlog)  # one log, ending with the resumed run's end
    [again] = [e for e in events if e["kind"] == "run_resumed"]
    assert again["reason"] == "cancelled" and again["ended"]["status"] == "cancelled"
    assert events[-1]["status"] == "completed_unconfirmed"

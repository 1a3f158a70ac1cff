"""Secrets never leave fabric: the attack, end to end. A model server that answers 400/401 with
a body echoing the API key it was sent (raw and URL-encoded), a key that leaked into the
workspace and that the model reads, quotes and puts in its result, and the service token sent
in a task: none of it may appear in the runlog, the run's artifacts, what ``fabric run``
prints (with and without ``--json``), or what the HTTP service answers (task documents,
events, runlog, errors) or logs."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from support import assert_valid_runlog, run_fabric
from test_service import API_KEY, TOKEN, Service, project, sse, step_of, task_of

from fabric.testing import MockOpenAIServer, completion

# A key as some providers issue them: with characters that URL-encoding changes.
KEY = "sk-live/e2e+redact=me:7f3a9c21d4"
FORMS = (KEY, quote(KEY, safe=""), json.dumps(KEY)[1:-1])
CONFIG = """\
version: 1
llm:
  backend: openai
  backends:
    openai: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
  models: {default: mock}
  retry: {attempts: 1}
runs_dir: runs
default_pack: engineering
packs:
  engineering:
    builder: packs.engineering:build
    limits: {max_steps: 6, finish_repairs: 0, tool_output_chars: 256}
    sandbox: {allowed_commands: [python], command_timeout: 30}
"""
PRINT_LEAK = "python -c \"print(open('leak.env').read())\""


def echo_auth(status: int) -> Callable[[dict[str, Any]], tuple[int, Any]]:
    """A model server that refuses every call, quoting back the credentials it got."""

    def handler(body: dict[str, Any]) -> tuple[int, Any]:
        auth = str(body["_authorization"])
        message = f"Incorrect API key provided: {auth} (url-encoded: {quote(auth, safe='')})"
        return status, {"error": {"message": message, "type": "invalid_request_error"}}

    return handler


def leaky_model(body: dict[str, Any]) -> tuple[int, Any]:
    """Reads the leaked key file, runs a command that prints it, says it, returns it."""
    step = step_of(body)
    if step == 0:
        return 200, completion(None, [("read_file", {"path": "leak.env"})])
    if step == 1:
        return 200, completion(None, [("shell", {"command": PRINT_LEAK})])
    return 200, completion(
        f"The key in leak.env is {KEY}.", [("finish_task", {"summary": f"found {KEY}"})]
    )


def written(run_dir: Path) -> bytes:
    """Every byte fabric wrote for a run: its runlog and its artifacts."""
    return b"".join(p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file())


def assert_no_secret(text: str | bytes, *secrets: str) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    for secret in secrets:
        assert secret.encode() not in data, f"{secret!r} leaked"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "fabric.yaml").write_text(CONFIG)
    (tmp_path / "ws").mkdir()
    return tmp_path


@pytest.mark.parametrize("status", [400, 401])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_key_the_provider_echoes_is_never_written_or_printed(
    folder: Path, status: int, as_json: bool
) -> None:
    with MockOpenAIServer(echo_auth(status), models=["mock"]) as model:
        env = {**os.environ, "FABRIC_BASE_URL": model.base_url, "FABRIC_API_KEY": KEY}
        args = ["run", "-p", "engineering", "-w", "ws", *(["--json"] if as_json else []), "hi"]
        proc = run_fabric(*args, env=env, cwd=folder)
    assert model.requests[0]["_authorization"] == f"Bearer {KEY}"  # the key was sent
    assert proc.returncode == 1, proc.stderr
    assert_no_secret(proc.stdout + proc.stderr, *FORMS)
    assert f"answered {status}" in proc.stderr
    assert "Incorrect API key provided: Bearer [redacted] (url-encoded: Bearer%20[redacted])" in (
        proc.stderr
    )
    if as_json:
        error = json.loads(proc.stdout)["error"]
        assert "[redacted]" in error["message"]
    (run_dir,) = (folder / "runs").iterdir()
    assert_no_secret(written(run_dir), *FORMS)
    events = assert_valid_runlog(run_dir / "runlog.jsonl")
    assert "[redacted]" in events[-1]["error"]["message"]


def test_a_leaked_key_in_tool_output_model_text_and_result_is_redacted(folder: Path) -> None:
    filler = "".join(f"line {i}: nothing to see\n" for i in range(40))  # > tool_output_chars
    (folder / "ws" / "leak.env").write_text(f"OPENAI_API_KEY={KEY}\n{filler}export KEY={KEY}\n")
    with MockOpenAIServer(leaky_model, models=["mock"]) as model:
        env = {**os.environ, "FABRIC_BASE_URL": model.base_url, "FABRIC_API_KEY": KEY}
        proc = run_fabric("run", "-p", "engineering", "-w", "ws", "--json", "go", env=env,
                          cwd=folder)  # fmt: skip
    assert proc.returncode == 3, proc.stderr  # done, unconfirmed: nothing checked it
    assert_no_secret(proc.stdout + proc.stderr, *FORMS)
    out = json.loads(proc.stdout)
    assert out["payload"] == {"summary": "found [redacted]"}
    assert "model: The key in leak.env is [redacted]." in proc.stderr

    run_dir = Path(out["runlog"]).parent
    artifacts = list((run_dir / "artifacts").iterdir())
    assert len(artifacts) == 2  # both outputs were too long: kept whole beside the log
    assert_no_secret(written(run_dir), *FORMS)
    events = assert_valid_runlog(run_dir / "runlog.jsonl")
    results = [e for e in events if e["kind"] == "tool_result"]
    assert [r["name"] for r in results] == ["read_file", "shell"]
    assert results[0]["output"].startswith("  1| OPENAI_API_KEY=[redacted]\n")
    assert results[1]["output"].startswith("[exit code 0]\nOPENAI_API_KEY=[redacted]\n")
    assert "export KEY=[redacted]" in (run_dir / results[0]["artifact"]).read_text()
    assert events[-1]["payload"] == {"summary": "found [redacted]"}


# --- the HTTP service -----------------------------------------------------------------------


def service_model(body: dict[str, Any]) -> tuple[int, Any]:
    """Task "refuse": a 401 echoing the key. Otherwise: finish, quoting the key and the task
    (which holds the service token)."""
    task = task_of(body)
    if task == "refuse":
        return echo_auth(401)(body)
    return 200, completion(None, [("finish_task", {"summary": f"{task} / {API_KEY}"})])


def test_the_service_never_answers_or_logs_a_secret(tmp_path: Path) -> None:
    with (
        MockOpenAIServer(service_model, models=["m"]) as model,
        Service(project(tmp_path, model.base_url)) as service,
    ):
        refused = service.submit(task="refuse")
        quoted = service.submit(task=f"the token is {TOKEN}")
        documents = [service.wait_final(refused), service.wait_final(quoted)]
        answers = [
            service.client.get(f"/tasks/{task_id}/{what}")
            for task_id in (refused, quoted)
            for what in ("events", "runlog")
        ]
        answers.append(service.client.get("/tasks"))
        events = list(sse(service.client.get(f"/tasks/{quoted}/events")))
        unknown = service.client.post("/tasks", json={"pack": f"x-{TOKEN}", "task": "hi"})
        log = service.log()
    secrets = (API_KEY, TOKEN, quote(API_KEY, safe=""))
    assert model.requests
    assert all(r["_authorization"] == f"Bearer {API_KEY}" for r in model.requests)

    failed, done = documents
    assert failed["status"] == "failed"
    assert "Incorrect API key provided: Bearer [redacted]" in failed["error"]["message"]
    assert done["status"] == "completed_unconfirmed"
    assert done["task"] == "the token is [redacted]"
    assert done["payload"] == {"summary": "the token is [redacted] / [redacted]"}
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert_no_secret(answer.text, *secrets)
    assert events[-1]["data"]["payload"] == {"summary": "the token is [redacted] / [redacted]"}
    runlog = answers[3]
    assert int(runlog.headers["content-length"]) == len(runlog.content)

    assert unknown.status_code == 422
    assert unknown.json()["error"]["message"].startswith("no pack named 'x-[redacted]'")
    assert_no_secret(unknown.text + json.dumps(documents), *secrets)
    for run_dir in (tmp_path / "runs").iterdir():
        assert_no_secret(written(run_dir), *secrets)
    assert '"task.finished"' in log
    assert_no_secret(log, *secrets)

    database = tmp_path / "durable.sqlite3"  # the service's tasks hold none either
    with contextlib.closing(sqlite3.connect(database)) as db:
        query = "SELECT workflow_uuid, attributes FROM workflow_status WHERE name = 'fabric.task'"
        rows = {r[0]: json.loads(r[1]) for r in db.execute(query)}
    assert rows[quoted]["task"] == "the token is [redacted]"
    assert rows[quoted]["payload"] == {"summary": "the token is [redacted] / [redacted]"}
    assert "Bearer [redacted]" in rows[refused]["error"]["message"]
    assert_no_secret(b"".join(p.read_bytes() for p in tmp_path.glob("durable.sqlite3*")), *secrets)

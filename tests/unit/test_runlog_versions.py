"""Runlog format versions: fabric writes the newest, publishes a schema for every version it
ever wrote, and refuses a runlog from a newer fabric with a message that says so (show, replay,
resume, the application's Recording)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from support import VALIDATORS, read_events
from typer.testing import CliRunner

from fabric.application.replay import Recording
from fabric.application.resume import plan_resume
from fabric.domain.errors import ConfigError
from fabric.domain.runlog import FORMAT_VERSION, READABLE_VERSIONS, check_versions
from fabric.infrastructure.runlog import MemoryRunLog, schema_path
from fabric.interfaces.cli.app import app

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runlogs"
CONFIG = """\
version: 1
llm: {backend: openai, backends: {openai: {kind: openai, base_url: "http://127.0.0.1:9/v1"}}}
runs_dir: runs
packs:
  fixture: {builder: declarative, system_prompt: x, finish_schema: {type: object}}
"""


def test_fabric_writes_the_newest_version_and_reads_every_older_one() -> None:
    assert FORMAT_VERSION == 3
    assert READABLE_VERSIONS == (1, 2, 3)
    log = MemoryRunLog("r")
    log.emit("nudge", {"step": 1, "message": "go on"})
    assert log.events[0]["v"] == FORMAT_VERSION


def test_each_version_has_its_own_published_schema() -> None:
    schemas = {v: json.loads(schema_path(v).read_text("utf-8")) for v in READABLE_VERSIONS}
    assert schema_path().name == "runlog.schema.json" == schema_path(FORMAT_VERSION).name
    assert schema_path(1).name == "runlog-v1.schema.json"
    for version, schema in schemas.items():
        Draft202012Validator.check_schema(schema)
        assert schema["properties"]["v"]["const"] == version
        assert schema["$id"].endswith(f"runlog-v{version}.json")
    new_kinds = {"policy_decision", "approval_requested", "approval"}
    assert not new_kinds & set(schemas[1]["properties"]["kind"]["enum"])
    assert new_kinds <= set(schemas[2]["properties"]["kind"]["enum"])
    assert "verification" not in schemas[2]["properties"]["kind"]["enum"]
    assert "verification" in schemas[3]["properties"]["kind"]["enum"]
    with pytest.raises(ValueError, match="fabric knows 1, 2, 3"):
        schema_path(FORMAT_VERSION + 1)


def _line(kind: str, **fields: object) -> dict[str, object]:
    return {"v": 2, "seq": 0, "ts": "2026-11-22T03:17:07Z", "run_id": "r", "kind": kind, **fields}


def test_the_v3_schema_checks_verifications_and_the_unverified_end() -> None:
    v3 = VALIDATORS[3]
    check = {
        "v": 3, "seq": 4, "ts": "2026-11-25T03:17:07Z", "run_id": "r", "kind": "verification",
        "step": 2, "call_id": "c2", "check": "command: python -m pytest -q", "ok": False,
        "summary": "`python -m pytest -q` failed with exit code 1", "evidence": "FAILED t.py",
        "command": "python -m pytest -q", "exit_code": 1, "duration_ms": 812.5,
    }  # fmt: skip
    assert not list(v3.iter_errors(check))
    assert list(v3.iter_errors({k: v for k, v in check.items() if k != "summary"}))
    assert list(VALIDATORS[2].iter_errors({**check, "v": 2}))  # v2 had no such event
    end = {
        "v": 3, "seq": 5, "ts": "2026-11-25T03:17:08Z", "run_id": "r", "kind": "run_finished",
        "status": "unverified", "payload": {"summary": "done"}, "steps": 2,
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        "duration_s": 1.0,
    }  # fmt: skip
    assert not list(v3.iter_errors(end))
    assert list(VALIDATORS[2].iter_errors({**end, "v": 2}))


def test_the_v3_run_started_names_its_checks() -> None:
    started = read_events(FIXTURES / "v3" / "completed" / "runlog.jsonl")[0]
    assert started["verify"] == ["command: python check_notes.py"]
    v3 = VALIDATORS[3]
    assert not list(v3.iter_errors(started))
    without = {k: v for k, v in started.items() if k != "verify"}
    assert any("verify" in e.message for e in v3.iter_errors(without))
    assert not list(v3.iter_errors({**started, "verify": []}))  # a pack with no checks
    assert list(v3.iter_errors({**started, "verify": "command: python check_notes.py"}))
    overridden = read_events(FIXTURES / "v3" / "unverified" / "runlog.jsonl")[0]
    assert overridden["verify_override"] == "python check_notes.py done"
    assert not list(v3.iter_errors(overridden))
    assert list(v3.iter_errors({**overridden, "verify_override": ["off"]}))
    assert not list(VALIDATORS[2].iter_errors({**without, "v": 2}))  # v2 had no verify


def test_the_v2_schema_checks_the_new_kinds_and_the_confinement() -> None:
    v2 = VALIDATORS[2]
    decision = _line(
        "policy_decision", step=1, call_id="c1", tool="shell", verdict="ask",
        rule="shell git push **", reason="the rule asks a person first",
    )  # fmt: skip
    assert not list(v2.iter_errors(decision))
    assert list(v2.iter_errors({**decision, "verdict": "maybe"}))
    assert list(v2.iter_errors({k: v for k, v in decision.items() if k != "rule"}))
    asked = _line(
        "approval_requested", step=1, call_id="c1", tool="shell",
        arguments={"command": "git push"}, rule=None, timeout_s=300,
    )  # fmt: skip
    assert not list(v2.iter_errors(asked))
    answer = _line(
        "approval", step=1, call_id="c1", tool="shell", approved=False, by="timeout", scope="once"
    )
    assert not list(v2.iter_errors(answer))
    assert list(v2.iter_errors({**answer, "by": "someone"}))
    assert list(v2.iter_errors({**answer, "scope": "forever"}))
    started = read_events(FIXTURES / "v1" / "completed" / "runlog.jsonl")[0]
    started = {**started, "v": 2}
    assert any("confinement" in e.message for e in v2.iter_errors(started))
    assert not list(v2.iter_errors({**started, "confinement": None}))
    confined = {
        "backend": "bwrap", "reason": "bubblewrap works here", "network": False,
        "seccomp": True, "landlock_abi": None, "cgroup": None, "limits": {"memory_mb": 512},
    }  # fmt: skip
    assert not list(v2.iter_errors({**started, "confinement": confined}))
    assert list(v2.iter_errors({**started, "confinement": {**confined, "backend": "docker"}}))


def _newer(folder: Path) -> Path:
    """The v1 fixture run with its later lines as a fabric of the next version wrote them."""
    run = folder / "newer"
    shutil.copytree(FIXTURES / "v1" / "killed", run)
    events = read_events(run / "runlog.jsonl")
    for event in events[5:]:
        event["v"] = FORMAT_VERSION + 1
    (run / "runlog.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run / "runlog.jsonl"


def test_a_newer_runlog_is_refused_with_what_to_do(tmp_path: Path) -> None:
    events = read_events(_newer(tmp_path))
    with pytest.raises(ConfigError, match="written by a newer fabric") as caught:
        check_versions(events, "runlog.jsonl")
    assert "upgrade fabric" in caught.value.hint
    message = caught.value.message
    assert f"version {FORMAT_VERSION + 1}" in message and "line seq 5" in message
    assert f"reads versions 1 to {FORMAT_VERSION}" in message
    with pytest.raises(ConfigError, match="newer fabric"):
        Recording(events)
    with pytest.raises(ConfigError, match="newer fabric"):
        plan_resume(events)
    check_versions(read_events(FIXTURES / "v1" / "killed" / "runlog.jsonl"))  # v1: fine


@pytest.mark.parametrize("command", ["show", "replay", "resume"])
def test_the_cli_refuses_a_newer_runlog(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fabric.yaml").write_text(CONFIG)
    runlog = _newer(tmp_path)
    result = CliRunner().invoke(app, [command, str(runlog), "-c", str(tmp_path / "fabric.yaml")])
    assert result.exit_code == 2, result.output
    assert "written by a newer fabric" in result.stderr
    assert "upgrade fabric" in result.stderr
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing was written

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

from fabric.application.recording import Recording
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
    assert FORMAT_VERSION == 2
    assert READABLE_VERSIONS == (1, 2)
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
    with pytest.raises(ValueError, match="fabric knows 1, 2"):
        schema_path(FORMAT_VERSION + 1)


def _line(kind: str, **fields: object) -> dict[str, object]:
    return {"v": 2, "seq": 0, "ts": "2026-11-22T03:17:07Z", "run_id": "r", "kind": kind, **fields}


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
    assert "version 3" in caught.value.message and "line seq 5" in caught.value.message
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

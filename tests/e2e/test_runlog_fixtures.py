"""Every runlog format version fabric ever wrote stays readable: `fabric show`, `fabric replay`
and `fabric resume` on the fixture runlogs of each version (tests/fixtures/runlogs/v<N>/,
recorded by real `fabric run` processes, see make_fixtures.py there)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fixtures.runlogs.make_fixtures import completed_model, step_of
from support import assert_valid_runlog, kinds, read_events
from typer.testing import CliRunner

from fabric.domain.runlog import READABLE_VERSIONS
from fabric.interfaces.cli.app import app
from fabric.testing import MockOpenAIServer, completion

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runlogs"
VERSIONS = [f"v{version}" for version in READABLE_VERSIONS]
NOWHERE = "http://127.0.0.1:9/v1"  # replay never calls the model


def _config(folder: Path, version: str, url: str = NOWHERE) -> Path:
    """The config the fixtures were recorded with, pointing at ``url``."""
    template = (FIXTURES / version / "fabric.yaml").read_text("utf-8")
    config = folder / "fabric.yaml"
    config.write_text(template.replace("{url}", url), "utf-8")
    return config


def _install(folder: Path, version: str, name: str) -> tuple[Path, Path]:
    """Copy a fixture run into ``folder/runs/<run_id>`` with a workspace of its own (the
    recorded one was a temporary folder): returns the runlog and the workspace."""
    source = FIXTURES / version / name
    run_id = read_events(source / "runlog.jsonl")[0]["run_id"]
    run_dir = folder / "runs" / run_id
    shutil.copytree(source, run_dir)
    workspace = folder / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("remember the milk\n")
    runlog = run_dir / "runlog.jsonl"
    lines = runlog.read_text("utf-8").splitlines(keepends=True)
    started = json.loads(lines[0])
    started["workspace"] = str(workspace)  # the run's folder moved: only this line changes
    runlog.write_text(json.dumps(started, separators=(",", ":")) + "\n" + "".join(lines[1:]))
    return runlog, workspace


def test_there_is_a_fixture_set_for_every_version() -> None:
    assert sorted(p.name for p in FIXTURES.glob("v*") if p.is_dir()) == VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
def test_the_fixtures_are_valid_runlogs_of_their_version(version: str) -> None:
    for name in ("completed", "max_steps", "killed"):
        events = assert_valid_runlog(
            FIXTURES / version / name / "runlog.jsonl", finished=name != "killed"
        )
        assert {e["v"] for e in events} == {int(version[1:])}
    completed = kinds(read_events(FIXTURES / version / "completed" / "runlog.jsonl"))
    for kind in ("llm_retry", "llm_fallback", "nudge", "tool_result", "run_finished"):
        assert kind in completed
    assert list((FIXTURES / version / "completed" / "artifacts").iterdir())


@pytest.mark.parametrize("version", VERSIONS)
def test_show_reads_every_version(version: str) -> None:
    cli = CliRunner()
    folder = FIXTURES / version
    text = cli.invoke(app, ["show", str(folder / "completed")])
    assert text.exit_code == 0, text.output
    assert "completed after 7 step(s)" in text.stdout
    assert "switching to m2 on openai" in text.stdout and "retry 2/2" in text.stdout
    assert "warning" not in text.output
    as_json = cli.invoke(app, ["show", str(folder / "completed"), "--json"])
    assert json.loads(as_json.stdout) == read_events(folder / "completed" / "runlog.jsonl")
    killed = cli.invoke(app, ["show", str(folder / "killed"), "--step", "2", "--json"])
    assert {e["step"] for e in json.loads(killed.stdout)} == {2}
    killed_text = cli.invoke(app, ["show", str(folder / "killed")])
    assert "no run_finished" in killed_text.stdout


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["completed", "max_steps"])
def test_replay_of_every_version_is_identical(
    version: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, version)
    runlog, _ = _install(tmp_path, version, name)
    result = CliRunner().invoke(app, ["replay", str(runlog), "-c", str(config), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "identical", report["divergence"]
    recorded = read_events(runlog)
    assert report["steps_replayed"] == recorded[-1]["steps"]
    assert report["result"]["payload"] == recorded[-1]["payload"]
    replayed = assert_valid_runlog(report["runlog"])
    assert replayed[0]["replay_of"] == recorded[0]["run_id"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_killed_run_of_every_version_resumes(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runlog, workspace = _install(tmp_path, version, "killed")
    (workspace / "out.txt").write_text("milk\n")  # what step 2 of the killed run wrote
    before = read_events(runlog)
    with MockOpenAIServer(completed_model, models=["m", "m2"]) as server:
        config = _config(tmp_path, version, server.base_url)
        command = ["resume", before[0]["run_id"], "-c", str(config), "--json", "--yes"]
        result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "completed"
    assert [step_of(body) for body in server.requests if "messages" in body] == [3, 4, 5, 6, 7]
    events = assert_valid_runlog(runlog)
    assert events[: len(before)] == before
    [mark] = [e for e in events if e["kind"] == "run_resumed"]
    assert mark["from_step"] == 3 and mark["reason"] == "interrupted"
    assert events[-1]["payload"] == {"summary": "wrote milk to out.txt", "files": ["out.txt"]}
    answers = [(e["step"], e["by"]) for e in events if e["kind"] == "approval"]
    assert answers == ([(3, "cli --yes")] if version != "v1" else [])  # v1: no policy yet


@pytest.mark.parametrize("version", VERSIONS)
def test_a_step_limited_run_of_every_version_resumes_with_more_steps(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runlog, _ = _install(tmp_path, version, "max_steps")

    def model(body: dict[str, Any]) -> tuple[int, Any]:
        done = {"summary": "looked around"}
        return 200, completion(None, [("finish_task", done)], model=str(body["model"]))

    with MockOpenAIServer(model, models=["m", "m2"]) as server:
        config = _config(tmp_path, version, server.base_url)
        command = ["resume", str(runlog), "-c", str(config), "--max-steps", "3", "--json"]
        result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert [step_of(body) for body in server.requests if "messages" in body] == [3]
    events = assert_valid_runlog(runlog)
    assert kinds(events).count("run_finished") == 2
    assert events[-1]["status"] == "completed" and events[-1]["steps"] == 3

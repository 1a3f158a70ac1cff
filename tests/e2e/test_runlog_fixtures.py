"""Every runlog format version fabric ever wrote stays readable: `fabric show`, `fabric replay`
and `fabric resume` on the fixture runlogs of each version (tests/fixtures/runlogs/v<N>/,
recorded by real `fabric run` processes, see make_fixtures.py there). From version 3 the
fixture pack checks its work with a command (`verify`): a replay answers those checks from the
recording, a resume runs them for its new steps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fixtures.runlogs.make_fixtures import CHECK_NOTES, TIDIED, completed_model, step_of
from support import assert_valid_runlog, kinds, read_events
from typer.testing import CliRunner

from fabric.domain.runlog import READABLE_VERSIONS
from fabric.interfaces.cli.app import app
from fabric.testing import MockOpenAIServer, completion

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runlogs"
VERSIONS = [f"v{version}" for version in READABLE_VERSIONS]
VERIFIED = [f"v{version}" for version in READABLE_VERSIONS if version >= 3]
"""The sets whose fixture pack checks its work (verify.command; format version 3 on)."""
NOWHERE = "http://127.0.0.1:9/v1"  # replay never calls the model
TRACE = "the-check-ran.txt"
TRACER = f"open({TRACE!r}, 'w').close()\n"
"""A check_notes.py that leaves a file behind if anything runs it."""


def _runs(version: str) -> list[str]:
    """The runs of a fixture set: from version 3 also one that ended ``unverified``."""
    return ["completed", "killed", "max_steps", *(["unverified"] if version in VERIFIED else [])]


def _verifications(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verification events, without what differs between two runs of the same check."""
    drop = {"v", "seq", "ts", "run_id", "duration_ms"}
    return [
        {k: v for k, v in e.items() if k not in drop} for e in events if e["kind"] == "verification"
    ]


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
    for version in VERSIONS:
        runs = sorted(p.name for p in (FIXTURES / version).iterdir() if p.is_dir())
        assert runs == _runs(version)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_fixtures_are_valid_runlogs_of_their_version(version: str) -> None:
    for name in _runs(version):
        events = assert_valid_runlog(
            FIXTURES / version / name / "runlog.jsonl", finished=name != "killed"
        )
        assert {e["v"] for e in events} == {int(version[1:])}
    completed = read_events(FIXTURES / version / "completed" / "runlog.jsonl")
    for kind in ("llm_retry", "llm_fallback", "nudge", "tool_result", "run_finished"):
        assert kind in kinds(completed)
    assert list((FIXTURES / version / "completed" / "artifacts").iterdir())
    assert completed[-1]["steps"] == (9 if version in VERIFIED else 7)


@pytest.mark.parametrize("version", VERIFIED)
def test_the_verified_fixtures_record_each_check_and_its_evidence(version: str) -> None:
    completed = read_events(FIXTURES / version / "completed" / "runlog.jsonl")
    assert completed[0]["verify"] == ["command: python check_notes.py"]
    failed, passed = _verifications(completed)
    assert (failed["step"], failed["ok"], failed["exit_code"]) == (7, False, 1)
    assert "no line 'tidied' yet" in failed["evidence"]
    [answer] = [e for e in completed if e["kind"] == "tool_result" and e["step"] == 7]
    assert answer["name"] == "finish_task" and not answer["ok"]
    assert "did not pass verification" in answer["output"]
    assert failed["evidence"].strip() in answer["output"]  # the model saw the evidence whole
    assert (passed["step"], passed["ok"], passed["exit_code"]) == (9, True, 0)
    assert completed[-1]["status"] == "completed"

    unverified = read_events(FIXTURES / version / "unverified" / "runlog.jsonl")
    assert unverified[0]["verify_override"] == "python check_notes.py done"
    assert unverified[0]["verify"] == ["command: python check_notes.py done"]
    checks = [(e["step"], e["ok"], e["exit_code"]) for e in _verifications(unverified)]
    assert checks == [(2, False, 1), (3, False, 1), (4, False, 1)]
    end = unverified[-1]
    assert end["status"] == "unverified" and end["steps"] == 4
    assert end["payload"] == {"summary": "tidied the notes", "files": ["notes.txt"]}
    assert end["error"]["code"] == "unverified" and "no line 'done'" in end["error"]["message"]


@pytest.mark.parametrize("version", VERSIONS)
def test_show_reads_every_version(version: str) -> None:
    cli = CliRunner()
    folder = FIXTURES / version
    text = cli.invoke(app, ["show", str(folder / "completed")])
    assert text.exit_code == 0, text.output
    assert f"completed after {9 if version in VERIFIED else 7} step(s)" in text.stdout
    assert "switching to m2 on openai" in text.stdout and "retry 2/2" in text.stdout
    assert "warning" not in text.output
    as_json = cli.invoke(app, ["show", str(folder / "completed"), "--json"])
    assert json.loads(as_json.stdout) == read_events(folder / "completed" / "runlog.jsonl")
    killed = cli.invoke(app, ["show", str(folder / "killed"), "--step", "2", "--json"])
    assert {e["step"] for e in json.loads(killed.stdout)} == {2}
    killed_text = cli.invoke(app, ["show", str(folder / "killed")])
    assert "no run_finished" in killed_text.stdout


@pytest.mark.parametrize("version", VERIFIED)
def test_show_tells_each_check_and_the_unverified_end(version: str) -> None:
    cli = CliRunner()
    folder = FIXTURES / version
    completed = cli.invoke(app, ["show", str(folder / "completed")])
    assert completed.exit_code == 0, completed.output
    assert "completed after 9 step(s)" in completed.stdout
    assert "NOT verified: `python check_notes.py` failed with exit code 1" in completed.stdout
    assert "notes.txt has no line 'tidied' yet" in completed.stdout  # the evidence
    assert "verified: `python check_notes.py` passed (exit code 0)" in completed.stdout
    shown = cli.invoke(app, ["show", str(folder / "unverified")])
    assert shown.exit_code == 0, shown.output
    assert "unverified after 4 step(s)" in shown.stdout
    assert shown.stdout.count("NOT verified: `python check_notes.py done` failed") == 3
    assert "the work still failed verification after 2 repair round(s)" in shown.stdout
    assert "warning" not in shown.output
    as_json = cli.invoke(app, ["show", str(folder / "unverified"), "--json"])
    assert json.loads(as_json.stdout) == read_events(folder / "unverified" / "runlog.jsonl")


@pytest.mark.parametrize(
    ("version", "name"),
    [(version, name) for version in VERSIONS for name in _runs(version) if name != "killed"],
)
def test_replay_of_every_version_is_identical(
    version: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, version)
    runlog, workspace = _install(tmp_path, version, name)
    (workspace / "check_notes.py").write_text(TRACER)  # would leave a trace if a check ran
    result = CliRunner().invoke(app, ["replay", str(runlog), "-c", str(config), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "identical", report["divergence"]
    recorded = read_events(runlog)
    assert report["steps_replayed"] == recorded[-1]["steps"]
    assert report["result"]["status"] == recorded[-1]["status"]
    assert report["result"]["payload"] == recorded[-1]["payload"]
    replayed = assert_valid_runlog(report["runlog"])
    assert replayed[0]["replay_of"] == recorded[0]["run_id"]
    # the checks' verdicts come from the recording: nothing ran, in the workspace or elsewhere
    assert _verifications(replayed) == _verifications(recorded)
    assert not (workspace / TRACE).exists() and not (tmp_path / TRACE).exists()
    assert (workspace / "notes.txt").read_text() == "remember the milk\n"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_killed_run_of_every_version_resumes(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runlog, workspace = _install(tmp_path, version, "killed")
    (workspace / "out.txt").write_text("milk\n")  # what step 2 of the killed run wrote
    if version in VERIFIED:
        (workspace / "check_notes.py").write_text(CHECK_NOTES)  # the pack's check
    before = read_events(runlog)
    with MockOpenAIServer(completed_model, models=["m", "m2"]) as server:
        config = _config(tmp_path, version, server.base_url)
        command = ["resume", before[0]["run_id"], "-c", str(config), "--json", "--yes"]
        result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "completed"
    asked = [step_of(body) for body in server.requests if "messages" in body]
    events = assert_valid_runlog(runlog)
    assert events[: len(before)] == before
    [mark] = [e for e in events if e["kind"] == "run_resumed"]
    assert mark["from_step"] == 3 and mark["reason"] == "interrupted"
    answers = [(e["step"], e["by"]) for e in events if e["kind"] == "approval"]
    assert answers == ([(3, "cli --yes")] if version != "v1" else [])  # v1: no policy yet
    checks = [
        (e["step"], e["ok"], e.get("exit_code")) for e in events if e["kind"] == "verification"
    ]
    if version in VERIFIED:
        # the check ran live in the workspace: it failed on the notes as they were, the model
        # added the line it wants (step 8), and it passed
        assert asked == [3, 4, 5, 6, 7, 8, 9]
        assert checks == [(7, False, 1), (9, True, 0)]
        assert (workspace / "notes.txt").read_text() == TIDIED
        assert events[-1]["payload"]["files"] == ["out.txt", "notes.txt"]
    else:  # no checks: the first valid finish ends the run
        assert asked == [3, 4, 5, 6, 7] and checks == []
        assert events[-1]["payload"] == {"summary": "wrote milk to out.txt", "files": ["out.txt"]}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_step_limited_run_of_every_version_resumes_with_more_steps(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runlog, _ = _install(tmp_path, version, "max_steps")
    before = read_events(runlog)

    def model(body: dict[str, Any]) -> tuple[int, Any]:
        done = {"summary": "looked around"}
        return 200, completion(None, [("finish_task", done)], model=str(body["model"]))

    with MockOpenAIServer(model, models=["m", "m2"]) as server:
        config = _config(tmp_path, version, server.base_url)
        command = ["resume", str(runlog), "-c", str(config), "--max-steps", "3", "--json"]
        result = CliRunner().invoke(app, command)
    # a run with a check that had nothing to check (it only listed files) cannot be confirmed
    ended, code = _ended(version)
    assert result.exit_code == code, result.output
    assert [step_of(body) for body in server.requests if "messages" in body] == [3]
    events = assert_valid_runlog(runlog)
    assert kinds(events).count("run_finished") == 1  # the first end is kept in run_resumed
    assert events[-1]["status"] == ended and events[-1]["steps"] == 3
    assert events[: len(before) - 1] == before[:-1]
    mark = events[len(before) - 1]
    assert mark["kind"] == "run_resumed" and mark["ended"]["status"] == "max_steps"
    assert mark["ended"]["ts"] == before[-1]["ts"] and mark["ended"]["steps"] == 2
    skipped = [(e["step"], e.get("skipped")) for e in events if e["kind"] == "verification"]
    assert skipped == ([(3, True)] if version in VERIFIED else [])  # it only listed files


def _ended(version: str) -> tuple[str, int]:
    """How a resumed run of a fixture that only looked around ends, and fabric's exit code:
    with checks (v3 on) none of them could confirm a look, so it is said to be unconfirmed."""
    return ("completed_unconfirmed", 3) if version in VERIFIED else ("completed", 0)


def _as_an_earlier_fabric_wrote(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The log as a fabric before one-end resumes wrote it: each end a resume continued stayed
    a run_finished line, followed by run_resumed (checked against a log the earlier fabric
    recorded: the same lines, but for the times and the mock server's address)."""
    older: list[dict[str, Any]] = []
    for event in events:
        if event["kind"] == "run_resumed" and "ended" in event:
            ended = dict(event["ended"])
            envelope = {"v": older[-1]["v"], "seq": 0, "ts": ended.pop("ts")}
            older.append({**envelope, "run_id": event["run_id"], "kind": "run_finished", **ended})
            event = {k: v for k, v in event.items() if k != "ended"}
        older.append(event)
    return [{**event, "seq": seq} for seq, event in enumerate(older)]


def _lists_then_finishes(body: dict[str, Any]) -> tuple[int, Any]:
    """The fixture's step-limited model (it lists the files) until step 4, which finishes."""
    if step_of(body) < 4:
        return 200, completion(None, [("list_files", {})], model=str(body["model"]))
    return 200, completion(None, [("finish_task", {"summary": "looked"})], model=str(body["model"]))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_log_with_two_ends_from_an_earlier_fabric_shows_replays_and_resumes(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runlog, _ = _install(tmp_path, version, "max_steps")
    cli = CliRunner()
    with MockOpenAIServer(_lists_then_finishes, models=["m", "m2"]) as server:
        config = _config(tmp_path, version, server.base_url)
        more = ["resume", str(runlog), "-c", str(config), "--json", "--max-steps"]
        assert cli.invoke(app, [*more, "3"]).exit_code == 1  # stopped at max_steps again
        older = _as_an_earlier_fabric_wrote(read_events(runlog))
        assert kinds(older).count("run_finished") == 2
        runlog.write_text("".join(json.dumps(e) + "\n" for e in older))
        assert_valid_runlog(runlog)

        shown = cli.invoke(app, ["show", str(runlog)])
        assert shown.exit_code == 0, shown.output
        assert "max_steps after 2 step(s)" in shown.stdout
        assert "max_steps after 3 step(s)" in shown.stdout
        assert json.loads(cli.invoke(app, ["show", str(runlog), "--json"]).stdout) == older
        replayed = cli.invoke(app, ["replay", str(runlog), "-c", str(config), "--json"])
        assert replayed.exit_code == 0, replayed.output
        assert json.loads(replayed.stdout)["steps_replayed"] == 3
        assert json.loads(replayed.stdout)["status"] == "identical"

        asked = len(server.requests)
        result = cli.invoke(app, [*more, "5"])
        assert result.exit_code == _ended(version)[1], result.output
        assert [step_of(body) for body in server.requests[asked:]] == [4]
        again = cli.invoke(app, ["replay", str(runlog), "-c", str(config), "--json"])
    events = assert_valid_runlog(runlog)
    assert events[: len(older) - 1] == older[:-1]  # what the earlier fabric wrote stays
    assert [e["status"] for e in events if e["kind"] == "run_finished"] == [
        "max_steps",  # the earlier fabric's, followed by its run_resumed
        _ended(version)[0],
    ]
    mark = events[len(older) - 1]
    assert mark["kind"] == "run_resumed" and mark["from_step"] == 4
    assert mark["ended"]["steps"] == 3 and mark["ended"]["status"] == "max_steps"
    assert events[-1]["steps"] == 4 and events[-1]["payload"] == {"summary": "looked"}
    report = json.loads(again.stdout)
    assert report["status"] == "identical", report["divergence"]
    assert report["steps_replayed"] == 4

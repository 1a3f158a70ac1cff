"""`fabric replay`: a recorded run re-driven with the recorded model answers and tool results;
identical when nothing changed, and a precise first divergence when the pack or the recording
did."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from support import assert_valid_runlog, read_events
from typer.testing import CliRunner

from fabric.application.approvals import AutoApprover
from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, Kit
from fabric.application.pack import Pack
from fabric.application.replay import ReplayReport, replay
from fabric.config.schema import SandboxSettings
from fabric.domain.models import RunStatus
from fabric.infrastructure.runlog import JsonlRunLog
from fabric.infrastructure.tools.function_tool import FunctionTool
from fabric.interfaces.cli.app import app
from fabric.testing import (
    MemoryRunLog,
    MockOpenAIServer,
    ScriptedChatClient,
    completion,
    tool_call,
    tool_calls,
)

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def shout(self, text: str) -> str:
        """Say the text loudly.

        Args:
            text: What to say.
        """
        self.calls += 1
        return text.upper()

    def shout_quietly(self, text: str) -> str:
        """Say it quietly.

        Args:
            text: What to say.
        """
        self.calls += 1
        return text.upper()


def make_pack(counter: Counter, *, prompt: str = "You shout.", quiet: bool = False) -> Pack:
    tool = FunctionTool(counter.shout_quietly if quiet else counter.shout, name="shout")
    return Pack(
        name="shouter",
        description="shouts",
        system_prompt=prompt,
        tools=[tool],
        finish_schema=SCHEMA,
    )


def record(tmp_path: Path) -> list[dict[str, Any]]:
    chat = ScriptedChatClient(
        [
            tool_calls(("shout", {"text": "hi"}), ("shout", {"text": "there"})),
            tool_call("shout", text="again"),
            tool_call("finish_task", answer="HI THERE AGAIN"),
        ]
    )
    log = MemoryRunLog("orig-1")
    result = asyncio.run(
        execute_task(
            Job("shout hi there", make_pack(Counter()), "orig-1", tmp_path), Kit(chat, log)
        )
    )
    assert result.status is RunStatus.COMPLETED
    return assert_valid_runlog(log.events)


def do_replay(
    events: list[dict[str, Any]], pack: Pack, tmp_path: Path, *, live: bool = False
) -> tuple[ReplayReport, list[dict[str, Any]]]:
    log = MemoryRunLog("replay-1")
    report = asyncio.run(
        replay(
            events, pack=pack, run_id="replay-1", workspace=tmp_path, kit=Kit(None, log), live=live
        )
    )
    return report, assert_valid_runlog(log.events)


def test_an_unchanged_pack_replays_identically_without_running_tools(tmp_path: Path) -> None:
    events = record(tmp_path)
    counter = Counter()
    report, replayed = do_replay(events, make_pack(counter), tmp_path)
    assert report.identical, report.divergence
    assert report.result.status is RunStatus.COMPLETED
    assert report.result.payload == {"answer": "HI THERE AGAIN"}
    assert report.result.steps == 3
    assert counter.calls == 0  # recorded results: no side effects
    assert replayed[0]["replay_of"] == "orig-1"
    outputs = [e["output"] for e in replayed if e["kind"] == "tool_result"][:3]
    assert outputs == ["HI", "THERE", "AGAIN"]


def test_live_tools_run_for_real_and_still_match(tmp_path: Path) -> None:
    events = record(tmp_path)
    counter = Counter()
    report, _ = do_replay(events, make_pack(counter), tmp_path, live=True)
    assert report.identical, report.divergence
    assert counter.calls == 3


def test_a_changed_system_prompt_diverges_at_step_1(tmp_path: Path) -> None:
    events = record(tmp_path)
    report, replayed = do_replay(events, make_pack(Counter(), prompt="You whisper."), tmp_path)
    assert not report.identical
    d = report.divergence
    assert d is not None
    assert (d.step, d.field) == (1, "messages[0].content")
    assert "shout" in d.recorded and "whisper" in d.now
    assert report.result.status is RunStatus.FAILED
    assert replayed[-1]["error"]["code"] == "diverged"


def test_a_changed_tool_description_diverges_in_tools(tmp_path: Path) -> None:
    events = record(tmp_path)
    report, _ = do_replay(events, make_pack(Counter(), quiet=True), tmp_path)
    d = report.divergence
    assert d is not None
    assert (d.step, d.field) == (1, "tools[0].function.description")
    assert "quietly" in d.now


def test_a_changed_tool_output_diverges_at_the_next_step(tmp_path: Path) -> None:
    events = copy.deepcopy(record(tmp_path))
    first = next(e for e in events if e["kind"] == "tool_result")
    first["output"] = "hi (edited)"
    report, _ = do_replay(events, make_pack(Counter()), tmp_path)
    d = report.divergence
    assert d is not None
    assert (d.step, d.field) == (2, "messages[3].content")
    assert json.loads(d.recorded) == "HI" and json.loads(d.now) == "hi (edited)"


def test_a_changed_finish_payload_is_a_divergence(tmp_path: Path) -> None:
    events = copy.deepcopy(record(tmp_path))
    events[-1]["payload"] = {"answer": "something else"}
    report, _ = do_replay(events, make_pack(Counter()), tmp_path)
    d = report.divergence
    assert d is not None
    assert (d.step, d.field) == (3, "payload.answer")


def test_a_shorter_recording_diverges_on_the_step_count(tmp_path: Path) -> None:
    events = record(tmp_path)
    cut = [e for e in events if e.get("step") != 3 and e["kind"] != "run_finished"]
    report, _ = do_replay(cut, make_pack(Counter()), tmp_path)
    d = report.divergence
    assert d is not None
    assert (d.step, d.field) == (3, "step count")


CONFIG = """\
version: 1
llm:
  backend: openai
  backends:
    openai: {{kind: openai, base_url: "{url}"}}
  models: {{default: m}}
  retry: {{attempts: 1}}
runs_dir: runs
default_pack: reader
packs:
  reader:
    builder: declarative
    system_prompt: {prompt}
    tools: [read_file]
    finish_schema:
      type: object
      properties: {{summary: {{type: string}}}}
      required: [summary]
"""


def record_with_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any]:
    """`fabric run` in ``tmp_path`` (a run that reads ``ws/notes.txt``); its config, and what
    it printed with --json."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("remember the milk\n")
    script = [
        completion(None, [("read_file", {"path": "notes.txt"})]),
        completion("Done.", [("finish_task", {"summary": "milk"})]),
    ]
    with MockOpenAIServer(script, models=["m"]) as server:
        config = tmp_path / "fabric.yaml"
        config.write_text(CONFIG.format(url=server.base_url, prompt="You read notes."))
        ran = CliRunner().invoke(
            app, ["run", "-c", str(config), "-w", "ws", "--json", "-q", "read"]
        )
        assert ran.exit_code == 0, ran.output
    return config, json.loads(ran.stdout)


def test_cli_replays_a_recorded_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, original = record_with_cli(tmp_path, monkeypatch)
    (tmp_path / "ws" / "notes.txt").write_text("changed since\n")  # recorded tools: unseen
    cli = CliRunner()

    same = cli.invoke(app, ["replay", original["run_id"], "-c", str(config), "--json"])
    assert same.exit_code == 0, same.output
    report = json.loads(same.stdout)
    assert report["status"] == "identical" and report["replay_of"] == original["run_id"]
    events = assert_valid_runlog(report["runlog"])
    assert events[0]["replay_of"] == original["run_id"]
    assert (tmp_path / "ws" / "notes.txt").read_text() == "changed since\n"

    text = cli.invoke(app, ["replay", original["runlog"], "-c", str(config)])
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith("identical")

    live = cli.invoke(app, ["replay", original["run_id"], "-c", str(config), "--live-tools"])
    assert live.exit_code == 1, live.output  # the file changed: step 2 sees new content
    assert "step:     2" in live.stdout and "messages[3].content" in live.stdout
    assert (tmp_path / "ws" / "notes.txt").read_text() == "changed since\n"

    config.write_text(config.read_text().replace("You read notes.", "You skim notes."))
    changed = cli.invoke(app, ["replay", original["run_id"], "-c", str(config)])
    assert changed.exit_code == 1, changed.output
    assert "field:    messages[0].content" in changed.stdout
    replay_logs = sorted((tmp_path / "runs").glob("*/runlog.jsonl"))
    assert len(replay_logs) == 5
    for path in replay_logs:
        assert_valid_runlog(read_events(path))


def test_a_live_replay_writes_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "ghp_replay0123456789abcdef"
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    config, original = record_with_cli(tmp_path, monkeypatch)
    (tmp_path / "ws" / "notes.txt").write_text(f"the token is {secret}\n")  # leaked since

    args = ["replay", original["run_id"], "-c", str(config), "--live-tools", "--json"]
    live = CliRunner().invoke(app, args)
    assert live.exit_code == 1, live.output  # the live tool read the new content
    written = Path(json.loads(live.stdout)["runlog"]).read_text()
    assert secret not in written and "the token is [redacted]" in written


def test_cli_unknown_run_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "fabric.yaml"
    config.write_text(CONFIG.format(url="http://127.0.0.1:1/v1", prompt="x"))
    result = CliRunner().invoke(app, ["replay", "no-such-run", "-c", str(config)])
    assert result.exit_code == 2


def test_jsonl_runlog_artifacts_come_back_whole(tmp_path: Path) -> None:
    """A cut tool output is replayed from its artifact, so it is cut the same way again."""
    big = "x" * 1000
    counter = Counter()
    chat = ScriptedChatClient(
        [tool_call("shout", text=big), tool_call("finish_task", answer="done")]
    )
    from fabric.config.schema import Limits

    log = JsonlRunLog(tmp_path / "runs", "orig-2")
    asyncio.run(
        execute_task(
            Job("shout", make_pack(counter), "orig-2", tmp_path, Limits(tool_output_chars=256)),
            Kit(chat, log),
        )
    )
    events = assert_valid_runlog(log.path)
    assert any("artifact" in e for e in events)
    out = MemoryRunLog("replay-2")
    report = asyncio.run(
        replay(
            events,
            pack=make_pack(Counter()),
            run_id="replay-2",
            workspace=tmp_path,
            kit=Kit(None, out),
            run_dir=log.dir,
        )
    )
    assert report.identical, report.divergence


# --- policy decisions and approvals (runlog format 2) ----------------------------------------


def _policy(*rules: dict[str, Any], default: str = "allow") -> SandboxSettings:
    return SandboxSettings.model_validate({"policy": {"default": default, "rules": list(rules)}})


def record_with(tmp_path: Path, sandbox: SandboxSettings) -> list[dict[str, Any]]:
    """The recorded shout run under ``sandbox``'s policy; asks are approved (as --yes)."""
    chat = ScriptedChatClient(
        [
            tool_calls(("shout", {"text": "hi"}), ("shout", {"text": "there"})),
            tool_call("finish_task", answer="HI THERE"),
        ]
    )
    log = MemoryRunLog("orig-p")
    asyncio.run(
        execute_task(
            Job("shout hi there", make_pack(Counter()), "orig-p", tmp_path, sandbox=sandbox),
            Kit(chat, log),
            Control(approver=AutoApprover("cli --yes")),
        )
    )
    return assert_valid_runlog(log.events)


def replay_with(
    events: list[dict[str, Any]], tmp_path: Path, sandbox: SandboxSettings, counter: Counter
) -> tuple[ReplayReport, list[dict[str, Any]]]:
    log = MemoryRunLog("replay-p")
    report = asyncio.run(
        replay(
            events,
            pack=make_pack(counter),
            run_id="replay-p",
            workspace=tmp_path,
            kit=Kit(None, log),
            sandbox=sandbox,
        )
    )
    return report, assert_valid_runlog(log.events)


def test_a_changed_policy_verdict_is_a_divergence_in_policy(tmp_path: Path) -> None:
    events = record_with(tmp_path, _policy())
    assert [e["verdict"] for e in events if e["kind"] == "policy_decision"] == ["allow"] * 2
    stricter = _policy({"tool": "shout", "verdict": "deny"})
    report, _ = replay_with(events, tmp_path, stricter, Counter())
    d = report.divergence
    assert d is not None
    assert (d.step, d.field) == (1, "policy")
    assert json.loads(d.recorded) == "allow (shout, the policy default)"
    assert json.loads(d.now).startswith("deny (shout, rule: ")


def test_recorded_approvals_and_refusals_replay_identically(tmp_path: Path) -> None:
    sandbox = _policy({"tool": "shout", "verdict": "ask"})
    asked = record_with(tmp_path, sandbox)
    assert [e["by"] for e in asked if e["kind"] == "approval"] == ["cli --yes"] * 2
    counter = Counter()
    report, replayed = replay_with(asked, tmp_path, sandbox, counter)
    assert report.identical, report.divergence
    assert [e["by"] for e in replayed if e["kind"] == "approval"] == ["replay"] * 2
    assert counter.calls == 0

    refusing = _policy({"tool": "shout", "verdict": "deny"})
    denied = record_with(tmp_path, refusing)
    codes = [e["error"]["code"] for e in denied if e["kind"] == "tool_result" and not e["ok"]]
    assert codes == ["policy_denied"] * 2
    report, _ = replay_with(denied, tmp_path, refusing, counter)
    assert report.identical, report.divergence
    looser = _policy()  # now allowed: the tool would run where it was refused
    report, _ = replay_with(denied, tmp_path, looser, counter)
    assert report.divergence is not None and report.divergence.field == "policy"

"""The ``fabric`` command as a user runs it: against a real loopback model server, in a real
workspace, checking exit codes, what is printed, the runlog and what the server received."""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import assert_valid_runlog, kinds, read_events, run_fabric
from typer.testing import CliRunner

from fabric.interfaces.cli.app import app
from fabric.testing import MockOpenAIServer, completion

CONFIG = """\
version: 1
llm:
  backend: openai
  backends:
    openai: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
  models: {default: mock-small, coder: mock-coder}
  retry: {attempts: 1}
runs_dir: runs
default_pack: engineering
packs:
  engineering:
    builder: packs.engineering:build
    model: coder
    limits: {max_steps: 6, finish_repairs: 0}
    sandbox: {allowed_commands: [python, ls], command_timeout: 30}
  reviewer:
    builder: declarative
    description: Reads code and reports problems.
    system_prompt: You review code.
    tools: [read_file, search_files]
    finish_schema:
      type: object
      properties: {verdict: {type: string}}
      required: [verdict]
"""
API_KEY = "sk-e2e-do-not-leak-4242"
MODELS = ["mock-small", "mock-coder", "llama3.1:8b", "env-model"]
ENGINEERING_TOOLS = [
    "read_file",
    "edit_file",
    "write_file",
    "list_files",
    "search_files",
    "shell",
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "fabric.yaml").write_text(CONFIG)
    (tmp_path / "ws").mkdir()
    return tmp_path


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def fabric(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command, in a child process."""
    return run_fabric(*args, env=env, cwd=cwd)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body["tools"]]


# --- the required end-to-end run ------------------------------------------------------------

PRINT_KEY = "python -c \"import os; print('key=' + str(os.environ.get('FABRIC_API_KEY')))\""


def test_fabric_run_json_end_to_end(project: Path) -> None:
    script = [
        completion(
            "I will write the file first.",
            [("write_file", {"path": "hello.py", "content": "print('hello from fabric')\n"})],
        ),
        completion(
            None, [("shell", {"command": "python hello.py"}), ("shell", {"command": PRINT_KEY})]
        ),
        completion(
            None,
            [("finish_task", {"summary": "wrote and ran hello.py", "artifacts": ["hello.py"]})],
        ),
    ]
    workspace = project / "ws"
    with MockOpenAIServer(script, models=MODELS) as server:
        env = {**os.environ, "FABRIC_BASE_URL": server.base_url, "FABRIC_API_KEY": API_KEY}
        proc = fabric(
            "run",
            "--pack",
            "engineering",
            "--config",
            str(project / "fabric.yaml"),
            "--workspace",
            str(workspace),
            "--json",
            "--verify",  # the user's own definition of done: it confirms the work
            "python hello.py",
            "Create hello.py and run it.",
            env=env,
            cwd=project,
        )
    assert proc.returncode == 0, proc.stderr

    # the workspace changed as the model asked
    assert (workspace / "hello.py").read_text() == "print('hello from fabric')\n"

    # one JSON object on stdout
    out = json.loads(proc.stdout)
    assert out["status"] == "completed"
    assert out["payload"] == {"summary": "wrote and ran hello.py", "artifacts": ["hello.py"]}
    runlog = Path(out["runlog"])
    assert runlog == project / "runs" / out["run_id"] / "runlog.jsonl"

    # progress on stderr, as it happened
    assert "step  1  write_file path=hello.py" in proc.stderr
    assert 'shell command="python hello.py"  → exit code 0' in proc.stderr
    assert "step  3  verified: `python hello.py` passed (exit code 0)" in proc.stderr
    assert "completed after 3 step(s)" in proc.stderr

    # the runlog tells the story and follows the published schema
    events = assert_valid_runlog(runlog)
    for kind in ("llm_request", "llm_response", "tool_call", "tool_result"):
        assert kind in kinds(events)
    assert events[0]["model"] == "mock-coder"
    assert events[-1]["status"] == "completed"
    assert events[-1]["payload"] == out["payload"]
    checks = [
        (e["check"], e["ok"], e.get("confirms")) for e in events if e["kind"] == "verification"
    ]
    assert ("command: python hello.py", True, True) in checks
    results = [e for e in events if e["kind"] == "tool_result"]
    assert [r["name"] for r in results] == ["write_file", "shell", "shell"]
    assert results[1]["output"] == "[exit code 0]\nhello from fabric\n"
    assert results[2]["output"] == "[exit code 0]\nkey=None\n"  # the key never reached tools
    assert API_KEY not in runlog.read_text()
    assert API_KEY not in proc.stdout + proc.stderr

    # what the model server received
    requests = server.requests
    assert len(requests) == 3
    for body in requests:
        assert body["_path"] == "/v1/chat/completions"
        assert body["_authorization"] == f"Bearer {API_KEY}"
        assert body["model"] == "mock-coder"
        assert tool_names(body) == [*ENGINEERING_TOOLS, "finish_task"]
        finish = body["tools"][-1]["function"]
        assert "summary" in finish["parameters"]["required"]
    first = requests[0]["messages"]
    assert [m["role"] for m in first] == ["system", "user"]
    task, brief = first[1]["content"].split("\n\n", 1)  # the task, then the pack's look
    assert task == "Create hello.py and run it."
    assert brief.startswith("Before you start, fabric looked at the workspace.")
    assert '"parameters"' not in json.dumps(first)  # schemas go in `tools`, not the prompt
    for before, after in itertools.pairwise(requests):
        grown = after["messages"]
        assert grown[: len(before["messages"])] == before["messages"]  # appended only
    second = requests[1]["messages"][2:]
    assert second[0]["role"] == "assistant"
    assert second[0]["tool_calls"][0]["function"]["name"] == "write_file"
    assert second[1] == {
        "role": "tool",
        "tool_call_id": second[0]["tool_calls"][0]["id"],
        "content": "wrote 27 bytes to hello.py",
    }
    third = requests[2]["messages"][4:]
    assert [m["role"] for m in third] == ["assistant", "tool", "tool"]

    # the runlog logs each request's new messages only, and they rebuild the history
    history: list[dict[str, Any]] = []
    for event in events:
        if event["kind"] == "llm_request":
            history += event["messages"]
            assert history == requests[event["step"] - 1]["messages"]
        elif event["kind"] == "llm_response":
            history.append(event["message"])


def test_fabric_run_without_a_model_server(project: Path) -> None:
    port = closed_port()
    env = {**os.environ, "FABRIC_BASE_URL": f"http://127.0.0.1:{port}/v1"}
    proc = fabric(
        "run", "-p", "engineering", "-w", "ws", "--config", "fabric.yaml", "say hi",
        env=env, cwd=project,
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"cannot reach the model server at http://127.0.0.1:{port}/v1" in proc.stderr
    assert "start the server" in proc.stderr
    assert "ollama serve" in proc.stderr
    assert "Traceback" not in proc.stderr
    runlog = Path(proc.stdout.strip().splitlines()[-1].removeprefix("runlog: "))
    events = assert_valid_runlog(runlog)
    assert events[-1]["status"] == "failed"
    assert events[-1]["error"]["code"] == "network"


# --- fabric run, in-process ------------------------------------------------------------------


@pytest.fixture
def cli(project: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(project)  # ./fabric.yaml is the project's
    return CliRunner()


def test_run_prints_payload_and_runlog_path(
    cli: CliRunner, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "ws" / "notes.txt").write_text("remember the milk\n")
    script = [
        completion(None, [("read_file", {"path": "notes.txt"})]),
        completion("Done.", [("finish_task", {"summary": "read the notes"})]),
    ]
    with MockOpenAIServer(script, models=MODELS) as server:
        monkeypatch.setenv("FABRIC_BASE_URL", server.base_url)
        result = cli.invoke(app, ["run", "-w", "ws", "read my notes"])  # default_pack
    # it only read: nothing could confirm the claim, so it is done but said to be unconfirmed
    assert result.exit_code == 3, result.stderr
    assert "completed_unconfirmed after 2 step(s)" in result.stderr
    assert "none of them confirms it was done" in result.stderr
    payload_text, runlog_line = result.stdout.rsplit("runlog: ", 1)
    assert json.loads(payload_text) == {"summary": "read the notes"}
    events = assert_valid_runlog(Path(runlog_line.strip()))
    assert events[0]["pack"] == "engineering"
    assert "step  1  read_file path=notes.txt  → ok" in result.stderr
    assert "step  2  model: Done." in result.stderr
    assert "step  2  finish_task" in result.stderr


def test_model_option_picks_a_key_or_a_name(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    finish = completion(None, [("finish_task", {"summary": "ok"})])
    with MockOpenAIServer([finish, finish], models=MODELS) as server:
        monkeypatch.setenv("FABRIC_BASE_URL", server.base_url)
        # done, unconfirmed (3): each run only claimed, with nothing to check
        assert cli.invoke(app, ["run", "-w", "ws", "-m", "default", "x"]).exit_code == 3
        assert cli.invoke(app, ["run", "-w", "ws", "-m", "llama3.1:8b", "x"]).exit_code == 3
    assert [r["model"] for r in server.requests] == ["mock-small", "llama3.1:8b"]


def test_fabric_model_env_overrides_the_pack_model(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MockOpenAIServer(
        [completion(None, [("finish_task", {"summary": "ok"})])], models=MODELS
    ) as server:
        monkeypatch.setenv("FABRIC_BASE_URL", server.base_url)
        monkeypatch.setenv("FABRIC_MODEL", "env-model")
        assert cli.invoke(app, ["run", "-w", "ws", "x"]).exit_code == 3  # done, unconfirmed
    assert server.requests[0]["model"] == "env-model"


def test_openai_api_key_is_sent_when_fabric_api_key_is_unset(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MockOpenAIServer(
        [completion(None, [("finish_task", {"summary": "ok"})])], models=MODELS
    ) as server:
        monkeypatch.setenv("FABRIC_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-fallback")
        assert cli.invoke(app, ["run", "-w", "ws", "x"]).exit_code == 3  # done, unconfirmed
    assert server.requests[0]["_authorization"] == "Bearer sk-openai-fallback"


def test_step_limit_exits_1(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    looping = completion(None, [("list_files", {})])
    with MockOpenAIServer([looping] * 3, models=MODELS) as server:
        monkeypatch.setenv("FABRIC_BASE_URL", server.base_url)
        result = cli.invoke(app, ["run", "-w", "ws", "--max-steps", "2", "--json", "loop"])
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["status"] == "max_steps"
    assert out["payload"] is None
    assert len(server.requests) == 2
    assert assert_valid_runlog(Path(out["runlog"]))[-1]["status"] == "max_steps"


def test_invalid_output_exits_1(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = completion(None, [("finish_task", {"summary": 42})])  # finish_repairs: 0
    with MockOpenAIServer([bad], models=MODELS) as server:
        monkeypatch.setenv("FABRIC_BASE_URL", server.base_url)
        result = cli.invoke(app, ["run", "-w", "ws", "--json", "x"])
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["status"] == "invalid_output"
    assert "summary" in out["error"]["message"]


def test_quiet_failure_still_says_why(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRIC_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    result = cli.invoke(app, ["run", "-q", "-w", "ws", "x"])
    assert result.exit_code == 1
    assert "· pack engineering" not in result.stderr  # quiet: no progress lines
    assert "the task did not finish: failed" in result.stderr
    assert "cannot reach the model server" in result.stderr
    assert "runlog: " in result.stdout


def test_a_refused_tool_call_is_shown_and_the_run_goes_on(
    cli: CliRunner, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = [
        completion(None, [("shell", {"command": "rm -rf /"})]),
        completion(None, [("read_file", {"path": "../fabric.yaml"})]),
        completion(None, [("finish_task", {"summary": "gave up"})]),
    ]
    with MockOpenAIServer(script, models=MODELS) as server:
        monkeypatch.setenv("FABRIC_BASE_URL", server.base_url)
        result = cli.invoke(app, ["run", "-w", "ws", "x"])
    assert result.exit_code == 3  # it ended done, unconfirmed: the refusals did not stop it
    assert "shell command=\"rm -rf /\"  → error: program 'rm' is not allowed" in result.stderr
    assert "read_file path=../fabric.yaml  → error:" in result.stderr
    tool_msgs = [m for m in server.requests[2]["messages"] if m["role"] == "tool"]
    assert "not allowed" in tool_msgs[0]["content"]
    assert "outside the workspace" in tool_msgs[1]["content"]
    assert "packs.engineering" not in tool_msgs[1]["content"]  # the config was never read


# --- usage and configuration errors: exit 2 -------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["run", "-w", "ws", "--max-steps", "0", "x"],
        ["run", "-w", "ws", "   "],
        ["run", "-w", "missing-folder", "x"],
        ["run", "-w", "ws", "--pack", "nope", "x"],
        ["run", "--config", "missing.yaml", "x"],
        ["run"],
        ["show", "no-such-run"],
    ],
)
def test_usage_errors_exit_2(cli: CliRunner, args: list[str]) -> None:
    result = cli.invoke(app, args)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_no_pack_and_no_default_lists_the_packs(cli: CliRunner, project: Path) -> None:
    (project / "fabric.yaml").write_text(CONFIG.replace("default_pack: engineering\n", ""))
    result = cli.invoke(app, ["run", "x"])
    assert result.exit_code == 2
    assert "no pack given" in result.stderr
    assert "engineering, reviewer" in result.stderr


BROKEN = {
    "bad yaml": ("packs:\n  p: {builder: engineering\n", "not valid YAML", None),
    "unknown key": ("llm:\n  modles: {default: m}\n", "llm.modles: unknown key", 2),
    "wrong type": (
        "packs:\n  p:\n    builder: engineering\n    limits: {max_steps: lots}\n",
        "packs.p.limits.max_steps",
        4,
    ),
    "builder import": (
        "packs:\n  p:\n    builder: packs.nowhere:build\n",
        "packs.p.builder: cannot import 'packs.nowhere'",
        3,
    ),
    "builder attr": (
        "packs:\n  p:\n    builder: packs.engineering:biuld\n",
        "has no callable 'biuld'",
        3,
    ),
    "model key": (
        "packs:\n  p:\n    builder: engineering\n    model: huge\n",
        "packs.p.model: 'huge' is not a model key in llm.models or a backend's models",
        4,
    ),
    "declarative tool": (
        "packs:\n  p:\n    builder: declarative\n    system_prompt: x\n"
        "    tools: [read_file, delete_all]\n    finish_schema: {type: object}\n",
        "packs.p.tools.1: unknown tool 'delete_all'",
        5,
    ),
    "finish schema": (
        "packs:\n  p:\n    builder: declarative\n    system_prompt: x\n"
        "    finish_schema: {type: object, required: yes}\n",
        "packs.p.finish_schema.required: not a valid JSON Schema",
        5,
    ),
    "secret passthrough": (
        "packs:\n  p:\n    builder: engineering\n    sandbox:\n      env_passthrough: [API_KEY]\n",
        "packs.p.sandbox.env_passthrough",
        5,
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
@pytest.mark.parametrize("command", ["run", "packs"])
def test_broken_config_exits_2_naming_file_key_and_line(
    cli: CliRunner, project: Path, case: str, command: str
) -> None:
    text, message, line = BROKEN[case]
    config = project / "broken.yaml"
    config.write_text(text)
    args = ["run", "-p", "p", "-w", "ws", "x"] if command == "run" else ["packs"]
    result = cli.invoke(app, [*args, "--config", str(config)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    assert str(config) in result.stderr
    if line:
        assert f"{config}:{line}:" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (project / "runs").exists()  # nothing ran


def test_config_error_with_json_prints_one_json_error(cli: CliRunner, project: Path) -> None:
    (project / "fabric.yaml").write_text("packs:\n  p:\n    builder: engineering\n    model: x\n")
    result = cli.invoke(app, ["run", "-p", "p", "-w", "ws", "--json", "x"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)
    assert error["status"] == "error"
    assert error["error"]["code"] == "pack_error"
    assert "packs.p.model" in error["error"]["message"]
    assert error["error"]["hint"]


def test_fabric_config_env_is_used_by_the_cli(
    cli: CliRunner, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "elsewhere.yaml"
    other.write_text("packs:\n  only_here:\n    builder: engineering\n")
    monkeypatch.setenv("FABRIC_CONFIG", str(other))
    result = cli.invoke(app, ["packs", "--json"])
    assert [row["name"] for row in json.loads(result.stdout)] == ["only_here"]


# --- fabric packs ---------------------------------------------------------------------------


def test_packs_lists_name_description_tools_model(cli: CliRunner) -> None:
    result = cli.invoke(app, ["packs"])
    assert result.exit_code == 0
    assert "engineering  ·  model coder (mock-coder)" in result.stdout
    assert "reviewer  ·  model default (mock-small)" in result.stdout
    assert "Reads code and reports problems." in result.stdout
    assert "tools: read_file, search_files, finish_task" in result.stdout


def test_packs_json(cli: CliRunner) -> None:
    result = cli.invoke(app, ["packs", "--json"])
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["engineering"]["tools"] == [*ENGINEERING_TOOLS, "finish_task"]
    assert rows["engineering"]["model"] == "coder (mock-coder)"
    assert rows["engineering"]["description"] == "Reads, changes and tests code in the workspace."
    assert rows["reviewer"]["description"] == "Reads code and reports problems."


def test_packs_with_the_packaged_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["packs", "--json"])
    assert result.exit_code == 0
    assert [r["name"] for r in json.loads(result.stdout)] == ["engineering", "research", "reviewer"]


# --- fabric show ----------------------------------------------------------------------------


@pytest.fixture
def finished_run(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = [
        completion("Looking around.", [("list_files", {})]),
        completion(None, [("finish_task", {"summary": "looked", "notes": "nothing there"})]),
    ]
    with MockOpenAIServer(script, models=MODELS) as server:
        monkeypatch.setenv("FABRIC_BASE_URL", server.base_url)
        result = cli.invoke(app, ["run", "-w", "ws", "--json", "look around"])
    assert result.exit_code == 3  # a look: done, nothing to confirm it
    return Path(json.loads(result.stdout)["runlog"])


def test_show_by_path_folder_and_run_id(cli: CliRunner, finished_run: Path) -> None:
    run_id = finished_run.parent.name
    outputs = [
        cli.invoke(app, ["show", ref]).stdout
        for ref in (str(finished_run), str(finished_run.parent), run_id)
    ]
    assert outputs[0] == outputs[1] == outputs[2]
    text = outputs[0]
    assert f"run {run_id} · pack engineering · model mock-coder" in text
    assert "task: look around" in text
    assert "step  1  model: Looking around." in text
    assert "step  1  list_files  → ok" in text
    assert "completed_unconfirmed after 2 step(s) · 30 tokens" in text
    assert "none of them confirms it was done" in text
    assert '"notes": "nothing there"' in text
    assert text.rstrip().endswith(f"runlog: {finished_run}")


def test_replay_with_live_tools_works_on_a_copy_and_leaves_the_workspace_alone(
    cli: CliRunner, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = [
        completion(None, [("write_file", {"path": "hello.py", "content": "print('hi')\n"})]),
        completion(None, [("shell", {"command": "python hello.py"})]),
        completion(None, [("finish_task", {"summary": "wrote hello.py"})]),
    ]
    with MockOpenAIServer(script, models=MODELS) as server:
        monkeypatch.setenv("FABRIC_BASE_URL", server.base_url)
        ran = cli.invoke(app, ["run", "-w", "ws", "--json", "write hello.py"])
    runlog = Path(json.loads(ran.stdout)["runlog"])
    (project / "ws" / "hello.py").unlink()  # the workspace as it was before the run
    scratch = project / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))

    replayed = cli.invoke(app, ["replay", str(runlog), "--live-tools", "--json"])
    assert replayed.exit_code == 0, replayed.output
    report = json.loads(replayed.stdout)
    assert report["status"] == "identical", report["divergence"]
    # the tools ran for real, on a copy: the workspace itself was not written to
    assert not (project / "ws" / "hello.py").exists()
    assert list(scratch.iterdir()) == []  # the copy is gone
    events = assert_valid_runlog(Path(report["runlog"]))
    [shell] = [e for e in events if e["kind"] == "tool_result" and e["name"] == "shell"]
    assert shell["output"] == "[exit code 0]\nhi\n"


def test_show_json_is_the_events(cli: CliRunner, finished_run: Path) -> None:
    result = cli.invoke(app, ["show", "--json", str(finished_run)])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == read_events(finished_run)


def test_show_reports_a_torn_last_line_and_goes_on(cli: CliRunner, finished_run: Path) -> None:
    lines = finished_run.read_text().splitlines(keepends=True)
    finished_run.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    result = cli.invoke(app, ["show", str(finished_run)])
    assert result.exit_code == 0
    assert f"{finished_run}:{len(lines)}: the last line is torn" in result.stderr
    assert "step  1  list_files  → ok" in result.stdout
    assert "no run_finished" in result.stdout
    as_json = cli.invoke(app, ["show", "--json", str(finished_run)])
    assert len(json.loads(as_json.stdout)) == len(lines) - 1


def test_show_a_failed_run_says_what_to_do(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRIC_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    result = cli.invoke(app, ["run", "-q", "-w", "ws", "--json", "x"])
    shown = cli.invoke(app, ["show", json.loads(result.stdout)["runlog"]])
    assert shown.exit_code == 0
    assert "failed after 0 step(s)" in shown.stdout
    assert "hint: start the server" in shown.stdout

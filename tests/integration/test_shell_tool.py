"""The shell tool with real processes: allowlist, no shell, process-group kill, scrubbed
environment, closed stdin, output caps. No assertion depends on how fast the machine is; the
only time bounds are generous guards that turn a hang into a failure."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path

import pytest

from fabric.application.context import ToolContext
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import SandboxError, ToolError
from fabric.infrastructure.tools.shell import scrubbed_env, shell

GUARD = 30.0
"""Seconds after which a tool call that should have returned counts as hung."""


def run(coro: Awaitable[str]) -> str:
    async def guarded() -> str:
        return await asyncio.wait_for(coro, GUARD)

    return asyncio.run(guarded())


def py(code: str, *args: str) -> str:
    """A shell-tool command line running ``code`` with python, quoted for shlex."""
    return shlex.join(["python", "-c", code, *args])


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_dead(pid: int) -> bool:
    """SIGKILL is asynchronous: give the kernel a moment to finish the process off."""
    for _ in range(100):
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def leftover_pids() -> Iterator[list[int]]:
    """Processes a test started (indirectly) and must not leave behind, even if it fails."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def read_pid(path: Path) -> int:
    for _ in range(200):
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} was never written")


# --- running programs -----------------------------------------------------------------------


def test_runs_an_allowed_program_in_the_workspace(ctx: ToolContext, workspace: Path) -> None:
    out = run(shell(ctx, py("import os; print(os.getcwd())")))
    assert out == f"[exit code 0]\n{os.path.realpath(workspace)}\n"


def test_reports_a_failing_exit_code_and_stderr(ctx: ToolContext) -> None:
    out = run(shell(ctx, py("import sys; print('out'); sys.stderr.write('err\\n'); sys.exit(3)")))
    assert out.startswith("[exit code 3]\n")
    assert "out\n" in out
    assert "err\n" in out


def test_real_programs_see_real_files(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "hello.py").write_text("print('hello from the workspace')\n")
    assert run(shell(ctx, "python hello.py")) == "[exit code 0]\nhello from the workspace\n"
    assert "hello.py" in run(shell(ctx, "ls"))


# --- the allowlist --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf victim",
        "/bin/rm -rf victim",
        "./python -c 1",
        "../ws/python -c 1",
        f"{os.path.realpath(sys.executable)} -c 1",  # an allowed program, by path
        "sh -c 'rm -rf victim'",
        "env rm -rf victim",
        "PYTHONPATH=. python -c 1",
    ],
)
def test_only_allowlisted_bare_names_run(ctx: ToolContext, workspace: Path, command: str) -> None:
    (workspace / "victim").mkdir()
    (workspace / "victim" / "keep.txt").write_text("still here")
    with pytest.raises(SandboxError) as info:
        run(shell(ctx, command))
    assert "is not allowed" in info.value.message
    assert "python" in info.value.hint  # says what is allowed
    assert (workspace / "victim" / "keep.txt").read_text() == "still here"


def test_no_allowed_commands_names_the_setting(workspace: Path) -> None:
    ctx = ToolContext("t", workspace, SandboxSettings())
    with pytest.raises(SandboxError) as info:
        run(shell(ctx, "ls"))
    assert "sandbox.allowed_commands" in str(info.value)


def test_allowed_but_missing_program(workspace: Path) -> None:
    ctx = ToolContext("t", workspace, SandboxSettings(allowed_commands=["no-such-program-xyz"]))
    with pytest.raises(ToolError, match="not installed"):
        run(shell(ctx, "no-such-program-xyz --help"))


@pytest.mark.parametrize(
    ("command", "problem"),
    [("", "empty"), ("   ", "empty"), ("python -c 'unclosed", "cannot parse"), ("ls \x00", "NUL")],
)
def test_unusable_command_lines(ctx: ToolContext, command: str, problem: str) -> None:
    with pytest.raises(ToolError, match=problem):
        run(shell(ctx, command))


def test_relative_path_entries_cannot_stand_in_for_an_allowed_program(
    ctx: ToolContext, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With '.' on PATH, an executable called 'ls' in the workspace would be run instead of
    the real ls."""
    fake = workspace / "ls"
    fake.write_text("#!/bin/sh\necho HIJACKED\n")
    fake.chmod(0o755)
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("PATH", os.pathsep.join([".", "", os.environ["PATH"]]))
    out = run(shell(ctx, "ls"))
    assert "HIJACKED" not in out
    assert out.startswith("[exit code 0]")
    assert "ls\n" in out  # the real ls lists the fake one


# --- no shell -------------------------------------------------------------------------------

ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


def test_shell_syntax_arrives_verbatim_as_arguments(ctx: ToolContext, workspace: Path) -> None:
    specials = [
        ";",
        "touch pwned1",
        "$(touch pwned2)",
        "`touch pwned3`",
        "|",
        "tee pwned4",
        "&&",
        ">",
        "pwned5",
        "$HOME",
        "*",
        "~",
        "a\nb",
    ]
    (workspace / "existing.txt").write_text("")  # '*' would expand to this in a shell
    out = run(shell(ctx, py(ARGV, *specials)))
    assert out.startswith("[exit code 0]\n")
    assert json.loads(out.split("\n", 1)[1]) == specials
    assert sorted(p.name for p in workspace.iterdir()) == ["existing.txt"]


def test_unquoted_shell_operators_are_just_words(ctx: ToolContext, workspace: Path) -> None:
    out = run(shell(ctx, 'python -c "print(1)" ; touch pwned && touch pwned2 | cat > pwned3'))
    assert out == "[exit code 0]\n1\n"
    assert list(workspace.iterdir()) == []


# --- timeouts and process groups ------------------------------------------------------------

SPAWN_AND_WAIT = """
import subprocess, sys, time
child = subprocess.Popen(["sleep", "300"])
open("grandchild.pid", "w").write(str(child.pid))
print("started", flush=True)
time.sleep(300)
"""


def test_timeout_kills_the_whole_process_group(
    ctx: ToolContext, workspace: Path, leftover_pids: list[int]
) -> None:
    out = run(shell(ctx, py(SPAWN_AND_WAIT), timeout=1))
    grandchild = read_pid(workspace / "grandchild.pid")
    leftover_pids.append(grandchild)
    assert out.startswith("[killed after 1s timeout]\n")
    assert "started" in out  # what it printed before the kill is kept
    assert wait_dead(grandchild), "the grandchild outlived the timeout"


def test_timeout_is_capped_by_the_sandbox_limit(workspace: Path) -> None:
    sandbox = SandboxSettings(allowed_commands=["python"], command_timeout=1)
    ctx = ToolContext("t", workspace, sandbox)
    out = run(shell(ctx, py("import time; time.sleep(300)"), timeout=1000))
    assert out.startswith("[killed after 1s timeout]")


@pytest.mark.parametrize("timeout", [0, -5, float("nan")])
def test_a_timeout_that_would_never_expire_or_is_already_over_is_refused(
    ctx: ToolContext, timeout: float
) -> None:
    with pytest.raises(ToolError, match="timeout"):
        run(shell(ctx, "ls", timeout=timeout))


def test_background_child_holding_the_output_does_not_hang_the_tool(
    ctx: ToolContext, workspace: Path, leftover_pids: list[int]
) -> None:
    code = (
        "import subprocess; p = subprocess.Popen(['sleep', '300']); "
        "open('bg.pid', 'w').write(str(p.pid)); print('parent done')"
    )
    out = run(shell(ctx, py(code)))
    background = read_pid(workspace / "bg.pid")
    leftover_pids.append(background)
    assert out == "[exit code 0]\nparent done\n"
    assert wait_dead(background), "a child left behind by the program kept running"


def test_a_child_in_its_own_session_cannot_make_the_tool_wait(
    ctx: ToolContext, workspace: Path, leftover_pids: list[int]
) -> None:
    """setsid() takes a child out of the process group, so it survives the group kill, but it
    still must not keep the tool from returning (output goes to a file, not a pipe)."""
    code = (
        "import subprocess; p = subprocess.Popen(['sleep', '300'], start_new_session=True); "
        "open('daemon.pid', 'w').write(str(p.pid)); print('parent done')"
    )
    out = run(shell(ctx, py(code)))
    leftover_pids.append(read_pid(workspace / "daemon.pid"))
    assert out == "[exit code 0]\nparent done\n"


def test_cancelling_the_tool_kills_the_process_group(
    ctx: ToolContext, workspace: Path, leftover_pids: list[int]
) -> None:
    pid_file = workspace / "grandchild.pid"

    async def cancel_midway() -> None:
        task = asyncio.create_task(shell(ctx, py(SPAWN_AND_WAIT)))
        while not (pid_file.exists() and pid_file.read_text()):
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(cancel_midway(), GUARD))
    grandchild = read_pid(pid_file)
    leftover_pids.append(grandchild)
    assert wait_dead(grandchild)


# --- environment, stdin, output -------------------------------------------------------------

DUMP_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


def child_env(ctx: ToolContext) -> dict[str, str]:
    out = run(shell(ctx, py(DUMP_ENV)))
    env: dict[str, str] = json.loads(out.split("\n", 1)[1])
    return env


def test_secrets_never_reach_the_child(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "FABRIC_API_KEY": "sk-fabric-123",
        "OPENAI_API_KEY": "sk-openai-456",
        "MY_SECRET_TOKEN": "tok-789",
        "AWS_SECRET_ACCESS_KEY": "aws-000",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PLAIN_SETTING", "visible-only-if-passed")
    env = child_env(ctx)
    assert not set(secrets) & set(env)
    assert not set(secrets.values()) & set(env.values())
    assert "PLAIN_SETTING" not in env  # only a short allowlist by default
    assert env["PATH"]


def test_env_passthrough_passes_ordinary_names_only(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLAIN_SETTING", "yes")
    monkeypatch.setenv("MY_SECRET_TOKEN", "tok-789")
    sandbox = SandboxSettings(allowed_commands=["python"], env_passthrough=["PLAIN_SETTING"])
    assert child_env(ToolContext("t", workspace, sandbox))["PLAIN_SETTING"] == "yes"
    # config refuses a secret-looking name; the tool drops one even if it got past that
    with pytest.raises(ValueError, match="MY_SECRET_TOKEN"):
        SandboxSettings(env_passthrough=["MY_SECRET_TOKEN"])
    unchecked = SandboxSettings.model_construct(
        allowed_commands=["python"], env_passthrough=["MY_SECRET_TOKEN", "PLAIN_SETTING"]
    )
    env = scrubbed_env(unchecked)
    assert "MY_SECRET_TOKEN" not in env
    assert env["PLAIN_SETTING"] == "yes"


def test_stdin_is_closed(ctx: ToolContext) -> None:
    """A program waiting for input gets end-of-file at once instead of hanging the run."""
    out = run(shell(ctx, py("import sys; data = sys.stdin.read(); print(repr(data))")))
    assert out == "[exit code 0]\n''\n"


def test_long_output_is_cut_with_a_note(ctx: ToolContext) -> None:
    out = run(shell(ctx, py("import sys; sys.stdout.write('x' * 3_000_000)")))
    assert out.startswith("[exit code 0]\n")
    assert "[... output cut at 1000000 of 3000000 bytes ...]" in out
    assert len(out) < 1_100_000


def test_endless_output_is_stopped_before_it_fills_the_disk(ctx: ToolContext) -> None:
    code = "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)"
    out = run(shell(ctx, py(code)))
    assert out.startswith("[killed: output passed 32 MB]\n")
    assert "output cut at 1000000" in out


def test_undecodable_output_is_replaced_not_fatal(ctx: ToolContext) -> None:
    out = run(shell(ctx, py("import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe done')")))
    assert out == "[exit code 0]\nok \ufffd\ufffd done"

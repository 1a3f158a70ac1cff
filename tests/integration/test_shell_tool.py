"""The shell tool with real processes: allowlist, no shell, everything killed on timeout, exit
and cancellation (under every backend), scrubbed environment, closed stdin, output caps. No
assertion depends on how fast the machine is; the only time bounds are generous guards that
turn a hang into a failure. Processes are judged from the host's /proc, found by a word in
their command line, never by a pid the confined program printed."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from sandbox.host import all_backends, kill_token, new_token, wait_gone

from fabric.application.context import ToolContext
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import SandboxError, ToolError
from fabric.infrastructure.sandbox import command_runner
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


BACKENDS = all_backends()
"""Every backend this machine offers (bwrap, landlock) and none: the process handling is the
same launcher under each."""


def backend_ctx(workspace: Path, backend: str = "auto", **settings: Any) -> ToolContext:
    """A tool context whose commands run under ``backend``."""
    settings.setdefault("allowed_commands", ["python", "sleep"])
    sandbox = SandboxSettings(confinement=backend, **settings)  # type: ignore[arg-type]
    return ToolContext("t", workspace, sandbox, commands=command_runner(sandbox, workspace))


@pytest.fixture
def token() -> Iterator[str]:
    """A word in the command line of every process a test starts, so the host can find them
    in its own /proc (a pid printed inside bubblewrap's pid namespace means nothing out
    here); whatever a failing test leaves behind is killed by it."""
    word = new_token()
    yield word
    kill_token(word)


def assert_nothing_left(workspace: Path, token: str) -> None:
    """No process holding ``token`` runs on the host, and the heartbeat file the children left
    behind kept writing has stopped growing."""
    left = wait_gone(token)
    assert not left, f"processes outlived the command: {left}"
    heartbeat = workspace / "heartbeat"
    assert heartbeat.exists(), "the child never started, so the test proves nothing"
    size = heartbeat.stat().st_size
    time.sleep(0.3)
    assert heartbeat.stat().st_size == size, "something still writes the heartbeat"


def spawner(token: str, *, then: str = "time.sleep(300)") -> str:
    """A command line: python starts two children that append to ``heartbeat`` in the
    workspace every 50 ms, one in its process group and one in a session of its own (setsid
    takes it out of the group kill), waits for the first beat, prints 'started' and then
    runs ``then``."""
    beat = "import time\nwhile True:\n    open('heartbeat', 'a').write('.')\n    time.sleep(0.05)"
    code = (
        "import os, subprocess, sys, time\n"
        "for alone in (False, True):\n"
        f"    subprocess.Popen([sys.executable, '-c', {beat!r}, sys.argv[1]], "
        "start_new_session=alone)\n"
        "while not os.path.exists('heartbeat'):\n    time.sleep(0.01)\n"
        f"print('started', flush=True)\n{then}\n"
    )
    return py(code, token)


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
    ctx = backend_ctx(workspace, allowed_commands=["no-such-program-xyz"])
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


@pytest.mark.parametrize("backend", BACKENDS)
def test_timeout_kills_everything_the_command_started(
    workspace: Path, token: str, backend: str
) -> None:
    """Both the child in the process group and the one in its own session die: the launcher
    is a child subreaper (or bubblewrap's pid namespace ends), and the cgroup is killed."""
    ctx = backend_ctx(workspace, backend, command_timeout=20)
    out = run(shell(ctx, spawner(token), timeout=3))
    assert out.startswith("[killed after 3s timeout]\n")
    assert "started" in out  # what it printed before the kill is kept
    assert_nothing_left(workspace, token)


def test_timeout_is_capped_by_the_sandbox_limit(workspace: Path) -> None:
    ctx = backend_ctx(workspace, allowed_commands=["python"], command_timeout=1)
    out = run(shell(ctx, py("import time; time.sleep(300)"), timeout=1000))
    assert out.startswith("[killed after 1s timeout]")


@pytest.mark.parametrize("timeout", [0, -5, float("nan")])
def test_a_timeout_that_would_never_expire_or_is_already_over_is_refused(
    ctx: ToolContext, timeout: float
) -> None:
    with pytest.raises(ToolError, match="timeout"):
        run(shell(ctx, "ls", timeout=timeout))


@pytest.mark.parametrize("backend", BACKENDS)
def test_children_left_behind_holding_the_output_neither_hang_the_tool_nor_survive(
    workspace: Path, token: str, backend: str
) -> None:
    """The program exits at once, leaving children that hold the output open: the tool still
    returns (output goes to a file, not a pipe), and the children are killed."""
    ctx = backend_ctx(workspace, backend, command_timeout=20)
    out = run(shell(ctx, spawner(token, then="print('parent done')")))
    assert out == "[exit code 0]\nstarted\nparent done\n"
    assert_nothing_left(workspace, token)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancelling_the_tool_kills_everything_it_started(
    workspace: Path, token: str, backend: str
) -> None:
    ctx = backend_ctx(workspace, backend, command_timeout=20)

    async def cancel_midway() -> None:
        task = asyncio.create_task(shell(ctx, spawner(token)))
        while not (workspace / "heartbeat").exists():
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(cancel_midway(), GUARD))
    assert_nothing_left(workspace, token)


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
    ctx = ToolContext("t", workspace, sandbox, commands=command_runner(sandbox, workspace))
    assert child_env(ctx)["PLAIN_SETTING"] == "yes"
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


def test_a_commands_temporary_folder_goes_whatever_it_made_of_it() -> None:
    """A command that locks folders in its private temp folder (unwritable, unreadable) leaves
    nothing behind there: a file kept in /tmp could later be pointed at by a symlink. As root
    permissions do not bind, so the folder is made and removed by an unprivileged child."""
    from fabric.infrastructure.packs.git_files import remove

    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o777)
    temp = base / "fabric-cmd-x"
    pid = os.fork()
    if pid == 0:  # the child: as nobody when the test runs as root
        code = 1
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            (temp / "keep" / "deep").mkdir(parents=True)
            (temp / "keep" / "evil.py").write_text("planted")
            (temp / "keep" / "deep").chmod(0)
            (temp / "keep").chmod(0o555)
            remove(temp)
            code = 0 if not temp.exists() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    shutil.rmtree(base, ignore_errors=True)
    assert os.waitstatus_to_exitcode(status) == 0, "the locked folder outlived the removal"


def test_long_pytest_output_reaches_the_model_trimmed_to_the_failures(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real pytest run through the tool: the model gets the failure and the summary, not a
    line per passing test; other programs' output is left whole (the loop cuts it)."""
    from fabric.infrastructure.tools.shell import TEST_OUTPUT_CHARS

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    (workspace / "test_many.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.parametrize('n', range(120))\n"
        "def test_fine(n):\n    assert n == n\n\n\n"
        "def test_wrong():\n    assert 1 + 1 == 3\n"
    )
    kept: dict[str, str] = {}

    def save(name: str, text: str) -> str:
        kept[f"artifacts/{name}"] = text
        return f"artifacts/{name}"

    ctx = msgspec.structs.replace(
        backend_ctx(workspace, allowed_commands=["python"], command_timeout=60), save_artifact=save
    )
    out = run(shell(ctx, "python -m pytest -v -p no:cacheprovider"))
    assert out.startswith("[exit code 1]\n[pytest output trimmed to the failures and the summary")
    assert ">       assert 1 + 1 == 3" in out and "E       assert (1 + 1) == 3" in out
    assert "FAILED test_many.py::test_wrong - assert (1 + 1) == 3" in out
    assert "1 failed, 120 passed" in out
    assert "test_fine[0] PASSED" not in out
    assert len(out) < TEST_OUTPUT_CHARS
    assert "test_fine[0] PASSED" in "".join(kept.values())  # the whole, beside the runlog
    assert out.endswith(f"the whole is in {next(iter(kept))}]")
    other = run(shell(ctx, py("print('x\\n' * 3000, end='')")))
    assert other == "[exit code 0]\n" + "x\n" * 3000

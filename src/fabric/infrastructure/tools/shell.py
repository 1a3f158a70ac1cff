"""The ``shell`` tool: one allowlisted program, run without a shell.

The command line is split with ``shlex``; its first word must be a bare program name on the
pack's ``allowed_commands``, resolved on the scrubbed ``PATH``. The run's CommandRunner starts
it, confined by the operating system (``fabric.infrastructure.sandbox``), in the workspace,
with stdin closed, a scrubbed environment, resource limits and a timeout. Long pytest output
is cut down to its failures and summary (``fabric.domain.test_output``) before the model sees
it.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path

from fabric.application.context import ToolContext
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import SandboxError, ToolError
from fabric.domain.secrets import looks_secret
from fabric.domain.test_output import runs_pytest, trim_test_output

from .function_tool import repeat_unsafe

TEST_OUTPUT_CHARS = 4_000
"""pytest output longer than this is cut down to its failures and summary for the model."""
_BASE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "HOME", "USER", "LOGNAME")


def scrubbed_env(
    sandbox: SandboxSettings, source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a command gets: a short allowlist, never anything that looks secret.

    Relative ``PATH`` entries (``.``, empty, ``bin``) are dropped: they would let a file in
    the workspace stand in for an allowed program."""
    env_source = os.environ if source is None else source
    names = [*_BASE_ENV, *sandbox.env_passthrough]
    env = {n: env_source[n] for n in names if n in env_source and not looks_secret(n)}
    path = env.get("PATH", os.defpath).split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in path if Path(p).is_absolute()) or os.defpath
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def parse_command(command: str, sandbox: SandboxSettings) -> list[str]:
    """Split ``command`` and check its program against the allowlist."""
    if "\x00" in command:
        raise ToolError("the command contains a NUL byte", hint="send plain text")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ToolError(f"cannot parse the command: {exc}", hint="check the quoting") from None
    if not argv:
        raise ToolError("the command is empty", hint="give a program and its arguments")
    program = argv[0]
    allowed = sandbox.allowed_commands
    if not allowed:
        raise SandboxError(
            "this pack may not run commands (its sandbox allows none)",
            hint="add programs to the pack's sandbox.allowed_commands in fabric.yaml",
        )
    if "/" in program or program not in allowed:
        raise SandboxError(
            f"program {program!r} is not allowed",
            hint=f"allowed programs: {', '.join(allowed)} (by bare name; no shell syntax such "
            "as pipes, ';' or '&&' is interpreted)",
        )
    return argv


@repeat_unsafe  # a command may append, commit, send: run twice, it may do it twice
async def shell(ctx: ToolContext, command: str, timeout: float | None = None) -> str:
    """Run one allowed program in the workspace folder and return its exit code and output.
    There is no shell: pipes, ';', '&&', '>' and 'cd' do not work. Long pytest output is cut
    down to the failures and the summary. Example: shell(command="python -m pytest -q").

    Args:
        command: One program and its arguments.
        timeout: Seconds before the command is stopped (the pack sets the most).
    """
    sandbox = ctx.sandbox
    argv = parse_command(command, sandbox)
    if ctx.commands is None:
        raise SandboxError(
            "this run was started without a command runner, so it cannot run commands",
            hint="start runs through fabric (CLI or HTTP), or pass `commands=` to execute_task",
        )
    env = scrubbed_env(sandbox)
    executable = shutil.which(argv[0], path=env["PATH"])
    if executable is None:
        raise ToolError(
            f"program {argv[0]!r} is allowed but not installed on this machine",
            hint="install it, or use another allowed program",
        )
    if timeout is not None and not timeout > 0:  # also NaN, which would never expire
        raise ToolError("timeout must be more than 0 seconds", hint="leave it out for the default")
    limit = min(timeout or sandbox.command_timeout, sandbox.command_timeout)
    outcome = await ctx.commands.run([executable, *argv[1:]], env=env, timeout=limit)
    output = outcome.output
    if runs_pytest(argv):
        output = trim_test_output(output, TEST_OUTPUT_CHARS)
        if output != outcome.output and ctx.save_artifact is not None:
            kept = ctx.save_artifact("pytest-output.txt", outcome.output)
            output += f"\n[pytest's output was cut to its failures; the whole is in {kept}]"
    if outcome.stopped:
        return f"[{outcome.stopped}]\n{output}"
    return f"[exit code {outcome.exit_code}]\n{output}"

"""The ``shell`` tool: one allowlisted program, run without a shell.

The command line is split with ``shlex``; its first word must be a bare program name on the
pack's ``allowed_commands``. The process starts in its own session (so the whole group can be
killed), in the workspace, with stdin closed and a scrubbed environment. Output goes to
temporary files rather than pipes, so a child that outlives a kill cannot keep fabric waiting;
a command that floods its output is stopped before it fills the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from fabric.application.context import ToolContext
from fabric.config.schema import SECRET_NAME, SandboxSettings
from fabric.domain.errors import SandboxError, ToolError

_OUTPUT_BYTES = 1_000_000
_OUTPUT_KILL_BYTES = 32_000_000
"""A command whose output passes this size is killed (the model sees the first MB anyway)."""
_BASE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "HOME", "USER", "LOGNAME")
_KILL_GRACE = 2.0
_POLL = 0.2


def scrubbed_env(
    sandbox: SandboxSettings, source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a command gets: a short allowlist, never anything that looks secret.

    Relative ``PATH`` entries (``.``, empty, ``bin``) are dropped: they would let a file in
    the workspace stand in for an allowed program."""
    env_source = os.environ if source is None else source
    names = [*_BASE_ENV, *sandbox.env_passthrough]
    env = {n: env_source[n] for n in names if n in env_source and not SECRET_NAME.search(n)}
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


async def shell(ctx: ToolContext, command: str, timeout: float | None = None) -> str:
    """Run one allowed program in the workspace (no shell: pipes, ';', '&&' and redirections are
    not interpreted). Returns the exit code and the combined output.

    Args:
        command: The program and its arguments, e.g. 'python -m pytest -q'.
        timeout: Seconds before the command is killed (capped by the pack's limit).
    """
    sandbox = ctx.sandbox
    argv = parse_command(command, sandbox)
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
    with tempfile.TemporaryFile() as out:
        try:
            proc = await asyncio.create_subprocess_exec(
                executable,
                *argv[1:],
                cwd=ctx.workspace,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            raise ToolError(f"cannot start {argv[0]!r}: {exc}") from None
        try:
            stopped = await _wait(proc, out, limit)
        finally:  # also when cancelled: leave nothing running behind us
            await _kill_group(proc)  # and children left behind by a program that exited
        text = _read_capped(out)
    if stopped:
        return f"[{stopped}]\n{text}"
    return f"[exit code {proc.returncode}]\n{text}"


async def _wait(proc: asyncio.subprocess.Process, out: IO[bytes], limit: float) -> str | None:
    """Wait for ``proc`` to exit; if it runs past ``limit`` seconds or floods its output,
    return why it must be stopped."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    waiter = asyncio.ensure_future(proc.wait())
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return f"killed after {limit:g}s timeout"
            done, _ = await asyncio.wait({waiter}, timeout=min(remaining, _POLL))
            if done:
                return None
            if os.fstat(out.fileno()).st_size > _OUTPUT_KILL_BYTES:
                return f"killed: output passed {_OUTPUT_KILL_BYTES // 1_000_000} MB"
    finally:
        waiter.cancel()


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), _KILL_GRACE)


def _read_capped(out: IO[bytes]) -> str:
    size = out.seek(0, os.SEEK_END)
    out.seek(0)
    data = out.read(_OUTPUT_BYTES)
    text = data.decode("utf-8", errors="replace")
    if size > _OUTPUT_BYTES:
        text += f"\n[... output cut at {_OUTPUT_BYTES} of {size} bytes ...]"
    return text

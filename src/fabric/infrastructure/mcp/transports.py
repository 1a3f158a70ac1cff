"""How fabric reaches one MCP server: a program started confined like the pack's ``shell``
commands (same backend, limits, hidden places; the network only when the server's settings
allow it; an environment of the base set plus the names the server was given), or a
streamable HTTP endpoint with headers taken from the environment."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from msgspec import Struct

from fabric.config.schema import McpServerSettings, SandboxSettings
from fabric.domain.errors import McpError, SandboxError
from fabric.infrastructure.packs import git_files
from fabric.infrastructure.sandbox import backend_for, cgroup
from fabric.infrastructure.sandbox.profile import hidden_paths
from fabric.infrastructure.sandbox.runner import launch_argv
from fabric.infrastructure.tools.shell import scrubbed_env

_MiB = 1024 * 1024


class Place(Struct, frozen=True):
    """Where a run's servers start: its workspace, the places hidden from them, the host
    code they may only read, and the config's folder (for relative ``cwd``)."""

    workspace: Path
    sandbox: SandboxSettings
    base_dir: Path
    protected: tuple[Path, ...] = ()
    read_only: tuple[Path, ...] = ()


def server_env(settings: McpServerSettings, sandbox: SandboxSettings) -> dict[str, str]:
    """The base environment shell commands get, plus the variables the server was given."""
    env = scrubbed_env(sandbox)
    env.update({n: os.environ[n] for n in settings.env if n in os.environ})
    return env


def _executable(name: str, settings: McpServerSettings, env: Mapping[str, str]) -> str:
    command = settings.command or ""
    found = command if Path(command).is_absolute() else shutil.which(command, path=env["PATH"])
    if not found or not os.access(found, os.X_OK):
        raise McpError(
            f"MCP server {name!r}: program {command!r} is not installed or not executable",
            hint=f"install it, or fix mcp_servers.{name}.command in fabric.yaml (a bare name "
            "is looked up on PATH, else give an absolute path)",
        )
    return found


@contextlib.asynccontextmanager
async def stdio_transport(
    name: str, settings: McpServerSettings, place: Place, errlog: TextIO
) -> AsyncIterator[Any]:
    """The server's stdin and stdout as the SDK's streams, its process confined."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    sandbox = place.sandbox.model_copy(update={"network": settings.network})
    try:
        backend = backend_for(sandbox)
    except SandboxError as exc:
        message = f"MCP server {name!r} cannot be confined: {exc.message}"
        raise McpError(message, hint=exc.hint) from None
    env = server_env(settings, sandbox)
    program = _executable(name, settings, env)
    cwd = place.workspace
    if settings.cwd:
        cwd = (place.base_dir / Path(settings.cwd).expanduser()).resolve()
        if not cwd.is_dir():
            raise McpError(
                f"MCP server {name!r}: its folder {cwd} does not exist",
                hint=f"fix mcp_servers.{name}.cwd in fabric.yaml",
            )
    res = sandbox.resources
    group = cgroup.create(res.processes, res.memory_mb * _MiB)
    temp = Path(tempfile.mkdtemp(prefix="fabric-mcp-"))
    try:
        argv = launch_argv(
            backend,
            sandbox,
            workspace=place.workspace.resolve(),
            hidden=hidden_paths(place.protected),
            temp=temp,
            command=[program, *settings.args],
            cgroups=group.procs_files if group else [],
            search_path=os.pathsep.join([env["PATH"], str(cwd), *_script_folders(settings)]),
            read_only=[p for p in place.read_only if os.path.lexists(p)],
            chdir=cwd,
        )
        if backend.name != "bwrap":
            env["TMPDIR"] = str(temp)
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=cwd)
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams
    finally:
        if group is not None:
            group.kill_all()
            group.remove()
        git_files.remove(temp)


def _script_folders(settings: McpServerSettings) -> list[str]:
    """The folders of the server's arguments that name existing files by absolute path (its
    script, say): kept visible, read-only, where the sandbox gives a folder a private copy
    (a server script under /tmp would otherwise not be there for the server)."""
    return [
        str(Path(arg).parent)
        for arg in settings.args
        if Path(arg).is_absolute() and Path(arg).is_file()
    ]


@contextlib.asynccontextmanager
async def http_transport(name: str, settings: McpServerSettings) -> AsyncIterator[Any]:
    """A streamable HTTP connection with the configured headers, read from the environment."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers: dict[str, str] = {}
    for header, variable in settings.headers.items():
        value = os.environ.get(variable)
        if value is None:
            raise McpError(
                f"MCP server {name!r}: header {header} is to come from ${variable}, which is "
                "not set",
                hint=f"set {variable} in fabric's environment, or drop the header from "
                f"mcp_servers.{name}.headers",
            )
        headers[header] = value
    assert settings.url is not None
    async with (
        create_mcp_http_client(headers=headers) as client,
        streamable_http_client(settings.url, http_client=client) as streams,
    ):
        yield streams

"""fabric's MCP server: the SDK's low-level ``Server`` with a tool per pack and the runs as
resources, over stdio (``serve_stdio``) or streamable HTTP (``http_app``, mounted at ``/mcp``
by ``fabric serve``, behind the API's guards)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from msgspec.structs import replace

from fabric.application.job import Control, RunRequest
from fabric.config.loader import LoadedConfig
from fabric.domain.errors import ConfigError, FabricError
from fabric.domain.models import RunResult
from fabric.infrastructure.mcp.connection import quiet_sdk_logs
from fabric.infrastructure.runlog.index import RunIndex
from fabric.interfaces.runner import Runner

from .calls import Calls, LiveCall, follow
from .resources import RunResources
from .tools import error_result, pack_tool, parse_call, run_result

log = logging.getLogger("fabric.mcp.server")
Asgi = Callable[[Any, Any, Any], Awaitable[None]]
FORGET_AFTER = 600.0
"""Seconds a finished run waits for a client that was asked a question to come back."""


def workspace_roots(loaded: LoadedConfig) -> list[Path]:
    """The folders a call's workspace must lie under: ``serve.workspace_roots``."""
    roots = loaded.config.serve.workspace_roots
    return [(loaded.base_dir / Path(r).expanduser()).resolve() for r in roots]


def build_server(runner: Runner, roots: Sequence[Path]) -> Server[Any]:
    """The MCP server over ``runner``: a tool per pack, the runs as resources."""
    quiet_sdk_logs()
    settings = runner.loaded.config.serve
    max_chars = settings.max_task_chars
    calls = Calls(settings.concurrency)
    resources = RunResources(RunIndex(runner.runs_dir), runner.secrets)

    def tools() -> dict[str, types.Tool]:
        found = {}
        for name in runner.loaded.config.packs:
            try:
                tool = pack_tool(runner, name, max_chars)
            except FabricError as exc:  # a broken pack: the others are still offered
                log.warning("mcp.pack_left_out pack=%s why=%s", name, exc.message)
                continue
            if tool is not None:
                found[name] = tool
        return found

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(tools().values()))

    async def call_tool(ctx: Any, params: Any) -> Any:
        if params.request_state is not None:  # a client's answer to a question (2026-07-28)
            call = calls.take(params.request_state)
            if call is None:
                return error_result(_gone())
            return await follow(calls, call, ctx, params.input_responses, finish)
        try:
            request = await _admit(runner, roots, params.name, params.arguments, calls)
        except FabricError as exc:
            return error_result(exc)
        limits = runner.pack(request.pack).settings.limits
        call = LiveCall(max_steps=request.max_steps or limits.max_steps)
        calls.add(call)
        call.task = asyncio.create_task(_run(runner, request, call, calls))
        return await follow(calls, call, ctx, None, finish)

    def finish(outcome: RunResult | FabricError, notes: list[str]) -> types.CallToolResult:
        if isinstance(outcome, FabricError):
            return error_result(outcome)
        return run_result(outcome, notes, runner.secrets)

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=await resources.listing())

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=resources.templates())

    async def read_resource(ctx: Any, params: Any) -> types.ReadResourceResult:
        return await resources.read(str(params.uri))

    return Server(
        "fabric",
        version=_version(),
        instructions="Each tool runs one of fabric's packs on a task and returns its final "
        "answer; runs and their runlogs are resources under fabric://runs.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


async def _admit(
    runner: Runner, roots: Sequence[Path], name: str, arguments: Any, calls: Calls
) -> RunRequest:
    """The run a call asks for, checked as ``POST /tasks`` checks a task (under the workspace
    roots, as a remote caller), or a FabricError saying what is wrong."""
    if name not in runner.loaded.config.packs:
        raise ConfigError(
            f"there is no tool {str(name)[:100]!r}",
            hint="list the tools (each is a pack of fabric.yaml) and call one of them",
        )
    call = parse_call(arguments, runner.loaded.config.serve.max_task_chars)
    if calls.busy():
        raise ConfigError(
            f"{calls.limit} runs are going on already, the most this server runs at once",
            hint="call again when one has ended, or raise serve.concurrency in fabric.yaml",
        )
    workspace = roots[0] / call.workspace if call.workspace else roots[0]
    request = RunRequest(name, call.task, workspace=workspace, max_steps=call.max_steps)
    folder = await runner.admit(request, roots=roots, remote=True)
    return replace(request, workspace=folder)


async def _run(runner: Runner, request: RunRequest, call: LiveCall, calls: Calls) -> None:
    """The run of one call; its end goes to whoever follows it."""
    outcome: RunResult | FabricError
    try:
        control = Control(cancel=call.cancel, approver=call, observers=(call,))
        outcome = await runner.run(request, control)
    except FabricError as exc:
        outcome = exc
    except Exception as exc:  # never lost silently: the client is told, the log has it
        log.exception("mcp.run_crashed")
        outcome = FabricError(f"the run failed: {type(exc).__name__}", hint="see fabric's log")
    call.finished(outcome)
    asyncio.get_running_loop().call_later(FORGET_AFTER, calls.drop, call)


def _gone() -> FabricError:
    return ConfigError(
        "this answer is for a run that is not waiting for one any more (it ended, or no "
        "answer came in time and the call was refused)",
        hint="call the tool again to start a new run",
    )


async def serve_stdio(runner: Runner, roots: Sequence[Path]) -> None:
    """Serve MCP on stdin and stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = build_server(runner, roots)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_app(runner: Runner, roots: Sequence[Path]) -> tuple[Asgi, Any]:
    """The streamable-HTTP endpoint as an ASGI app, and the context manager that runs its
    sessions (entered for as long as the service runs)."""
    from mcp.server.streamable_http_manager import (
        StreamableHTTPASGIApp,
        StreamableHTTPSessionManager,
    )

    manager = StreamableHTTPSessionManager(app=build_server(runner, roots))

    @asynccontextmanager
    async def running() -> AsyncIterator[None]:
        async with manager.run():
            yield

    return StreamableHTTPASGIApp(manager), running


def _version() -> str:
    import fabric

    return fabric.__version__

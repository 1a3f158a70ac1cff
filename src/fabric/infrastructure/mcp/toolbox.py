"""The MCP tools of one run: the pack's servers started, their tools filtered by the pack's
include/exclude globs, named ``server__tool`` and offered as ordinary ``Tool``s (so the policy,
the time limit, the output cap and the runlog treat them like any other); the servers stopped
when the run ends. What each name stands for goes into ``run_started`` (``mcp``)."""

from __future__ import annotations

import asyncio
import fnmatch
import json
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from fabric.application.context import ToolContext
from fabric.application.pack import FINISH_TOOL, finish_schema_problem
from fabric.application.ports import Tool, ToolChange, tool_diff
from fabric.config.schema import McpServerSettings, McpUse
from fabric.domain.errors import McpError, ToolError
from fabric.domain.models import ToolSpec

from .connection import McpConnection, Note
from .names import fabric_name, printable
from .results import render
from .transports import Place

MAX_DESCRIPTION = 2_000
MAX_SCHEMA_CHARS = 32_000


class McpTool:
    """One tool of an MCP server, as the loop calls it."""

    def __init__(self, spec: ToolSpec, server: McpConnection, tool: str) -> None:
        self._spec, self.server, self.tool = spec, server, tool
        self._calls = 0

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        self._calls += 1
        call = self.server.call(self.tool, arguments)
        result = await _unless_cancelled(call, ctx, self._spec.name)
        text = render(result, stem=f"{self._spec.name}-{self._calls}", save=ctx.save_artifact)
        if result.get("isError"):
            raise ToolError(
                f"{self._spec.name} failed: {text}",
                hint="read the server's message; fix the arguments or use another tool",
            )
        return text


async def _unless_cancelled(
    call: Coroutine[Any, Any, dict[str, Any]], ctx: ToolContext, name: str
) -> dict[str, Any]:
    """The call's result; when the run is cancelled first, the call is cancelled (the SDK tells
    the server) and fails, so the run ends now rather than at the call's timeout."""
    if ctx.cancel is None:
        return await call
    calling = asyncio.ensure_future(call)
    stopping = asyncio.ensure_future(ctx.cancel.wait())
    try:
        await asyncio.wait({calling, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not calling.done():
            calling.cancel()
            await asyncio.wait({calling})
    if calling.cancelled():
        raise ToolError(
            f"the run was cancelled during this {name} call; the call was cancelled",
            hint="nothing to do: the run is ending",
        )
    return calling.result()


def spec_of(name: str, listed: Mapping[str, Any]) -> ToolSpec | str:
    """The spec the model gets for a listed tool, or why the tool is left out."""
    schema = listed.get("inputSchema")
    if not isinstance(schema, dict):
        return "its input schema is not a JSON object"
    if len(json.dumps(schema, default=str)) > MAX_SCHEMA_CHARS:
        return f"its input schema is longer than {MAX_SCHEMA_CHARS} characters"
    problem = finish_schema_problem(schema)
    if problem is not None:
        return f"its input schema is {problem}"
    text = str(listed.get("description") or listed.get("title") or listed.get("name") or "")
    text = "".join(c for c in text[:MAX_DESCRIPTION] if c.isprintable() or c in "\n\t")
    # the server's word that a call may run twice: it only reads, or repeating it is a no-op
    hints = listed.get("annotations")
    hints = hints if isinstance(hints, Mapping) else {}
    safe = hints.get("readOnlyHint") is True or hints.get("idempotentHint") is True
    return ToolSpec(name, text or name, schema, safe)


def wanted(tool: str, use: McpUse) -> bool:
    def hit(globs: Sequence[str]) -> bool:
        return any(fnmatch.fnmatchcase(tool, g) for g in globs)

    return hit(use.include) and not hit(use.exclude)


class McpToolbox:
    """The MCP servers of one run and the tools the pack takes from them."""

    def __init__(
        self,
        servers: Mapping[str, McpServerSettings],
        uses: Sequence[McpUse],
        place: Place,
        *,
        base: Sequence[Tool] = (),
        note: Note | None = None,
    ) -> None:
        self._uses = list(uses)
        self.connections = {
            u.server: McpConnection(u.server, servers[u.server], place, note) for u in uses
        }
        self._base = tuple(base)
        """The pack's own tools: their names are taken, and they come first in a new set."""
        self._taken = {t.spec.name for t in base} | {FINISH_TOOL}
        self.tools: list[McpTool] = []
        self.left_out: list[dict[str, str]] = []

    async def open(self) -> list[McpTool]:
        """Start every server (at once) and gather their tools; McpError naming the first
        server that did not start (the others are stopped again)."""
        outcomes = await asyncio.gather(
            *(c.start() for c in self.connections.values()), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                await self.aclose()
                if isinstance(outcome, McpError):
                    raise outcome
                raise McpError(f"an MCP server did not start: {outcome}") from outcome
        self.tools, self.left_out = self._take()
        return self.tools

    def _take(self) -> tuple[list[McpTool], list[dict[str, str]]]:
        """The tools the pack takes from its servers' lists as they are now, and those left
        out and why; a tool listed as before is the same ``McpTool`` as before."""
        before = {(t.server.name, t.tool): t for t in self.tools}
        taken, tools, left_out = set(self._taken), [], []
        for use in self._uses:
            server = self.connections[use.server]
            for listed in server.tools:
                raw = str(listed.get("name", ""))
                if not raw or not wanted(raw, use):
                    continue
                name = fabric_name(use.server, raw)
                spec = spec_of(name, listed)
                if isinstance(spec, str) or name in taken:
                    why = spec if isinstance(spec, str) else f"the name {name} is taken"
                    left_out.append({"server": use.server, "tool": printable(raw), "why": why})
                    continue
                taken.add(name)
                same = before.get((use.server, raw))
                tools.append(same if same and same.spec == spec else McpTool(spec, server, raw))
        return tools, left_out

    async def changed(self, step: int) -> ToolChange | None:
        """Before model call ``step``: when a server said its tools changed, its list is
        fetched again and, if what the pack takes of it differs, the new set is offered
        (the pack's own tools first, as at the start). A server that does not list again
        keeps its old list (its calls then fail with the reason)."""
        stale = [c for c in self.connections.values() if c.stale]
        if not stale:
            return None
        problems: list[str] = []
        for connection in stale:
            try:
                await connection.refresh()
            except McpError as exc:
                problems.append(exc.message)
        tools, left_out = self._take()
        if [t.spec for t in tools] == [t.spec for t in self.tools]:
            return None
        diff = tool_diff(self.tools, tools)
        new = {t.spec.name: t for t in tools}
        note: dict[str, Any] = {
            "servers": [c.name for c in stale],
            **diff,
            "added": [_entry(new[n]) for n in diff["added"]],
        }
        if problems:
            note["problems"] = problems
        new_left = [x for x in left_out if x not in self.left_out]
        if new_left:
            note["left_out"] = new_left
        self.tools, self.left_out = tools, left_out
        return ToolChange((*self._base, *tools), note)

    def meta(self) -> dict[str, Any]:
        """For ``run_started``: each server, and what each tool name stands for."""
        servers: dict[str, dict[str, Any]] = {}
        for name, c in self.connections.items():
            where = c.settings.url or " ".join([c.settings.command or "", *c.settings.args])
            servers[name] = {
                "transport": c.settings.transport,
                "target": where,
                "protocol": c.protocol,
                "start_ms": c.started_ms,
                "network": c.settings.network if c.settings.transport == "stdio" else True,
            }
            if c.problems:
                servers[name]["problems"] = list(c.problems)
        meta: dict[str, Any] = {
            "servers": servers,
            "tools": [_entry(t) for t in self.tools],
        }
        if self.left_out:
            meta["left_out"] = self.left_out
        return meta

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.connections.values()))


def _entry(tool: McpTool) -> dict[str, str]:
    """What a tool name stands for, for the runlog."""
    return {"name": tool.spec.name, "server": tool.server.name, "tool": tool.tool}

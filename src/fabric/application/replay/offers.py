"""Which tools a replayed or resumed run offers at each step: the pack's own tools as they
are now, then the MCP tools the recorded run was offered at that point (ADR 0019), with the
specs the model saw then. An MCP server's list can change during a run; the recording says
where (``llm_request.tools_changed``), and the replay changes the set at the same step, so
it needs none of the servers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fabric.application.context import ToolContext
from fabric.application.pack import FINISH_TOOL
from fabric.application.ports import Tool, ToolChange
from fabric.domain.errors import ToolError
from fabric.domain.models import ToolSpec

from .recording import Recording


class UnavailableTool:
    """A tool offered with a recorded spec that cannot run here: called, it fails with
    ``message`` and ``hint`` (a replay answers its calls from the runlog before that)."""

    def __init__(self, spec: ToolSpec, message: str, hint: str) -> None:
        self._spec, self._message, self._hint = spec, message, hint

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        raise ToolError(self._message, hint=self._hint)


def not_started(spec: ToolSpec) -> UnavailableTool:
    """An MCP tool of the recorded run, for a replay that starts no server."""
    return UnavailableTool(
        spec,
        f"{spec.name} is an MCP tool, and this replay starts no MCP server",
        "replay with --live-tools to start the pack's servers",
    )


class _Respecced:
    """A tool offered with the spec the recorded run had for it at that step (an MCP
    server changed a tool's description or schema during the run)."""

    def __init__(self, tool: Tool, spec: ToolSpec) -> None:
        self._tool, self._spec = tool, spec

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        return await self._tool(arguments, ctx)


def specs_of(definitions: Sequence[Any]) -> dict[str, ToolSpec]:
    """The specs in a list of tool definitions as sent (OpenAI form), by name, in order."""
    specs: dict[str, ToolSpec] = {}
    for definition in definitions:
        function = definition.get("function") if isinstance(definition, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        name, parameters = str(function.get("name")), function.get("parameters")
        specs[name] = ToolSpec(
            name,
            str(function.get("description", "")),
            dict(parameters) if isinstance(parameters, Mapping) else {},
        )
    return specs


def recorded_mcp(recording: Recording, own: Sequence[str]) -> list[Tool]:
    """A ``not_started`` tool for every MCP tool the recorded run was offered (not a name of
    the pack's own), with the spec it was first offered with."""
    specs: dict[str, ToolSpec] = {}
    for step in recording.steps:
        for name, spec in specs_of(step.tools or ()).items():
            specs.setdefault(name, spec)
    return [
        not_started(specs[name])
        for name in recording.mcp_names()
        if name in specs and name not in own
    ]


class RecordedOffers:
    """The tools offered as the recorded run offered them: ``first`` for its first step,
    then (as ``ToolUpdates``) a new set where its tools changed, up to step ``upto``."""

    def __init__(
        self,
        recording: Recording,
        own: Sequence[Tool],
        mcp: Mapping[str, Tool],
        upto: int | None = None,
    ) -> None:
        self._recording, self._own, self._mcp, self._upto = recording, tuple(own), mcp, upto

    def first(self) -> list[Tool]:
        return self.offered(self._recording.tools)

    def offered(self, definitions: Sequence[Any]) -> list[Tool]:
        """The pack's own tools, then the MCP tools among ``definitions`` in their order."""
        tools = list(self._own)
        for name, spec in specs_of(definitions).items():
            tool = self._mcp.get(name)
            if tool is None or name == FINISH_TOOL:
                continue
            tools.append(tool if tool.spec == spec else _Respecced(tool, spec))
        return tools

    async def changed(self, step: int) -> ToolChange | None:
        if self._upto is not None and step > self._upto:
            return None
        recorded = self._recording.step(step)
        if recorded is None or recorded.tools_changed is None or recorded.tools is None:
            return None
        return ToolChange(tuple(self.offered(recorded.tools)), recorded.tools_changed)


__all__ = ["RecordedOffers", "UnavailableTool", "not_started", "recorded_mcp", "specs_of"]

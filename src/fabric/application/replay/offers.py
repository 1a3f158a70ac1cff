"""Which tools a replayed or resumed run offers at each step: the pack's own tools as they
are now, then the MCP tools the recorded run was offered at that point (ADR 0019), with the
specs the model saw then. An MCP server's list can change during a run; the recording says
where (``llm_request.tools_changed``), and the replay changes the set at the same step, so
it needs none of the servers.

A run that searched its tools (ADR 0028) was offered only some of them; its whole set is in
``run_started.tool_search.catalog`` and, after each change, the definitions of the tools that
came or changed in ``tools_changed.definitions``. The replay has the loop search that set as
the run did, which offers what the run offered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import Struct, field

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


class SearchedSets(Struct):
    """The whole sets of tools of a run that searched them (ADR 0028): at its start, and
    after each change (by the step whose request offered it), every spec by name."""

    first: dict[str, ToolSpec]
    at: dict[int, dict[str, ToolSpec]] = field(default_factory=dict)

    @classmethod
    def of(cls, recording: Recording) -> SearchedSets | None:
        """The sets of the recorded run (None: it offered every tool)."""
        searched = recording.started.get("tool_search")
        if not isinstance(searched, Mapping):
            return None
        specs = specs_of(searched.get("catalog") or ())
        sets = cls(specs)
        for step in recording.steps:
            note = step.tools_changed
            if note is None:
                continue
            removed = {str(n) for n in note.get("removed") or ()}
            specs = {n: spec for n, spec in specs.items() if n not in removed}
            specs.update(specs_of(note.get("definitions") or ()))
            sets.at[step.number] = specs
        return sets

    def specs(self) -> list[tuple[str, ToolSpec]]:
        """Every spec of every set, the first set's first."""
        return [*self.first.items(), *(i for s in self.at.values() for i in s.items())]


def recorded_mcp(recording: Recording, own: Sequence[str]) -> list[Tool]:
    """A ``not_started`` tool for every MCP tool the recorded run had (not a name of the
    pack's own), with the spec it first had: in its catalog when the run searched its tools,
    else when it was first offered."""
    specs: dict[str, ToolSpec] = {}
    searched = SearchedSets.of(recording)
    for name, spec in searched.specs() if searched is not None else ():
        specs.setdefault(name, spec)
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
        self.searched = SearchedSets.of(recording)
        """The whole sets of a run that searched its tools (None: it offered them all)."""

    def first(self) -> list[Tool]:
        if self.searched is not None:
            return self._with(self.searched.first)
        return self.offered(self._recording.tools)

    def offered(self, definitions: Sequence[Any]) -> list[Tool]:
        """The pack's own tools, then the MCP tools among ``definitions`` in their order."""
        return self._with(specs_of(definitions))

    def _with(self, specs: Mapping[str, ToolSpec]) -> list[Tool]:
        """The pack's own tools, then the MCP tools named in ``specs`` with those specs."""
        tools = list(self._own)
        own = {t.spec.name for t in self._own}
        for name, spec in specs.items():
            tool = self._mcp.get(name)
            if tool is None or name == FINISH_TOOL or name in own:
                continue
            tools.append(tool if tool.spec == spec else _Respecced(tool, spec))
        return tools

    async def changed(self, step: int) -> ToolChange | None:
        if self._upto is not None and step > self._upto:
            return None
        recorded = self._recording.step(step)
        if recorded is None or recorded.tools_changed is None or recorded.tools is None:
            return None
        if self.searched is not None:  # the whole set, which the loop searches again
            tools = self._with(self.searched.at.get(step, self.searched.first))
            return ToolChange(tuple(tools), recorded.tools_changed)
        return ToolChange(tuple(self.offered(recorded.tools)), recorded.tools_changed)


__all__ = [
    "RecordedOffers",
    "SearchedSets",
    "UnavailableTool",
    "not_started",
    "recorded_mcp",
    "specs_of",
]

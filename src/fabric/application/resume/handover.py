"""The hand-over from log to live: stand-ins for the model, the pack's tools, the tools
offered and the after-call hooks that answer from the log for the steps a resumed run
re-drives (checked like a replay) and pass to the live ones from the first new step on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabric.application.context import ToolContext
from fabric.application.pack import AfterCall, Appended
from fabric.application.ports import ChatClient, Tool, ToolChange, ToolUpdates, tool_diff
from fabric.application.replay.divergence import Diverged, ReplayState
from fabric.application.replay.offers import RecordedOffers, recorded_mcp
from fabric.application.replay.recording import Recording
from fabric.application.replay.replies import ReplayChatClient
from fabric.application.replay.tools import recorded_tools
from fabric.domain.models import ChatRequest, ChatResponse, ToolSpec


class ResumingChat:
    """Recorded replies (checked like a replay) for the first ``completed`` calls, then the
    live client."""

    def __init__(
        self, recorded: ReplayChatClient, live: ChatClient, completed: int, state: ReplayState
    ) -> None:
        self._recorded, self._live, self._completed, self._state = (
            recorded,
            live,
            completed,
            state,
        )
        self._calls = 0

    @property
    def model(self) -> str:
        return self._live.model

    async def chat(self, request: ChatRequest) -> ChatResponse:
        if self._state.divergence is not None:
            raise Diverged(self._state.divergence)
        self._calls += 1
        if self._calls <= self._completed:
            return await self._recorded.chat(request)
        self._state.step = self._calls
        return await self._live.chat(request)

    async def aclose(self) -> None:
        await self._live.aclose()


class _ResumingTool:
    """A pack tool whose calls in the re-driven steps are answered from the log."""

    def __init__(self, live: Tool, recorded: Tool, completed: int, state: ReplayState) -> None:
        self._live, self._recorded, self._completed, self._state = live, recorded, completed, state

    @property
    def spec(self) -> ToolSpec:
        return self._recorded.spec  # the pack's spec, or an MCP tool's as it was then

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        if self._state.step <= self._completed:
            return await self._recorded(arguments, ctx)
        return await self._live(arguments, ctx)


class ResumingOffers:
    """The tools a resumed run offers: in the re-driven steps those it offered then (its MCP
    tools as recorded, answering from the log); from the first new step on, the pack's tools
    and its MCP servers' tools as they are now, a difference logged as a change then."""

    def __init__(
        self,
        recording: Recording,
        own: Sequence[Tool],
        mcp: Sequence[Tool],
        live: ToolUpdates | None,
        completed: int,
        state: ReplayState,
        run_dir: Path | None,
    ) -> None:
        self._live, self._completed = live, completed
        names = [t.spec.name for t in own]
        then = recorded_mcp(recording, names)
        answered = recorded_tools(recording, [*own, *then], state=state, run_dir=run_dir)
        live_by_name = {t.spec.name: t for t in [*own, *mcp]}
        wrapped = [
            _ResumingTool(live_by_name.get(rec.spec.name, rec), rec, completed, state)
            for rec in answered
        ]
        self._recorded = RecordedOffers(
            recording, wrapped[: len(own)], {t.spec.name: t for t in wrapped[len(own) :]}
        )
        self._now: list[Tool] = [*wrapped[: len(own)], *mcp]
        """The tools as they are now: what the new steps offer."""
        self._offered = self.first()

    def first(self) -> list[Tool]:
        return self._recorded.first() if self._completed else self._now

    async def changed(self, step: int) -> ToolChange | None:
        if step <= self._completed:
            change = await self._recorded.changed(step)
        else:
            change = await self._live.changed(step) if self._live is not None else None
            if change is not None:
                self._now = list(change.tools)
            if step == self._completed + 1 and self._differ(self._now, self._offered):
                change = ToolChange(
                    tuple(self._now),
                    change.note if change else _resumed_note(self._offered, self._now),
                )
        if change is not None:
            self._offered = list(change.tools)
        return change

    def _differ(self, now: Sequence[Tool], then: Sequence[Tool]) -> bool:
        """Whether the tools now are not those of then: in order, or for a run that searched
        its tools (which offers them by name, not in the set's order) by name."""
        if self._recorded.searched is not None:
            return {t.spec.name: t.spec for t in now} != {t.spec.name: t.spec for t in then}
        return [t.spec for t in now] != [t.spec for t in then]


class AfterNewSteps:
    """A pack's after-call hook, quiet in the steps a resumed run re-drives from its log:
    their recorded outputs hold what it appended then (``Addition.restore`` told it so)."""

    def __init__(self, live: AfterCall, completed: int) -> None:
        self._live, self._completed = live, completed

    async def __call__(
        self, name: str, arguments: Mapping[str, Any], ctx: ToolContext
    ) -> Appended | None:
        if ctx.step <= self._completed:
            return None
        return await self._live(name, arguments, ctx)


def _resumed_note(before: Sequence[Tool], now: Sequence[Tool]) -> dict[str, Any]:
    """``tools_changed`` of the first new step of a resumed run whose MCP tools are not what
    they were (the mapping of the names is in ``run_resumed.mcp``)."""
    diff = tool_diff(before, now)
    return {**diff, "resumed": True, "added": [{"name": n} for n in diff["added"]]}


__all__ = ["AfterNewSteps", "ResumingChat", "ResumingOffers"]

"""A run whose every outside effect is a recorded step (ADR 0020): driven again after its
process died, it gets the recorded model replies, tool results, answers of people, brief and
verdicts back instead of asking and running again, and goes on from the first step that had
not finished.

The loop does not change: the ports it uses are wrapped. Each wrapper hands the call to the
run's ``Checkpoints`` (the DBOS adapter in ``infrastructure/durable``) as a JSON value, so a
step recorded by one fabric process can be read back by another; a failure is recorded as its
code, message and hint, and raised again the same way.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import msgspec

from fabric.domain.errors import FabricError, RecordedRunError, RecordedToolError, ToolError
from fabric.domain.models import ChatRequest, ChatResponse, Message, ToolSpec
from fabric.domain.policy import ApprovalAnswer, ApprovalRequest

from .approvals import PolicyGate
from .context import ToolContext
from .job import Control, Job, Kit
from .loop.state import Stop
from .loop.window import asked_of
from .pack import Brief, Briefing, Pack
from .ports import Approver, ChatClient, Summarize, Tool, ToolChange, ToolUpdates
from .replay.divergence import ReplayState
from .replay.offers import UnavailableTool
from .replay.replies import recorded_response
from .verify import RunRecord, Verdict, Verifier

JSON = Any
"""A value that survives a JSON round trip."""


class Checkpoints(Protocol):
    """Where a durable run's steps are recorded."""

    async def step(
        self, name: str, call: Callable[[], Awaitable[JSON]], *, looks: bool = False
    ) -> JSON:
        """``call``'s value, the first time the run reaches this step; the value recorded then
        when the run is driven again after its process died. ``looks``: the call only looks
        (``ToolSpec.reads_only``), so its value may be recorded with the next step; a run
        driven again before that step was recorded makes the call again."""
        ...


def _crashed(error: Mapping[str, Any]) -> Exception:
    """A tool's own bug as it was recorded: an exception of the same name and text (the loop
    reports ``Type: text``)."""
    kind: type[Exception] = type(str(error.get("type", "Exception")), (Exception,), {})
    return kind(str(error.get("message", "")))


async def _guarded(call: Callable[[], Awaitable[JSON]], *, tool: bool = False) -> JSON:
    """``{"value": ...}``, or the failure as JSON (``error``; a tool's own bug: ``crash``)."""
    try:
        return {"value": await call()}
    except ToolError as exc:
        return {"error": exc.as_dict(), "tool_error": True}
    except FabricError as exc:
        return {"error": exc.as_dict(), "status_code": getattr(exc, "status_code", None)}
    except Stop:
        raise  # the run is ending (a delegation cut by a cancel): no value to record
    except Exception as exc:
        if not tool:
            raise
        return {"crash": {"type": type(exc).__name__, "message": str(exc)}}


def _unwrapped(recorded: Mapping[str, Any]) -> JSON:
    if "value" in recorded:
        return recorded["value"]
    if "crash" in recorded:
        raise _crashed(recorded["crash"])
    if recorded.get("tool_error"):
        raise RecordedToolError(recorded["error"])
    failed = RecordedRunError(recorded["error"])
    if recorded.get("status_code") is not None:
        failed.status_code = recorded["status_code"]  # type: ignore[attr-defined]
    raise failed


def reply_json(response: ChatResponse) -> dict[str, Any]:
    """A model reply in the form of its ``llm_response`` event (``recorded_response`` reads
    it back)."""
    out: dict[str, Any] = {
        "message": response.message,
        "finish_reason": response.finish_reason,
        "usage": {
            "prompt_tokens": response.usage.prompt_tokens,
            "completion_tokens": response.usage.completion_tokens,
        },
        "model": response.model,
    }
    if response.tool_calls_from_text:
        out["tool_calls_from_text"] = True
    if response.warnings:
        out["warnings"] = list(response.warnings)
    return out


class CheckpointedChat:
    """The model client, each call a recorded step; counts the calls in ``state.step`` (a
    recovered run's runlog drops what it logged already by step)."""

    def __init__(self, chat: ChatClient, points: Checkpoints, state: ReplayState) -> None:
        self._chat, self._points, self._state = chat, points, state

    @property
    def model(self) -> str:
        return self._chat.model

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self._state.step += 1

        async def ask() -> JSON:
            return reply_json(await self._chat.chat(request))

        recorded = await self._points.step("model", lambda: _guarded(ask))
        return recorded_response(_unwrapped(recorded))

    async def aclose(self) -> None:
        await self._chat.aclose()


def checkpointed_summaries(summarize: Summarize, points: Checkpoints) -> Summarize:
    """Summaries of older turns (to fit the window), each a recorded step of its own: not one
    of the run's numbered model calls."""

    async def written(messages: Sequence[Message]) -> ChatResponse:
        async def ask() -> JSON:
            return reply_json(await summarize(messages))

        return recorded_response(_unwrapped(await points.step("summary", lambda: _guarded(ask))))

    return written


Confirm = Callable[[ToolContext, str, Mapping[str, Any], str], Awaitable[None]]
"""Asks a person whether a call may run (``PolicyGate.confirm``): the context of the call,
the tool, its arguments, why; raises ``ApprovalDenied`` unless approved."""

CUT_OFF = (
    "this call was cut off when fabric's process died: it may or may not have done its "
    "work, and running it again may do it twice"
)


class CheckpointedTool:
    """A tool whose call is a recorded step: its output, or its failure. A call of a tool
    that is not safe to repeat (``spec.repeat_safe``) is preceded by a marker step; a run
    driven again that finds the marker but no result (the call was cut off) runs the call
    again only if a person says so (``confirm``)."""

    def __init__(self, tool: Tool, points: Checkpoints, confirm: Confirm | None = None) -> None:
        self._tool, self._points, self._confirm = tool, points, confirm

    @property
    def spec(self) -> ToolSpec:
        return self._tool.spec

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        name = self._tool.spec.name
        cut_off = False
        if not self._tool.spec.repeat_safe:
            mine = uuid.uuid4().hex  # this process's mark: another one's means it began before

            async def mark() -> JSON:
                return mine

            began = await self._points.step(f"begin:{name}", lambda: _guarded(mark))
            cut_off = _unwrapped(began) != mine

        async def run() -> JSON:
            if cut_off:  # only when the call's result was not recorded: it never finished
                if self._confirm is None:
                    raise ToolError(f"{CUT_OFF}; no one could be asked, so it was not run again",
                                    hint="run it again yourself if that is safe")  # fmt: skip
                await self._confirm(ctx, name, arguments, CUT_OFF)
            return await self._tool(arguments, ctx)

        looks = self._tool.spec.reads_only and self._tool.spec.repeat_safe
        done = await self._points.step(
            f"tool:{name}", lambda: _guarded(run, tool=True), looks=looks
        )
        return str(_unwrapped(done))


class CheckpointedApprover:
    """A person's answer to a call the policy asks about, recorded once given."""

    def __init__(self, approver: Approver, points: Checkpoints) -> None:
        self._approver, self._points = approver, points

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        async def ask() -> JSON:
            return msgspec.structs.asdict(await self._approver.request(request))

        recorded = _unwrapped(await self._points.step("approval", lambda: _guarded(ask)))
        return ApprovalAnswer(**recorded)


class CheckpointedVerifier:
    """A check of the finished work, its verdict recorded."""

    def __init__(self, verifier: Verifier, points: Checkpoints) -> None:
        self._verifier, self._points = verifier, points

    @property
    def name(self) -> str:
        return self._verifier.name

    async def verify(
        self, payload: Mapping[str, Any], ctx: ToolContext, record: RunRecord
    ) -> Verdict | None:
        async def check() -> JSON:
            verdict = await self._verifier.verify(payload, ctx, record)
            return None if verdict is None else verdict.as_event()

        name = f"verify:{self._verifier.name}"
        event = _unwrapped(await self._points.step(name, lambda: _guarded(check)))
        return None if event is None else Verdict.from_event(event)


def _gone(spec: ToolSpec) -> UnavailableTool:
    """A tool a recorded change offered that this process does not have (its MCP server lists
    it no longer): offered as recorded, failing when called."""
    return UnavailableTool(
        spec, f"{spec.name} is no longer offered by its MCP server", "use another tool"
    )


class CheckpointedUpdates:
    """A changing tool list (MCP) whose every look is a recorded step: the names offered and
    what changed; the tools are this process's, checkpointed like the rest."""

    def __init__(
        self,
        updates: ToolUpdates,
        tools: Sequence[Tool],
        points: Checkpoints,
        confirm: Confirm | None = None,
    ) -> None:
        self._updates, self._points, self._confirm = updates, points, confirm
        self._pool: dict[str, Tool] = {t.spec.name: t for t in tools}

    async def changed(self, step: int) -> ToolChange | None:
        async def look() -> JSON:
            change = await self._updates.changed(step)
            if change is None:
                return None
            for tool in change.tools:
                known = self._pool.get(tool.spec.name)
                if known is None or known.spec != tool.spec:
                    self._pool[tool.spec.name] = CheckpointedTool(tool, self._points, self._confirm)
            specs = [
                {"name": t.spec.name, "description": t.spec.description,
                 "parameters": dict(t.spec.parameters)}
                for t in change.tools
            ]  # fmt: skip
            return {"tools": specs, "note": dict(change.note)}

        value = _unwrapped(await self._points.step("tools", lambda: _guarded(look)))
        if value is None:
            return None
        tools: list[Tool] = []
        for spec in value["tools"]:
            recorded = ToolSpec(spec["name"], spec["description"], spec["parameters"])
            tool = self._pool.get(recorded.name)
            if tool is None or tool.spec != recorded:
                # still a step: its call was recorded where it was offered
                tool = self._pool[recorded.name] = CheckpointedTool(
                    _gone(recorded), self._points, self._confirm
                )
            tools.append(tool)
        return ToolChange(tuple(tools), value["note"])


def checkpointed_brief(brief: Brief, points: Checkpoints) -> Brief:
    """The pack's look at the workspace, recorded."""

    async def look(ctx: ToolContext) -> Briefing:
        async def run() -> JSON:
            found = await brief(ctx)
            told = found if isinstance(found, Briefing) else Briefing(str(found))
            return {"text": told.text, "keep": list(told.keep), "why": told.why,
                    "ran": dict(told.ran)}  # fmt: skip

        value = _unwrapped(await points.step("brief", lambda: _guarded(run)))
        return Briefing(value["text"], tuple(value["keep"]), value["why"], value["ran"])

    return look


def _confirmer(job: Job, kit: Kit, control: Control) -> Confirm | None:
    """How a cut-off call is put to a person: as the policy's asks are (logged, bounded by
    ``approval_timeout``, cut by a cancel), to the run's own approver."""
    if control.approver is None:
        return None
    policy = (job.sandbox or job.pack.sandbox).policy
    gate = PolicyGate(
        policy,
        approver=control.approver,
        log=kit.runlog,
        run_id=job.run_id,
        cancel=control.cancel or asyncio.Event(),
    )

    async def confirm(ctx: ToolContext, tool: str, arguments: Mapping[str, Any], why: str) -> None:
        await gate.confirm(ctx.step, ctx.call_id, tool, arguments, why)

    return confirm


def checkpointed(
    job: Job, kit: Kit, control: Control, points: Checkpoints, state: ReplayState
) -> tuple[Job, Kit, Control]:
    """``job``, ``kit`` and ``control`` with every outside effect a recorded step: the model,
    the pack's tools, its brief and checks, and the answers of people."""
    pack: Pack = job.pack
    confirm = _confirmer(job, kit, control)
    durable_pack = msgspec.structs.replace(
        pack,
        tools=tuple(CheckpointedTool(t, points, confirm) for t in pack.tools),
        verifiers=tuple(CheckpointedVerifier(v, points) for v in pack.verifiers),
        brief=None if pack.brief is None else checkpointed_brief(pack.brief, points),
    )
    chat = None if kit.chat is None else CheckpointedChat(kit.chat, points, state)
    summarize = kit.summarize or asked_of(kit.chat)  # the model itself, not the counted client
    updates = None
    if kit.tool_updates is not None:
        updates = CheckpointedUpdates(kit.tool_updates, durable_pack.tools, points, confirm)
    approver = control.approver
    return (
        msgspec.structs.replace(job, pack=durable_pack),
        msgspec.structs.replace(
            kit,
            chat=chat,
            tool_updates=updates,
            summarize=None if summarize is None else checkpointed_summaries(summarize, points),
        ),
        msgspec.structs.replace(
            control, approver=None if approver is None else CheckpointedApprover(approver, points)
        ),
    )


__all__ = ["Checkpoints", "checkpointed", "reply_json"]

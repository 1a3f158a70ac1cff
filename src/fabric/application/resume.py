"""Continuing an interrupted run: ``fabric resume``.

A run that never wrote ``run_finished`` (the process was killed, the machine or the service
restarted), one that was cancelled (Ctrl-C), or one that stopped at ``max_steps`` and is given
more steps, goes on with the same run id, workspace and runlog. The unchanged loop
(``execute_task``) is driven again: for the steps already complete in the log (their
``llm_response`` and every ``tool_result`` are there) the model's replies and the tools'
results come from the log, as a replay serves them, so the model is not asked again and no
tool runs twice; from the first incomplete step on, the live chat client and the pack's real
tools take over. A runlog wrapper drops the events of the re-driven steps (they are in the
log already), writes ``run_resumed`` and passes the rest on.

A run has one end: the ``run_finished`` of a run resumed after ``max_steps`` or a cancel goes
into ``run_resumed`` (as ``ended``), in its place in the log (``JsonlRunLog.reopen`` replaces
it), so the log still ends with exactly one ``run_finished``, the resumed run's (ADR 0010).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabric.config.policy import PolicySettings
from fabric.config.schema import Limits, SandboxSettings
from fabric.domain.errors import ConfigError, FabricError
from fabric.domain.models import ChatRequest, ChatResponse, RunResult, RunStatus, ToolSpec, Usage

from .approvals import RecordedApprover
from .context import ToolContext
from .execute_task import execute_task
from .job import Control, Job, Kit
from .loop.search import recorded_settings
from .loop.window import asked_of, recorded_window
from .pack import AfterCall, Appended, Pack
from .ports import ChatClient, RunLog, Tool, ToolChange, ToolUpdates, tool_diff
from .replay.divergence import Diverged, ReplayState
from .replay.offers import RecordedOffers, recorded_mcp
from .replay.recorded import (
    RecordedSummaries,
    ReplayChatClient,
    missing_checks,
    recorded_brief,
    recorded_tools,
    recorded_verifiers,
)
from .replay.recording import Recording

RESUMABLE = ("max_steps", "cancelled")
"""The end states a run can be resumed from, besides having no end at all: a run stopped at
its step limit (given more steps) and one a person stopped (Ctrl-C), which goes on from its
last complete step."""
_STEP_KINDS = {
    "llm_request",
    "llm_response",
    "tool_call",
    "policy_decision",
    "approval_requested",
    "approval",
    "tool_result",
    "verification",
    "nudge",
    "context_compacted",
    "plan",
}
"""Events of a step: those of the re-driven steps are in the log already."""


@dataclass(frozen=True)
class ResumePlan:
    """What a resume starts from: the recorded events up to the last complete step."""

    started: Mapping[str, Any]
    events: list[Mapping[str, Any]]
    """run_started and the events of steps 1..``completed`` (what is fed back)."""
    completed: int
    limits: Limits
    reason: str
    ended: Mapping[str, Any] | None = None
    """The ``run_finished`` the run is resumed from (None: it was interrupted)."""

    @property
    def run_id(self) -> str:
        return str(self.started.get("run_id", ""))


def plan_resume(events: Sequence[Mapping[str, Any]], max_steps: int | None = None) -> ResumePlan:
    """Check that the run can be resumed and find its last complete step.

    Raises ``ConfigError`` for a run that ended otherwise than cancelled or at ``max_steps``
    (either with steps left under ``max_steps``), or whose log has no ``run_started``."""
    try:
        recording = Recording(events)
    except FabricError as exc:
        raise ConfigError(exc.message, hint=exc.hint) from exc
    limits = Limits.model_validate(recording.limits)
    if max_steps is not None:
        if max_steps < 1:
            raise ConfigError("--max-steps must be at least 1")
        limits = limits.model_copy(update={"max_steps": max_steps})
    completed = _complete_steps(recording)
    finished = ended(events)
    if finished is None:
        reason = "interrupted"
    elif finished.get("status") in RESUMABLE:
        reason = str(finished["status"])
        if limits.max_steps <= completed:
            raise ConfigError(
                f"the run ended ({reason}) after {completed} step(s), its step limit",
                hint=f"pass --max-steps above {completed} to give it more steps",
            )
    else:
        raise ConfigError(
            f"the run {recording.run_id} already ended ({finished.get('status')}); only an "
            "interrupted or cancelled run, or one that hit max_steps, can be resumed",
            hint="start a new run with `fabric run`",
        )
    kept = [
        e
        for e in events
        if e.get("kind") in ("run_started", "brief")
        or (isinstance(e.get("step"), int) and e["step"] <= completed)
    ]
    return ResumePlan(recording.started, kept, completed, limits, reason, finished)


def recovered_plan(events: Sequence[Mapping[str, Any]], looks: Collection[str]) -> ResumePlan:
    """How far a durable run whose process died got, as its drive from the recorded steps
    will see it (ADR 0020). The results of calls that only look (tools named in ``looks``)
    are recorded with the next model reply, so the last complete step is redone in the log
    when it made such a call and that reply was not logged: the call may be made again, and
    the log must hold what the model was told."""
    plan = plan_resume(events)
    last, answered = plan.completed, plan.completed + 1
    looked = any(
        e.get("kind") == "tool_call" and e.get("step") == last and e.get("name") in looks
        for e in plan.events
    )
    if not looked or any(e.get("kind") == "llm_response" and e.get("step") == answered
                         for e in events):  # fmt: skip
        return dataclasses.replace(plan, reason="recovered")
    kept = [e for e in plan.events if not (isinstance(e.get("step"), int) and e["step"] == last)]
    return dataclasses.replace(plan, events=kept, completed=last - 1, reason="recovered")


def ended(events: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The ``run_finished`` that ends the log, unless a later ``run_resumed`` reopened it."""
    end: Mapping[str, Any] | None = None
    for event in events:
        if event.get("kind") == "run_finished":
            end = event
        elif event.get("kind") == "run_resumed":
            end = None
    return end


def logged_result(
    end: Mapping[str, Any], run_id: str, runlog: str | None, *, default: RunStatus
) -> RunResult:
    """The result a ``run_finished`` records (``default``: the status when it names none)."""
    usage = end.get("usage") or {}
    try:
        status = RunStatus(end.get("status", default))
    except ValueError:
        status = default
    return RunResult(
        run_id=run_id,
        status=status,
        payload=end.get("payload"),
        steps=int(end.get("steps") or 0),
        usage=Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
        duration_s=float(end.get("duration_s") or 0.0),
        runlog_path=runlog,
        error=end.get("error"),
    )


def _without_envelope(end: Mapping[str, Any]) -> dict[str, Any]:
    """A ``run_finished`` as ``run_resumed.ended`` keeps it: its fields and ``ts``, without
    ``v``, ``seq``, ``run_id`` and ``kind`` (its seq is the ``run_resumed``'s now)."""
    return {k: v for k, v in end.items() if k not in {"v", "seq", "run_id", "kind"}}


def _complete_steps(recording: Recording) -> int:
    """How many leading steps have their reply and every tool result in the log."""
    done = {(r.get("step"), r.get("call_id")) for r in recording.results}
    count = 0
    for expected, step in enumerate(recording.steps, 1):
        if step.number != expected or step.response is None:
            break
        message = step.response.get("message") or {}
        calls = [c.get("id") for c in message.get("tool_calls") or ()]
        if any((step.number, call_id) not in done for call_id in calls):
            break
        count = step.number
    return count


class _ResumingChat:
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


class _ResumingOffers:
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


class _AfterNewSteps:
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


class ResumingRunLog:
    """The reopened runlog: drops ``run_started`` and the re-driven steps' events (already in
    the log), writing ``run_resumed`` in place of the former, with the end the run is resumed
    from (which the reopened log leaves out); passes everything else on."""

    def __init__(self, inner: RunLog, plan: ResumePlan, state: ReplayState) -> None:
        self._inner, self._plan, self._state = inner, plan, state
        self._briefed = any(e.get("kind") == "brief" for e in plan.events)
        self._artifacts = deque(
            str(e["artifact"])
            for e in plan.events
            if e.get("kind") == "tool_result" and e.get("artifact")
        )

    @property
    def location(self) -> str | None:
        return self._inner.location

    def emit(self, kind: str, data: Mapping[str, Any]) -> None:
        if kind == "brief" and self._briefed:
            return  # the recorded look, told again: the log holds it already
        if kind == "run_started":
            resumed = {
                "from_step": self._plan.completed + 1,
                "reason": self._plan.reason,
                "limits": data.get("limits"),
            }
            if self._plan.ended is not None:
                resumed["ended"] = _without_envelope(self._plan.ended)
            if "mcp" in data:  # the MCP servers as started again, and their tools now
                resumed["mcp"] = data["mcp"]
            if "additions" in data:  # what fabric's conventions found for the new steps
                resumed["additions"] = data["additions"]
            self._inner.emit("run_resumed", resumed)
            return
        step = data.get("step")
        if kind in _STEP_KINDS and isinstance(step, int) and step <= self._plan.completed:
            return
        self._inner.emit(kind, data)

    def save_artifact(self, name: str, content: str) -> str:
        if self._state.step <= self._plan.completed and self._artifacts:
            return self._artifacts.popleft()  # saved when the step first ran
        return self._inner.save_artifact(name, content)

    def close(self) -> None:
        self._inner.close()


async def resume_task(
    plan: ResumePlan,
    *,
    pack: Pack,
    workspace: Path,
    kit: Kit,
    control: Control | None = None,
    run_dir: Path | None = None,
    sandbox: SandboxSettings | None = None,
    mcp: Sequence[Tool] = (),
    meta: Mapping[str, Any] | None = None,
    outer_policies: tuple[PolicySettings, ...] = (),
) -> RunResult:
    """Continue the run ``plan`` describes, appending to ``kit.runlog`` (the run's own log,
    reopened). ``kit.chat`` is the live model client; ``run_dir`` (the run's folder) lets a cut
    tool output come back whole from its artifact, as it did the first time.
    ``control.approver`` answers the policy's asks in the new steps (those of the re-driven ones
    are recorded). ``mcp``: the tools of the pack's MCP servers, started again for the new
    steps (``kit.tool_updates`` follows their lists); ``meta.mcp`` goes into ``run_resumed``.
    The re-driven steps offer the tools the run had then."""
    recording = Recording(plan.events)
    if missing := missing_checks(recording, pack):
        raise ConfigError(
            f"the run started with checks of its work that pack {pack.name!r} no longer has: "
            f"{'; '.join(missing)}",
            hint="restore the pack's verify settings as they were, or start a new run",
        )
    state = ReplayState()
    offers = _ResumingOffers(
        recording, pack.tools, mcp, kit.tool_updates, plan.completed, state, run_dir
    )
    verifiers = recorded_verifiers(
        recording, pack, state=state, live=True, upto_step=plan.completed
    )
    brief = recorded_brief(recording)
    if brief is None and plan.completed == 0:
        brief = pack.brief  # cut off before the pack had looked: it looks now, and logs it
    resumed_pack = dataclasses.replace(
        pack,
        tools=tuple(offers.first()),
        verifiers=verifiers,
        brief=brief,
        after_calls={k: _AfterNewSteps(h, plan.completed) for k, h in pack.after_calls.items()},
    )
    resuming = (
        _ResumingChat(ReplayChatClient(recording, state), kit.chat, plan.completed, state)
        if kit.chat is not None
        else None
    )
    job = Job(
        str(plan.started.get("task", "")),
        resumed_pack,
        plan.run_id,
        workspace,
        plan.limits,
        sandbox,
        meta or {},
        outer_policies=outer_policies,  # a delegated run: its parents' policies hold
        tool_search=recorded_settings(plan.started),  # it searches its tools as it did
    )
    window, reply = recorded_window(plan.started)
    resumed_kit = dataclasses.replace(
        kit,
        chat=resuming,
        runlog=ResumingRunLog(kit.runlog, plan, state),
        tool_updates=offers,
        context_size=window,
        reply_tokens=reply,  # the redone steps elide what they elided, summarise as they did
        summarize=RecordedSummaries(
            recording, state, then=kit.summarize or asked_of(kit.chat), upto_step=plan.completed
        ),
    )
    # an "ask" in a re-driven step gets its recorded answer; later ones go to the approver
    control = control or Control()
    approver = RecordedApprover(plan.events, then=control.approver, upto_step=plan.completed)
    return await execute_task(job, resumed_kit, dataclasses.replace(control, approver=approver))


__all__ = ["ResumePlan", "ResumingRunLog", "ended", "logged_result", "plan_resume", "resume_task"]

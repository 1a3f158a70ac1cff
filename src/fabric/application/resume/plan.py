"""Where a resume starts: whether the run's log allows one (it never ended, or ended cancelled
or at its step limit with more steps given), its last complete step, how far a durable run
whose process died got, and the end and result a ``run_finished`` records."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from fabric.application.replay.recording import Recording
from fabric.config.schema import Limits
from fabric.domain.errors import ConfigError, FabricError
from fabric.domain.models import RunResult, RunStatus, Usage

RESUMABLE = ("max_steps", "cancelled")
"""The end states a run can be resumed from, besides having no end at all: a run stopped at
its step limit (given more steps) and one a person stopped (Ctrl-C), which goes on from its
last complete step."""


class ResumePlan(Struct, frozen=True):
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
        return replace(plan, reason="recovered")
    kept = [e for e in plan.events if not (isinstance(e.get("step"), int) and e["step"] == last)]
    return replace(plan, events=kept, completed=last - 1, reason="recovered")


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


__all__ = ["RESUMABLE", "ResumePlan", "ended", "logged_result", "plan_resume", "recovered_plan"]

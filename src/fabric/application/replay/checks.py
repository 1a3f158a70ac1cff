"""A pack's own parts as a run recorded them: its checks of the work (ADR 0016), giving the
recorded verdicts, and its look at the workspace before step 1 (the ``brief`` event), so a
replay or a resume reaches the same end and sends the same first message without running
anything. A resume's new steps are judged by the pack's live checks instead."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from fabric.application.context import ToolContext
from fabric.application.pack import Brief, Briefing, Pack
from fabric.application.verify import RunRecord, Verdict, Verifier
from fabric.domain.errors import RecordedRunError, RunError

from .divergence import ReplayState
from .recording import Recording


class _RecordedVerifier:
    """A pack check whose verdicts come from the recording, in order; with ``live``, the
    checks of steps after ``upto_step`` are made for real (a resumed run's new steps)."""

    def __init__(
        self,
        name: str,
        events: deque[Mapping[str, Any]],
        state: ReplayState,
        live: Verifier | None = None,
        upto_step: int = 0,
    ) -> None:
        self._name, self._events, self._state = name, events, state
        self._live, self._upto = live, upto_step

    @property
    def name(self) -> str:
        return self._name

    async def verify(
        self, payload: Mapping[str, Any], ctx: ToolContext, record: RunRecord
    ) -> Verdict | None:
        if self._live is not None and self._state.step > self._upto:
            return await self._live.verify(payload, ctx, record)
        if not self._events:
            self._state.diverge(self._state.step, f"verification({self._name})", "none", "one")
            raise RunError(f"the recording has no further result of the check {self._name!r}")
        event = self._events.popleft()
        if isinstance(event.get("error"), Mapping):
            raise RecordedRunError(event["error"])  # it could not run then
        # a skipped check too: its recorded verdict says whether it confirmed (older logs:
        # every pass did), so an old completed run replays completed
        return Verdict.from_event(event)


def recorded_verifiers(
    recording: Recording,
    pack: Pack,
    *,
    state: ReplayState,
    live: bool = False,
    upto_step: int = 0,
) -> list[Verifier]:
    """Checks named as the run recorded them (``run_started.verify``) whose verdicts come from
    its ``verification`` events, so a replay reaches the same end without running anything.
    With ``live`` (a resume, a live replay), the pack's own checks of the same name judge the
    steps after ``upto_step``; a resume needs every one of them (``missing_checks``)."""
    names = [str(n) for n in recording.started.get("verify") or ()]
    queues: dict[str, deque[Mapping[str, Any]]] = {n: deque() for n in names}
    for event in recording.verifications:
        queues.setdefault(str(event.get("check")), deque()).append(event)
    own = {v.name: v for v in pack.verifiers}
    return [
        _RecordedVerifier(n, queues[n], state, own.get(n) if live else None, upto_step)
        for n in names
    ]


def missing_checks(recording: Recording, pack: Pack) -> list[str]:
    """The checks the recorded run started with that ``pack`` no longer has."""
    own = {v.name for v in pack.verifiers}
    return [str(n) for n in recording.started.get("verify") or () if str(n) not in own]


def recorded_brief(recording: Recording) -> Brief | None:
    """The pack's look at the workspace as the run recorded it (its ``brief`` event), so a
    replay or a resume sends the model the same first message; None when it had none."""
    event = recording.brief
    if event is None:
        return None
    told = Briefing(
        str(event.get("text", "")),
        tuple(str(p) for p in event.get("keep") or ()),
        str(event.get("keep_why", "")),
        {str(k): int(v) for k, v in (event.get("ran") or {}).items()},
    )

    async def brief(ctx: ToolContext) -> Briefing:
        return told

    return brief


__all__ = ["missing_checks", "recorded_brief", "recorded_verifiers"]

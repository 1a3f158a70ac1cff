"""Re-driving a recorded run: ``fabric replay``.

The loop runs again with a chat client that answers with the recorded model responses, in
order (``replies.py``), and (by default) tools that answer with the recorded tool results
(``tools.py``), and the pack's checks with their recorded verdicts (``checks.py``), so nothing
outside the runlog is touched. At every model call the client checks that what the loop would
send now (the whole history and the tool definitions) equals what was sent then, rebuilt from
the runlog (``recording.py``); a watcher on the replay's own runlog checks that the tool calls
and the policy's verdicts are the recorded ones (``watching.py``), and a call the policy asks a
person about gets the recorded answer (``RecordedApprover``). The first difference is the
divergence the replay reports (``divergence.py``); at the end the step count, status and
payload are compared too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from fabric.application.approvals import RecordedApprover
from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, Kit
from fabric.application.loop.search import recorded_settings
from fabric.application.loop.window import recorded_window
from fabric.application.pack import Pack
from fabric.config.schema import Limits, SandboxSettings
from fabric.domain.models import RunResult

from .checks import recorded_brief, recorded_verifiers
from .divergence import Diverged, Divergence, ReplayState, first_difference, plain
from .offers import RecordedOffers, recorded_mcp
from .recording import Recording
from .replies import RecordedSummaries, ReplayChatClient
from .tools import recorded_tools
from .watching import WatchingRunLog


class ReplayReport(Struct, frozen=True):
    """How a replay went: identical, or where it first diverged; and the replay's result."""

    original_run_id: str
    result: RunResult
    divergence: Divergence | None
    steps_recorded: int

    @property
    def identical(self) -> bool:
        return self.divergence is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": "identical" if self.identical else "diverged",
            "replay_of": self.original_run_id,
            "run_id": self.result.run_id,
            "runlog": self.result.runlog_path,
            "steps_recorded": self.steps_recorded,
            "steps_replayed": self.result.steps,
            "divergence": self.divergence.as_dict() if self.divergence else None,
            "result": {"status": self.result.status.value, "payload": self.result.payload},
        }


async def replay(
    events: Recording | Sequence[Mapping[str, Any]],
    *,
    pack: Pack,
    run_id: str,
    workspace: Path,
    kit: Kit,
    live: bool = False,
    run_dir: Path | None = None,
    limits: Limits | None = None,
    sandbox: SandboxSettings | None = None,
    meta: Mapping[str, Any] | None = None,
) -> ReplayReport:
    """Re-drive the recorded run ``events`` with ``pack`` (as it is now) and report whether it
    went exactly as recorded. ``live`` runs the pack's real tools (in ``workspace``, which
    should then be a copy; ``kit.commands`` starts their processes); otherwise tools answer
    from the recording. ``kit.chat`` is not used: the recorded replies answer. ``limits``
    default to the recorded ones; the replay's ``run_started`` names the original in
    ``replay_of``, and holds ``meta`` too (what the additions found now). ``events`` may be
    a ``Recording`` of them, read already."""
    recording = events if isinstance(events, Recording) else Recording(events)
    state = ReplayState()
    chat = ReplayChatClient(recording, state)
    if live:  # the pack's real tools, its MCP servers' lists changing as they do now
        tools, updates = list(pack.tools), kit.tool_updates
    else:
        offers = _recorded_offers(recording, pack, state, run_dir)
        tools, updates = offers.first(), offers
    verifiers = recorded_verifiers(recording, pack, state=state, live=live)
    brief = recorded_brief(recording)  # what the model was told then, not a new look
    replay_pack = replace(
        pack,
        tools=tools,
        verifiers=verifiers,
        brief=brief,
        after_calls=pack.after_calls if live else {},  # recorded outputs hold what they added
    )
    if limits is None:
        limits = Limits.model_validate(recording.limits)
    job = Job(
        str(recording.started.get("task", "")),
        replay_pack,
        run_id,
        workspace,
        limits,
        sandbox,
        meta={"replay_of": recording.run_id, **(meta or {})},
        tool_search=recorded_settings(recording.started),  # it searches as the run did
    )
    window, reply = recorded_window(recording.started)
    replaying = replace(
        kit,
        chat=chat,
        runlog=WatchingRunLog(kit.runlog, recording, state),
        commands=kit.commands if live else None,
        tool_updates=updates,
        context_size=window,
        reply_tokens=reply,  # it elides what the run elided, and gets its summaries back
        summarize=RecordedSummaries(recording, state),
    )
    # an "ask" gets the answer it got then
    result = await execute_task(
        job, replaying, Control(approver=RecordedApprover(recording.answers))
    )
    if state.divergence is None:
        _check_end(recording, result, state)
    return ReplayReport(recording.run_id, result, state.divergence, len(recording.steps))


def _recorded_offers(
    recording: Recording, pack: Pack, state: ReplayState, run_dir: Path | None
) -> RecordedOffers:
    """The pack's tools and the recorded run's MCP tools, answering from the recording, offered
    step by step as they were."""
    own = list(pack.tools)
    mcp = recorded_mcp(recording, [t.spec.name for t in own])
    answered = recorded_tools(recording, [*own, *mcp], state=state, run_dir=run_dir)
    by_name = {t.spec.name: t for t in answered[len(own) :]}
    return RecordedOffers(recording, answered[: len(own)], by_name)


def _check_end(recording: Recording, result: RunResult, state: ReplayState) -> None:
    recorded_steps = len(recording.steps)
    if result.steps != recorded_steps:
        state.diverge(result.steps, "step count", recorded_steps, result.steps)
        return
    finished = recording.finished
    if finished is None:
        state.diverge(result.steps, "status", "(the recorded run never finished)", result.status)
        return
    if finished.get("status") != result.status.value:
        state.diverge(result.steps, "status", finished.get("status"), result.status.value)
        return
    difference = first_difference(finished.get("payload"), plain(result.payload), "payload")
    if difference is not None:
        state.diverge(result.steps, *difference)


__all__ = [
    "Diverged",
    "Divergence",
    "Recording",
    "ReplayChatClient",
    "ReplayReport",
    "ReplayState",
    "recorded_tools",
    "replay",
]

"""``resume_task``: the unchanged loop driven again for a resumed run, with the pack's tools,
checks, brief, model and approvals answering from the log for the re-driven steps and live
for the new ones, appending to the run's own reopened log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from fabric.application.approvals import RecordedApprover
from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, Kit
from fabric.application.loop.search import recorded_settings
from fabric.application.loop.window import asked_of, recorded_window
from fabric.application.pack import Pack
from fabric.application.ports import Tool
from fabric.application.replay.checks import missing_checks, recorded_brief, recorded_verifiers
from fabric.application.replay.divergence import ReplayState
from fabric.application.replay.recording import Recording
from fabric.application.replay.replies import RecordedSummaries, ReplayChatClient
from fabric.config.policy import PolicySettings
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import ConfigError
from fabric.domain.models import RunResult

from .handover import AfterNewSteps, ResumingChat, ResumingOffers
from .plan import ResumePlan
from .runlog import ResumingRunLog


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
    offers = ResumingOffers(
        recording, pack.tools, mcp, kit.tool_updates, plan.completed, state, run_dir
    )
    verifiers = recorded_verifiers(
        recording, pack, state=state, live=True, upto_step=plan.completed
    )
    brief = recorded_brief(recording)
    if brief is None and plan.completed == 0:
        brief = pack.brief  # cut off before the pack had looked: it looks now, and logs it
    resumed_pack = msgspec.structs.replace(
        pack,
        tools=tuple(offers.first()),
        verifiers=verifiers,
        brief=brief,
        after_calls={k: AfterNewSteps(h, plan.completed) for k, h in pack.after_calls.items()},
    )
    resuming = (
        ResumingChat(ReplayChatClient(recording, state), kit.chat, plan.completed, state)
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
    resumed_kit = msgspec.structs.replace(
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
    approver = RecordedApprover(recording.answers, then=control.approver, upto_step=plan.completed)
    return await execute_task(job, resumed_kit, msgspec.structs.replace(control, approver=approver))


__all__ = ["resume_task"]

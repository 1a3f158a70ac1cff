"""The part of ``Runner`` (runner.py) for runs that go on from a runlog: resumed
(``fabric resume``), recovered after their process died (a durable run, ADR 0020), or
delegated by another run, whose sub-run is followed again when the parent's call is made
again. The delegation tools are added here too, to every run of a pack that delegates.

What a plain run never needs (the resume and delegation modules) is imported inside the
methods that need it, so a run that only starts imports none of it."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from fabric.application.job import Control, RunRequest
from fabric.application.workspaces import check_workspace
from fabric.domain.errors import ConfigError
from fabric.domain.models import RunResult, RunStatus
from fabric.infrastructure.runlog import JsonlRunLog

from .run_request import check_search

if TYPE_CHECKING:
    from fabric.application.delegation import Parent
    from fabric.application.durable import Checkpoints
    from fabric.application.pack import Pack
    from fabric.application.resume import ResumePlan
    from fabric.config.loader import LoadedConfig
    from fabric.domain.clock import Clock
    from fabric.domain.secrets import Secrets
    from fabric.infrastructure.packs.registry import LoadedPack
    from fabric.infrastructure.runlog.writer import Observer
    from fabric.interfaces.model_resolver import ChatFactory
    from fabric.interfaces.run_setup import RunSetup


class Resumes:
    """Resuming, recovering and delegating runs, for ``Runner``, whose fields and methods
    these use (declared here for the type checker)."""

    loaded: LoadedConfig
    runs_dir: Path
    chat_factory: ChatFactory | None
    secrets: Secrets
    clock: Clock

    if TYPE_CHECKING:

        @property
        def setup(self) -> RunSetup: ...

        def runlog_path(self, run_id: str) -> Path: ...

        @staticmethod
        def read_runlog(path: Path) -> list[dict[str, Any]]: ...

        def pack_for(self, started: Mapping[str, Any]) -> LoadedPack: ...

        def _control(self, control: Control | None) -> Control: ...

        async def run(
            self,
            request: RunRequest,
            control: Control | None = None,
            checkpoints: Checkpoints | None = None,
        ) -> RunResult: ...

    def with_delegates(
        self, pack: Pack, loaded_pack: LoadedPack, parent: Parent | None, control: Control
    ) -> Pack:
        """``pack`` with a ``delegate_<name>`` tool for each pack it may delegate to, for a
        run started by a person (``parent`` None) or delegated by ``parent``."""
        names = loaded_pack.settings.delegates
        if not names:
            return pack
        from fabric.application.delegation import DelegateTool, Lineage

        own = loaded_pack.settings.limits.max_depth
        lineage = (
            Lineage(0, own, (), control.approver)
            if parent is None
            else Lineage(parent.depth, min(parent.max_depth, parent.depth + own),
                         parent.policies, control.approver)
        )  # fmt: skip
        packs = self.loaded.config.packs
        tools = [DelegateTool(n, packs[n].description, self.delegated, lineage) for n in names]
        return msgspec.structs.replace(pack, tools=(*pack.tools, *tools))

    async def delegated(self, pack: str, task: str, parent: Parent) -> RunResult:
        """A sub-run of ``pack`` doing ``task`` for ``parent`` (a delegation tool's call):
        in its workspace, cancelled with it, its asks answered by whoever answers the
        parent's, its spending counted against the parent's budget. When the call is made
        again (the parent resumed or recovered), the sub-run it started is followed: its
        result when it ended, else it goes on where it stopped."""
        import asyncio

        from fabric.application.resume import ended, logged_result

        control = Control(cancel=parent.cancel, approver=parent.approver, spending=parent.spending)
        path = self.runlog_path(parent.child_id)
        if not path.exists():
            request = RunRequest(
                pack, task, workspace=parent.workspace, parent=parent, run_id=parent.child_id
            )
            return await self.run(request, control)
        events = await asyncio.to_thread(self.read_runlog, path)
        end = ended(events)
        if end is not None and end.get("status") != RunStatus.CANCELLED.value:
            return logged_result(end, parent.child_id, str(path), default=RunStatus.FAILED)
        return await self.resume(events, path, control=control, parent=parent)

    async def _recovered(
        self, run_id: str, looks: Collection[str]
    ) -> ResumePlan | RunResult | None:
        """For a durable run whose runlog exists: how far it got (its process died), or, when
        the log holds its end (the process died as the run ended), how it ended. ``looks``:
        the pack's tools that only look (``recovered_plan``)."""
        import asyncio

        from fabric.application.resume import ended, logged_result, recovered_plan

        path = self.runlog_path(run_id)
        if not path.exists():
            return None
        events = await asyncio.to_thread(self.read_runlog, path)
        end = ended(events)
        if end is not None:
            return logged_result(end, run_id, str(path), default=RunStatus.FAILED)
        return recovered_plan(events, looks)

    def _reopen(self, path: Path, observers: Sequence[Observer]) -> JsonlRunLog:
        try:
            return JsonlRunLog.reopen(path, *observers, secrets=self.secrets, clock=self.clock)
        except OSError as exc:
            raise ConfigError(f"cannot append to {path}: {exc}") from exc

    async def resume(
        self,
        events: Sequence[Mapping[str, Any]],
        path: Path,
        *,
        max_steps: int | None = None,
        control: Control | None = None,
        parent: Parent | None = None,
    ) -> RunResult:
        """Continue the run whose runlog (at ``path``) holds ``events``: same run id, pack,
        workspace and model, appending to the same log (see ``application/resume/``).
        ``control.approver`` answers the policy's asks in the new steps (the redone ones get
        their recorded answers). A delegated run goes on only for its ``parent``, within what
        that allows (``delegated``)."""
        control = self._control(control)
        from fabric.application.resume import plan_resume, resume_task

        first = next((e for e in events if e.get("kind") == "run_started"), {})
        link = first.get("parent")
        if isinstance(link, Mapping) and (parent is None or link.get("run_id") != parent.run_id):
            raise ConfigError(
                f"run {first.get('run_id')} was delegated by run {link.get('run_id')}: it goes "
                "on only as part of that run, within its sandbox, policy and budget",
                hint=f"resume run {link.get('run_id')}: it goes on with this one",
            )
        plan = plan_resume(events, max_steps)
        started = plan.started
        loaded_pack = self.pack_for(started)
        if parent is not None:
            loaded_pack = loaded_pack.within(parent.sandbox)
        await check_search(str(started.get("pack", "")), loaded_pack)
        folder = Path(str(started.get("workspace", "")))
        if not folder.is_dir():
            raise ConfigError(
                f"the run's workspace {folder} is not a folder any more",
                hint="restore the workspace, or start a new run",
            )
        folder = check_workspace(folder, self.loaded, runs_dir=self.runs_dir)
        model = started.get("model") or None
        backend = (started.get("backend") or {}).get("name") if self.chat_factory is None else None

        def open_log() -> JsonlRunLog:
            return self._reopen(path, control.events())

        async with self.setup.session(loaded_pack, folder, backend, model, open_log) as session:
            return await resume_task(
                plan,
                pack=self.with_delegates(
                    session.pack_of(loaded_pack, plan.events, mcp=False),  # resume_task's own
                    loaded_pack,
                    parent,
                    control,
                ),
                workspace=folder,
                kit=session.kit,
                control=control,
                run_dir=path.parent,
                sandbox=loaded_pack.settings.sandbox,
                mcp=session.tools,
                meta=session.meta(),
                outer_policies=parent.policies if parent is not None else (),
            )

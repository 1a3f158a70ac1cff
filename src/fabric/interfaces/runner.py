"""``Runner``: runs tasks with the packs of one config, the same for every way in (the CLI, the
HTTP task service, the eval, replay). Built by ``compose.build_runner``."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabric.application.additions import Addition, joined, restored
from fabric.application.commands import CommandRunner
from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, RunRequest
from fabric.application.ports import RunObserver, Tool
from fabric.application.resolve import Resolution
from fabric.application.workspaces import check_workspace
from fabric.config.loader import LoadedConfig
from fabric.config.schema import Budget, Limits, ToolSearchSettings
from fabric.domain.clock import Clock, utc_now
from fabric.domain.errors import ConfigError
from fabric.domain.models import RunResult, RunStatus
from fabric.domain.secrets import Secrets
from fabric.infrastructure.llm.backends import Backends
from fabric.infrastructure.packs.registry import LoadedPack, load_pack
from fabric.infrastructure.runlog import (
    JsonlRunLog,
    call_logged,
    new_run_id,
    read_runlog,
    runlog_path,
)
from fabric.infrastructure.runlog.writer import Observer
from fabric.infrastructure.sandbox import command_runner
from fabric.infrastructure.tools.search_check import search_problem
from fabric.interfaces.model_resolver import ChatFactory, ModelResolver
from fabric.interfaces.run_setup import CommandFactory, RunSetup

if TYPE_CHECKING:  # a run needs none: loaded when a replay, resume or durable run asks
    from fabric.application.delegation import Parent
    from fabric.application.durable import Checkpoints
    from fabric.application.pack import Pack
    from fabric.application.replay import Recording, ReplayReport
    from fabric.application.resume import ResumePlan
    from fabric.infrastructure.mcp.toolbox import McpToolbox


@dataclass
class Runner:
    """Runs tasks with the packs of one config. ``aclose`` stops what it started."""

    loaded: LoadedConfig
    runs_dir: Path
    backends: Backends
    chat_factory: ChatFactory | None = None
    protected: tuple[Path, ...] = ()
    """Places file tools may neither read nor write, besides the runs folder."""
    secrets: Secrets = field(default_factory=Secrets)
    """Redacted from every runlog line and artifact (``known_secrets``)."""
    observers: tuple[RunObserver, ...] = ()
    """Watch every run, besides those a run's own ``Control`` names."""
    make_commands: CommandFactory = command_runner
    clock: Clock = utc_now
    """Stamps runlog events (``ts``)."""
    _packs: dict[str, LoadedPack] = field(default_factory=dict)
    models: ModelResolver = field(init=False)
    """How each run's model is chosen and opened."""
    setup: RunSetup = field(init=False)
    """How each run's kit is set up."""

    def __post_init__(self) -> None:
        self.models = ModelResolver(self.loaded, self.backends, self.chat_factory)
        self.setup = RunSetup(
            self.loaded, self.backends, self.models, self.protected_paths, self.make_commands
        )

    def runlog_path(self, run_id: str) -> Path:
        """The runlog of run ``run_id`` in this runner's runs folder."""
        return runlog_path(self.runs_dir, run_id)

    @staticmethod
    def new_run_id() -> str:
        return new_run_id()

    @staticmethod
    def read_runlog(path: Path) -> list[dict[str, Any]]:
        """The events of the runlog at ``path`` (its unreadable lines left out)."""
        return read_runlog(path)[0]

    @staticmethod
    def call_logged(path: Path, call_id: str) -> bool:
        return call_logged(path, call_id)

    def pack(self, name: str) -> LoadedPack:
        if name not in self._packs:
            self._packs[name] = load_pack(self.loaded, name)
        return self._packs[name]

    def pack_for(self, started: Mapping[str, Any]) -> LoadedPack:
        """The pack a recorded run (its ``run_started``) ran with, with the task's own
        verification, for resuming or replaying it."""
        verify = started.get("verify_override")
        return self.pack(str(started.get("pack", ""))).for_run(
            verify if isinstance(verify, str) else None
        )

    def model_for(self, loaded_pack: LoadedPack, override: str | None = None) -> str:
        """The model name a pack asks for (see ``ModelResolver.model_for``)."""
        return self.models.model_for(loaded_pack.settings.model, override)

    async def resolve(
        self,
        pack_name: str,
        *,
        backend: str | None = None,
        model: str | None = None,
        fresh: bool = False,
    ) -> Resolution:
        """Which backend and model a run of this pack would use, and why
        (``ModelResolver.resolve``)."""
        return await self.models.resolve(
            self.pack(pack_name).settings.model, backend=backend, model=model, fresh=fresh
        )

    async def admit(
        self, request: RunRequest, *, roots: Sequence[Path] = (), remote: bool = False
    ) -> Path:
        """Check a run before it starts or is queued, the same for every way in, and return
        its workspace folder: the backend and pack exist, the task is not empty, the workspace
        is one a run may use (under ``roots`` when given), the task's own ``verify`` parses and,
        for a ``remote`` caller, names one of the pack's allowed programs (the config, not a
        token holder, decides what runs), and the pack's web_search can work."""
        if request.backend is not None and request.backend != "auto":
            self.backends.settings(request.backend)  # unknown: a ConfigError listing the known
        if not request.task.strip():
            raise ConfigError("the task is empty", hint="say what the pack should do")
        loaded_pack = self.pack(request.pack)  # unknown or broken: a ConfigError naming it
        folder = check_workspace(
            request.workspace or Path.cwd(), self.loaded, runs_dir=self.runs_dir, roots=roots
        )
        _check_verify(loaded_pack, request.verify, remote=remote)
        await _check_search(request.pack, loaded_pack)
        return folder

    async def run(
        self,
        request: RunRequest,
        control: Control | None = None,
        checkpoints: Checkpoints | None = None,
    ) -> RunResult:
        """Run one task to its end and return the result; the runlog is on disk.
        ``control`` cancels it, answers the calls the pack's policy asks about (no approver:
        they are refused) and watches it. With ``checkpoints`` the run is durable (ADR 0020):
        each outside effect is a recorded step, and a run whose runlog exists already is one
        whose process died, driven again from its recorded steps into the same runlog."""
        control = self._control(control)
        folder = await self.admit(request)
        loaded_pack = self.pack(request.pack).for_run(request.verify)
        parent = request.parent
        if parent is not None:
            loaded_pack = loaded_pack.within(parent.sandbox)
        limits = _limits(loaded_pack.settings.limits, request.max_steps, request.budget)
        run_id = request.run_id or new_run_id()
        recovered = None
        if checkpoints is not None:
            looks = {t.spec.name for t in loaded_pack.pack.tools if t.spec.reads_only}
            recovered = await self._recovered(run_id, looks)
        if isinstance(recovered, RunResult):
            return recovered
        watching = control.events()

        def open_log() -> JsonlRunLog:
            if recovered is not None:
                return self._reopen(self.runlog_path(run_id), watching)
            return self.open_runlog(run_id, watching)

        async with self.setup.session(
            loaded_pack, folder, request.backend, request.model, open_log
        ) as session:
            started = recovered.started if recovered is not None else None
            pack = self.with_delegates(
                session.pack_of(loaded_pack, started), loaded_pack, parent, control
            )
            job = Job(
                request.task,
                pack,
                session.runlog.run_id,
                folder,
                limits,
                loaded_pack.settings.sandbox,
                meta={
                    **self.setup.meta(session.resolution),
                    **_verify_meta(request.verify),
                    **session.meta(),
                    **({"durable": True} if checkpoints is not None else {}),
                    **({"parent": parent.as_json()} if parent is not None else {}),
                },
                outer_policies=parent.policies if parent is not None else (),
                tool_search=_tool_search(loaded_pack, pack, session.tools),
            )
            kit = session.kit
            if checkpoints is not None:
                from fabric.application.durable import checkpointed
                from fabric.application.replay.divergence import ReplayState
                from fabric.application.resume import ResumingRunLog

                state = ReplayState()
                job, kit, control = checkpointed(job, kit, control, checkpoints, state)
                if recovered is not None:  # what the log holds already is not written again
                    kit = dataclasses.replace(
                        kit, runlog=ResumingRunLog(kit.runlog, recovered, state)
                    )
            return await execute_task(job, kit, control)

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
        return dataclasses.replace(pack, tools=(*pack.tools, *tools))

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
        workspace and model, appending to the same log (see ``application/resume.py``).
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
        await _check_search(str(started.get("pack", "")), loaded_pack)
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
                    joined(loaded_pack.pack, restored(session.additions, plan.events)),
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

    @property
    def protected_paths(self) -> tuple[Path, ...]:
        """What tools may neither read nor write: the runs folder and ``protected``."""
        return (self.runs_dir, *self.protected)

    @staticmethod
    def starts_commands(loaded_pack: LoadedPack) -> bool:
        """Whether a run of the pack starts processes (so it needs a confined command runner)."""
        return loaded_pack.starts_commands

    def read_only_in(self, workspace: Path) -> tuple[Path, ...]:
        """The host code inside ``workspace`` now (``RunSetup.read_only_in``)."""
        return self.setup.read_only_in(workspace)

    def commands_for(self, loaded_pack: LoadedPack, workspace: Path) -> CommandRunner | None:
        """The pack's confined command runner (``RunSetup.commands_for``)."""
        return self.setup.commands_for(loaded_pack, workspace)

    def additions(self, loaded_pack: LoadedPack, workspace: Path) -> tuple[Addition, ...]:
        """What fabric's conventions add to a run of the pack (``RunSetup.additions``)."""
        return self.setup.additions(loaded_pack, workspace)

    def mcp_toolbox(self, loaded_pack: LoadedPack, workspace: Path) -> McpToolbox:
        """The pack's MCP servers for one run in ``workspace``, not started yet."""
        return self.setup.mcp_toolbox(loaded_pack, workspace, self.read_only_in(workspace))

    def pack_summary(self, name: str) -> dict[str, Any]:
        """A pack as ``fabric packs`` and ``GET /packs`` list it: name, description, tools,
        model key and where it comes from."""
        lp = self.pack(name)
        return {
            "name": name,
            "description": lp.pack.description,
            "tools": self.with_delegates(lp.pack, lp, None, Control()).tool_names(),
            "model": lp.settings.model,
            "origin": lp.origin,
        }

    async def replay(
        self, path: Path, *, live: bool = False, recording: Recording | None = None
    ) -> ReplayReport:
        """Re-drive the run recorded at ``path`` (``recording``: already read from it) with
        its pack as configured now, as a new run here; ``live``: the real tools, on a copy
        of its workspace (ADR 0010)."""
        from .replays import replay_run

        return await replay_run(self, path, live=live, recording=recording)

    def open_runlog(self, run_id: str, observers: Sequence[Observer]) -> JsonlRunLog:
        """A new run's runlog in the runs folder, or a ConfigError saying how to fix it."""
        try:
            return JsonlRunLog(
                self.runs_dir, run_id, *observers, secrets=self.secrets, clock=self.clock
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot create the runlog folder in {self.runs_dir}: {exc}",
                hint="make runs_dir writable, or point runs_dir in fabric.yaml elsewhere",
            ) from exc

    def _control(self, control: Control | None) -> Control:
        """A run's control with this runner's own observers added."""
        control = control or Control()
        if not self.observers:
            return control
        return dataclasses.replace(control, observers=(*self.observers, *control.observers))

    async def aclose(self) -> None:
        await self.backends.aclose()


async def _check_search(name: str, loaded_pack: LoadedPack) -> None:
    """Refuse a run of a pack whose web_search cannot work: every search would fail steps
    later, after the model was loaded and asked."""
    problem = await search_problem(name, loaded_pack)
    if problem is not None:
        raise problem


def _tool_search(loaded_pack: LoadedPack, pack: Pack, mcp: Sequence[Tool]) -> ToolSearchSettings:
    """The pack's tool search for a run of ``pack`` (ADR 0028): the tools that are not its
    MCP servers' are offered always, unless the settings have them searched too."""
    served = {t.spec.name for t in mcp}
    own = [t.spec.name for t in pack.tools if t.spec.name not in served]
    return loaded_pack.settings.tool_search.for_run(own)


def _check_verify(loaded_pack: LoadedPack, verify: str | None, *, remote: bool) -> None:
    """A command that cannot be parsed is refused now, not when the task runs. A remote
    caller's check may use only what the pack's commands may (its allowed programs)."""
    loaded_pack.for_run(verify)
    if not remote or verify is None or verify.strip() == "off":
        return
    program = shlex.split(verify)[0]
    allowed = loaded_pack.settings.sandbox.allowed_commands
    if program not in allowed:
        raise ConfigError(
            f"verify: {program!r} is not one of the allowed commands of pack "
            f"{loaded_pack.pack.name!r}, so a task may not run it",
            hint=f"use one of: {', '.join(allowed)}; or 'off'" if allowed else "use 'off'",
        )


def _verify_meta(verify: str | None) -> dict[str, str]:
    """A task's own verification, kept in ``run_started`` so a resumed run checks the same."""
    return {} if verify is None else {"verify_override": verify}


def _limits(limits: Limits, max_steps: int | None, budget: Budget | None = None) -> Limits:
    """The pack's limits with a run's own: its step limit, and its budget (tightening)."""
    if budget is not None:
        limits = limits.model_copy(update={"budget": limits.budget.tightened(budget)})
    if max_steps is None:
        return limits
    if max_steps < 1:
        raise ConfigError("--max-steps must be at least 1")
    return limits.model_copy(update={"max_steps": max_steps})

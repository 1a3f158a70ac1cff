"""``Runner``: runs tasks with the packs of one config, the same for every way in (the CLI, the
HTTP task service, the eval, replay). Built by ``compose.build_runner``. Resuming, recovering
and delegating runs: ``resumes.py``; the checks and settings of one request:
``run_request.py``."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field
from msgspec.structs import replace

from fabric.application.additions import Addition
from fabric.application.commands import CommandRunner
from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, RunRequest
from fabric.application.ports import RunObserver
from fabric.application.resolve import Resolution
from fabric.application.workspaces import check_workspace
from fabric.config.loader import LoadedConfig
from fabric.domain.clock import Clock, utc_now
from fabric.domain.errors import ConfigError
from fabric.domain.models import RunResult
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
from fabric.interfaces.model_resolver import ChatFactory, ModelResolver
from fabric.interfaces.run_setup import CommandFactory, RunSetup

from .resumes import Resumes
from .run_request import check_search, check_verify, run_limits, run_tool_search, verify_meta

if TYPE_CHECKING:  # a run needs none: loaded when a replay, resume or durable run asks
    from fabric.application.durable import Checkpoints
    from fabric.application.replay import Recording, ReplayReport
    from fabric.infrastructure.mcp.toolbox import McpToolbox


class Runner(Struct, Resumes, dict=True):
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

    @functools.cached_property
    def models(self) -> ModelResolver:
        """How each run's model is chosen and opened."""
        return ModelResolver(self.loaded, self.backends, self.chat_factory)

    @functools.cached_property
    def setup(self) -> RunSetup:
        """How each run's kit is set up."""
        return RunSetup(
            self.loaded,
            self.backends,
            self.models,
            self.protected_paths,
            self.make_commands,
            secrets=self.secrets,
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
        check_verify(loaded_pack, request.verify, remote=remote)
        await check_search(request.pack, loaded_pack)
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
        limits = run_limits(loaded_pack.settings.limits, request.max_steps, request.budget)
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
            recorded = [recovered.started] if recovered is not None else None
            pack = self.with_delegates(
                session.pack_of(loaded_pack, recorded), loaded_pack, parent, control
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
                    **verify_meta(request.verify),
                    **session.meta(),
                    **({"durable": True} if checkpoints is not None else {}),
                    **({"parent": parent.as_json()} if parent is not None else {}),
                },
                outer_policies=parent.policies if parent is not None else (),
                tool_search=run_tool_search(loaded_pack, pack, session.tools),
            )
            kit = session.kit
            if checkpoints is not None:
                from fabric.application.durable import checkpointed
                from fabric.application.replay.divergence import ReplayState
                from fabric.application.resume import ResumingRunLog

                state = ReplayState()
                job, kit, control = checkpointed(job, kit, control, checkpoints, state)
                if recovered is not None:  # what the log holds already is not written again
                    kit = replace(kit, runlog=ResumingRunLog(kit.runlog, recovered, state))
            return await execute_task(job, kit, control)

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

    def additions(
        self, loaded_pack: LoadedPack, workspace: Path, *, replay: bool = False
    ) -> tuple[Addition, ...]:
        """What fabric's conventions add to a run of the pack (``RunSetup.additions``)."""
        return self.setup.additions(loaded_pack, workspace, replay=replay)

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
        return replace(control, observers=(*self.observers, *control.observers))

    async def aclose(self) -> None:
        await self.backends.aclose()

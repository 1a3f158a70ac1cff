"""The one composition root: config in, a ``Runner`` out. The CLI, the HTTP service and the
tests all build runs here, so they behave the same."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import fabric
from fabric.application.commands import CommandRunner
from fabric.application.execute_task import execute_task
from fabric.application.ports import Approver, ChatClient, DeltaSink
from fabric.application.replay import Recording, ReplayReport
from fabric.application.resolve import Resolution
from fabric.application.resume import plan_resume, resume_task
from fabric.application.workspaces import check_workspace
from fabric.config.loader import LoadedConfig
from fabric.config.schema import Limits
from fabric.domain.errors import ConfigError, FabricError, SandboxError
from fabric.domain.models import RunResult
from fabric.domain.secrets import Secrets
from fabric.infrastructure.llm.backends import Backends, base_url_of
from fabric.infrastructure.packs import git_audit, run_ledger
from fabric.infrastructure.packs.registry import BUILTIN_BUILDERS, LoadedPack, load_pack
from fabric.infrastructure.runlog import JsonlRunLog, new_run_id, runlog_path
from fabric.infrastructure.runlog.writer import Observer
from fabric.infrastructure.sandbox import (
    HostCode,
    SandboxedCommands,
    command_runner,
    host_code,
)
from fabric.interfaces.model_resolver import ChatFactory, ModelResolver

_log = logging.getLogger(__name__)


def redact_url(url: str) -> str:
    """A URL without user:password, safe for logs."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit(parts._replace(netloc=netloc))
    return url


@dataclass(frozen=True, slots=True)
class _Session:
    runlog: JsonlRunLog
    chat: ChatClient | None
    commands: CommandRunner | None
    start_error: FabricError | None
    resolution: Resolution | None
    read_only: tuple[Path, ...]
    """Host code in the workspace as the run found it: tools and commands only read it."""


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
    _packs: dict[str, LoadedPack] = field(default_factory=dict)
    models: ModelResolver = field(init=False)
    """How each run's model is chosen and opened."""
    _host_code: HostCode | None = None

    def __post_init__(self) -> None:
        self.models = ModelResolver(self.loaded, self.backends, self.chat_factory)

    def runlog_path(self, run_id: str) -> Path:
        """The runlog of run ``run_id`` in this runner's runs folder."""
        return runlog_path(self.runs_dir, run_id)

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

    async def run(
        self,
        pack_name: str,
        task: str,
        *,
        model: str | None = None,
        backend: str | None = None,
        workspace: Path | None = None,
        max_steps: int | None = None,
        run_id: str | None = None,
        observers: Sequence[Observer] = (),
        on_delta: DeltaSink | None = None,
        cancel: asyncio.Event | None = None,
        approver: Approver | None = None,
        verify: str | None = None,
    ) -> RunResult:
        """Run one task to its end and return the result; the runlog is on disk.
        ``approver`` answers the calls the pack's policy asks about (None: they are refused).
        ``verify`` checks this task's work with a command of its own, or 'off' (None: the
        pack's ``verify`` settings)."""
        folder = check_workspace(workspace or Path.cwd(), self.loaded, runs_dir=self.runs_dir)
        if not task.strip():
            raise ConfigError("the task is empty", hint="say what the pack should do")
        loaded_pack = self.pack(pack_name).for_run(verify)
        limits = _limits(loaded_pack.settings.limits, max_steps)

        def open_log() -> JsonlRunLog:
            return self.open_runlog(run_id or new_run_id(), observers)

        async with self._session(loaded_pack, folder, backend, model, open_log) as session:
            return await execute_task(
                task,
                pack=loaded_pack.pack,
                chat=session.chat,
                runlog=session.runlog,
                run_id=session.runlog.run_id,
                workspace=folder,
                sandbox=loaded_pack.settings.sandbox,
                limits=limits,
                cancel=cancel,
                protected=self.protected_paths,
                read_only=session.read_only,
                on_delta=on_delta,
                prices=self._prices(),
                meta={**self._meta(session.resolution), **_verify_meta(verify)},
                start_error=session.start_error,
                commands=session.commands,
                approver=approver,
            )

    async def resume(
        self,
        events: Sequence[Mapping[str, Any]],
        path: Path,
        *,
        max_steps: int | None = None,
        observers: Sequence[Observer] = (),
        on_delta: DeltaSink | None = None,
        cancel: asyncio.Event | None = None,
        approver: Approver | None = None,
    ) -> RunResult:
        """Continue the run whose runlog (at ``path``) holds ``events``: same run id, pack,
        workspace and model, appending to the same log (see ``application/resume.py``).
        ``approver`` answers the policy's asks in the new steps (the redone ones get their
        recorded answers)."""
        plan = plan_resume(events, max_steps)
        started = plan.started
        loaded_pack = self.pack_for(started)
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
            try:
                return JsonlRunLog.reopen(path, *observers, secrets=self.secrets)
            except OSError as exc:
                raise ConfigError(f"cannot append to {path}: {exc}") from exc

        async with self._session(loaded_pack, folder, backend, model, open_log) as session:
            return await resume_task(
                plan,
                pack=loaded_pack.pack,
                chat=session.chat,
                runlog=session.runlog,
                workspace=folder,
                run_dir=path.parent,
                sandbox=loaded_pack.settings.sandbox,
                cancel=cancel,
                protected=self.protected_paths,
                read_only=session.read_only,
                on_delta=on_delta,
                prices=self._prices(),
                start_error=session.start_error,
                commands=session.commands,
                approver=approver,
            )

    @contextlib.asynccontextmanager
    async def _session(
        self,
        loaded_pack: LoadedPack,
        workspace: Path,
        backend: str | None,
        model: str | None,
        open_log: Callable[[], JsonlRunLog],
    ) -> AsyncIterator[_Session]:
        """What a run or a resumed run needs, set up in order (model, confinement, runlog,
        chat client), with any failure kept as the run's start error so it still gets a
        runlog; closed again afterwards, whatever happened."""
        model_key = loaded_pack.settings.model
        resolved = await self.models.try_resolve(model_key, backend, model)
        resolution = resolved[0]
        read_only, commands, unconfined = await asyncio.to_thread(
            self._confinement, loaded_pack, workspace
        )
        runlog = open_log()
        started = time.time()
        unrecorded = _record_start(runlog.run_id, workspace)
        chat: ChatClient | None = None
        try:
            chat, unresolved = await self.models.open_chat(model_key, model, resolved, runlog)
            start_error = unrecorded or unconfined or unresolved
            yield _Session(runlog, chat, commands, start_error, resolution, read_only)
        finally:
            runlog.close()
            if chat is not None:
                with contextlib.suppress(Exception):  # the result stands
                    await chat.aclose()
            if isinstance(commands, SandboxedCommands) and commands.unaudited:  # cut short
                for line in await asyncio.to_thread(git_audit.sweep, workspace, started, read_only):
                    _log.warning("fabric removed %s", line)
            if unrecorded is None:
                with contextlib.suppress(OSError):  # an open window only makes fabric stricter
                    run_ledger.closed(runlog.run_id)

    @property
    def protected_paths(self) -> tuple[Path, ...]:
        """What tools may neither read nor write: the runs folder and ``protected``."""
        return (self.runs_dir, *self.protected)

    def pack_summary(self, name: str) -> dict[str, Any]:
        """A pack as ``fabric packs`` and ``GET /packs`` list it: name, description, tools and
        model key."""
        lp = self.pack(name)
        return {
            "name": name,
            "description": lp.pack.description,
            "tools": lp.pack.tool_names(),
            "model": lp.settings.model,
        }

    @staticmethod
    def starts_commands(loaded_pack: LoadedPack) -> bool:
        """Whether a run of the pack starts processes (so it needs a confined command runner)."""
        return loaded_pack.starts_commands

    def read_only_in(self, workspace: Path) -> tuple[Path, ...]:
        """The host code inside ``workspace`` now: what fabric or the user's tools execute
        later (this config, its pack modules, virtualenvs, .git config and hooks, ...), which
        a run may read but not change (ADR 0013)."""
        return tuple(self._host().in_workspace(workspace))

    def _host(self) -> HostCode:
        if self._host_code is None:
            source = Path(self.loaded.source)
            modules = [
                BUILTIN_BUILDERS.get(p.builder, p.builder).partition(":")[0]
                for p in self.loaded.config.packs.values()
            ]
            self._host_code = host_code(
                source if source.is_file() else None, self.loaded.base_dir, modules
            )
        return self._host_code

    def commands_for(
        self, loaded_pack: LoadedPack, workspace: Path, read_only: tuple[Path, ...] | None = None
    ) -> CommandRunner | None:
        """The confined command runner for a pack that starts processes (None for one that
        starts none); SandboxError when this machine cannot confine it as configured.
        ``read_only``: the workspace's host code (default: as found now)."""
        if not self.starts_commands(loaded_pack):
            return None
        self._host().check(workspace)
        if read_only is None:
            read_only = self.read_only_in(workspace)
        return command_runner(
            loaded_pack.settings.sandbox, workspace, self.protected_paths, read_only
        )

    def _confinement(
        self, loaded_pack: LoadedPack, workspace: Path
    ) -> tuple[tuple[Path, ...], CommandRunner | None, FabricError | None]:
        """The workspace's host code and ``commands_for`` it, or why the commands cannot be
        had (the run is then recorded as failed, with the hint to install bubblewrap). Called
        in a thread: it looks through the workspace, and the first call probes the machine
        (tens of ms)."""
        read_only = self.read_only_in(workspace)
        try:
            return read_only, self.commands_for(loaded_pack, workspace, read_only), None
        except SandboxError as exc:
            return read_only, None, exc

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
            return JsonlRunLog(self.runs_dir, run_id, *observers, secrets=self.secrets)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the runlog folder in {self.runs_dir}: {exc}",
                hint="make runs_dir writable, or point runs_dir in fabric.yaml elsewhere",
            ) from exc

    def _prices(self) -> dict[str, tuple[float | None, float | None]]:
        options = self.loaded.config.llm.model_options
        return {name: (o.input_price, o.output_price) for name, o in options.items()}

    def _meta(self, resolution: Resolution | None) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "fabric_version": fabric.__version__,
            "config": self.loaded.source,
            "sampling": {"temperature": self.loaded.config.llm.temperature},
        }
        if resolution is not None:
            meta["sampling"] = {"temperature": self.backends.temperature(resolution.model)}
            settings = self.backends.settings(resolution.backend)
            url = base_url_of(settings)
            meta["backend"] = {
                "name": resolution.backend,
                "kind": settings.kind,
                "base_url": redact_url(url) if url else None,
            }
            meta["selection"] = {
                "backend": resolution.backend,
                "model": resolution.model,
                "reason": resolution.reason,
                "skipped": [{"backend": b, "why": w} for b, w in resolution.skipped],
            }
        return meta

    async def aclose(self) -> None:
        await self.backends.aclose()


def _record_start(run_id: str, workspace: Path) -> FabricError | None:
    """Enter the run in the run ledger before anything of it runs (or say why it cannot be:
    the run then fails, for without the ledger fabric could later load what it planted)."""
    try:
        run_ledger.opened(run_id, str(workspace))
    except OSError as exc:
        return ConfigError(
            f"cannot record the run in {run_ledger.ledger_path()}: {exc.strerror or exc}",
            hint="make ~/.config/fabric writable for your user (fabric keeps its run ledger "
            "there, see ADR 0013)",
        )
    return None


def _verify_meta(verify: str | None) -> dict[str, str]:
    """A task's own verification, kept in ``run_started`` so a resumed run checks the same."""
    return {} if verify is None else {"verify_override": verify}


def _limits(limits: Limits, max_steps: int | None) -> Limits:
    if max_steps is None:
        return limits
    if max_steps < 1:
        raise ConfigError("--max-steps must be at least 1")
    return limits.model_copy(update={"max_steps": max_steps})


def build_runner(
    loaded: LoadedConfig,
    *,
    chat_factory: ChatFactory | None = None,
    runs_dir: Path | None = None,
    on_status: Callable[[str], None] | None = None,
    secrets: Secrets | None = None,
    protected: Sequence[Path] = (),
) -> Runner:
    """Compose a runner; every default is built here, none at import time. Tools never read
    or write the runs folder, the service's files (``service_files``) or ``protected``."""
    secrets = known_secrets(loaded) if secrets is None else secrets
    return Runner(
        loaded=loaded,
        runs_dir=runs_dir or loaded.runs_dir,
        backends=Backends(loaded.config.llm, on_status=on_status, secrets=secrets),
        chat_factory=chat_factory,
        protected=(*service_files(loaded), *embedded_files(loaded), *protected),
        secrets=secrets,
    )


def embedded_files(loaded: LoadedConfig) -> tuple[Path, ...]:
    """The shared embedded model servers' folder (their keys and the locks that keep them
    alive), when the config has an embedded backend: no run's command may read it or hold
    its locks. Made now (private), so it is hidden from the first run on."""
    if not any(b.kind == "embedded" for b in loaded.config.llm.backends.values()):
        return ()
    from fabric.infrastructure.llm.embedded_state import ensure_private_dir, state_dir

    try:
        return (ensure_private_dir(state_dir()),)
    except OSError:
        return (state_dir(),)  # the server cannot start there either; it will say why


def service_files(loaded: LoadedConfig) -> tuple[Path, ...]:
    """The HTTP service's task database (first; with its WAL files) and token file: kept from
    every run's tools, also a CLI run whose workspace holds them."""
    serve = loaded.config.serve
    database = (loaded.base_dir / serve.database).resolve()
    return (
        database,
        database.with_name(database.name + "-wal"),
        database.with_name(database.name + "-shm"),
        Path(serve.token_file).expanduser().resolve(),
    )


def known_secrets(loaded: LoadedConfig, *also: str) -> Secrets:
    """What fabric never writes out: every backend's API key (whatever its ``api_key_env``
    variables are called), the environment's secret-looking variables, and ``also`` (e.g.
    the HTTP service's token)."""
    return Secrets.from_env(os.environ, loaded.config.llm.api_key_names, also=also)

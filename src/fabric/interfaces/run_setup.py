"""What a run works with, its ``Kit``, set up in order for each run and closed again: the
model (backend and client), the confinement of its commands (with the host code it may only
read), the runlog, and the run ledger entry; and the ``run_started`` facts about them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from msgspec import Struct, field
from msgspec.structs import replace

import fabric
from fabric.application.additions import Addition, as_recorded, recorded
from fabric.application.commands import CommandRunner
from fabric.application.job import Kit
from fabric.application.pack import Pack
from fabric.application.ports import ChatClient, Tool
from fabric.application.resolve import Resolution
from fabric.config.loader import LoadedConfig
from fabric.config.schema import AnthropicBackend, PackSettings, SandboxSettings
from fabric.domain.errors import ConfigError, FabricError, McpError, SandboxError
from fabric.domain.secrets import Secrets
from fabric.infrastructure.additions import Where, additions_for
from fabric.infrastructure.llm.backends import Backends, base_url_of, window_of
from fabric.infrastructure.packs import git_audit, run_ledger
from fabric.infrastructure.packs.registry import BUILTIN_BUILDERS, LoadedPack
from fabric.infrastructure.runlog import JsonlRunLog
from fabric.infrastructure.sandbox import HostCode, SandboxedCommands, command_runner, host_code
from fabric.interfaces.model_resolver import ModelResolver

if TYPE_CHECKING:  # loaded only for a pack that uses MCP servers
    from fabric.infrastructure.mcp.connection import Note
    from fabric.infrastructure.mcp.toolbox import McpToolbox

_log = logging.getLogger(__name__)

Confinement = tuple[
    tuple[Path, ...], "CommandRunner | None", "FabricError | None", tuple[Addition, ...]
]
"""A run's host code (read only), its command runner or why it has none, and its additions."""

CommandFactory = Callable[
    [SandboxSettings, Path, tuple[Path, ...], tuple[Path, ...], tuple[Path, ...]], CommandRunner
]
"""Makes a pack's command runner from its sandbox settings, the workspace, the protected
places, the host code it may only read and the folders outside the workspace it may read (the
configured skill folders) (default: ``command_runner``, the OS sandbox)."""


def redact_url(url: str) -> str:
    """A URL without user:password, safe for logs."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit(parts._replace(netloc=netloc))
    return url


class Session(Struct, frozen=True):
    """One run's kit, and how its model was chosen."""

    kit: Kit
    runlog: JsonlRunLog
    resolution: Resolution | None
    tools: tuple[Tool, ...] = ()
    """The tools of the pack's MCP servers, started for this run (ADR 0019)."""
    mcp: dict[str, Any] | None = None
    """For ``run_started``: the MCP servers and what each of their tool names stands for."""
    additions: tuple[Addition, ...] = ()
    """What fabric's conventions add to this run (ADR 0025)."""

    def pack_of(
        self,
        loaded_pack: LoadedPack,
        events: Sequence[Mapping[str, Any]] | None = None,
        *,
        mcp: bool = True,
    ) -> Pack:
        """The pack with this run's additions and, with ``mcp``, its MCP servers' tools.
        ``events``: the events of a run driven again (its ``run_started``, then those of the
        steps driven again), which tell the model what it told it then (``as_recorded``)."""
        pack = as_recorded(loaded_pack.pack, self.additions, events)
        if not mcp or not self.tools:
            return pack
        return replace(pack, tools=(*pack.tools, *self.tools))

    def meta(self) -> dict[str, Any]:
        mcp = {} if self.mcp is None else {"mcp": self.mcp}
        return {**mcp, **recorded(self.additions)}


class RunSetup(Struct):
    """Sets up each run's kit for one config."""

    loaded: LoadedConfig
    backends: Backends
    models: ModelResolver
    protected_paths: tuple[Path, ...]
    """What tools may neither read nor write (the runs folder first)."""
    make_commands: CommandFactory = command_runner
    secrets: Secrets = field(default_factory=Secrets)
    """What fabric never writes out: a convention that keeps text beyond the run redacts it."""
    _host_code: HostCode | None = None

    @contextlib.asynccontextmanager
    async def session(
        self,
        loaded_pack: LoadedPack,
        workspace: Path,
        backend: str | None,
        model: str | None,
        open_log: Callable[[], JsonlRunLog],
    ) -> AsyncIterator[Session]:
        """What a run or a resumed run needs, set up in order (model, confinement, runlog,
        chat client), with any failure kept as the run's start error so it still gets a
        runlog; closed again afterwards, whatever happened."""
        model_key = loaded_pack.settings.model
        resolved = await self.models.try_resolve(model_key, backend, model)
        resolution = resolved[0]
        started = time.time()
        (
            (read_only, commands, unconfined, additions),
            (runlog, unrecorded),
        ) = await self._confined_and_logged(loaded_pack, workspace, open_log)
        chat: ChatClient | None = None
        toolbox: McpToolbox | None = None
        tools: tuple[Tool, ...] = ()
        try:
            chat, unresolved = await self.models.open_chat(model_key, model, resolved, runlog)
            start_error = unrecorded or unconfined or unresolved
            if loaded_pack.settings.mcp and start_error is None:
                toolbox = self.mcp_toolbox(loaded_pack, workspace, read_only)
                try:
                    tools = tuple(await toolbox.open())
                except McpError as exc:
                    start_error = exc
            window, reply = self._window(resolution)
            kit = Kit(
                chat,
                runlog,
                commands,
                self.protected_paths,
                read_only,  # the host code in the workspace as the run found it
                self.prices(),
                start_error,
                tool_updates=toolbox,
                context_size=window,
                reply_tokens=reply,
            )
            mcp = toolbox.meta() if toolbox else None
            yield Session(kit, runlog, resolution, tools, mcp, additions)
        finally:
            if toolbox is not None:  # the servers stop with the run
                await toolbox.aclose()
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

    async def _confined_and_logged(
        self, loaded_pack: LoadedPack, workspace: Path, open_log: Callable[[], JsonlRunLog]
    ) -> tuple[Confinement, tuple[JsonlRunLog, FabricError | None]]:
        """``_confinement``, and the run's opened runlog with the run entered in the run
        ledger (``_logged``), made side by side in two threads: neither needs the other, and
        both wait on the kernel (a run's new folder and file cost about a millisecond of it
        on ext4). Whatever fails first is raised; the runlog of a run that did not get past
        this (its confinement failed in some unforeseen way, or it was cancelled) is
        discarded, as if it had never been opened, and its ledger window closed."""
        confining = asyncio.ensure_future(
            asyncio.to_thread(self._confinement, loaded_pack, workspace)
        )
        opening = asyncio.ensure_future(asyncio.to_thread(_logged, open_log, workspace))
        try:
            logged = await asyncio.shield(opening)  # cancelled: its thread still finishes
        except BaseException:
            confining.add_done_callback(_retrieved)  # its outcome no longer matters
            opening.add_done_callback(_undone)
            raise
        try:
            return await confining, logged
        except BaseException:
            _discarded(*logged)
            raise

    def mcp_toolbox(
        self,
        loaded_pack: LoadedPack,
        workspace: Path,
        read_only: tuple[Path, ...],
        note: Note | None = None,
    ) -> McpToolbox:
        """The pack's MCP servers for one run in ``workspace`` (not started yet)."""
        from fabric.infrastructure.mcp.toolbox import McpToolbox
        from fabric.infrastructure.mcp.transports import Place

        settings = loaded_pack.settings
        place = Place(
            workspace, settings.sandbox, self.loaded.base_dir, self.protected_paths, read_only
        )
        return McpToolbox(
            self.loaded.config.mcp_servers,
            settings.mcp,
            place,
            base=loaded_pack.pack.tools,
            note=note,
        )

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
            skills = [  # a run may not rewrite what later runs trust (ADR 0027)
                folder
                for p in self.loaded.config.packs.values()
                for folder in p.skills.configured(self.loaded.base_dir)
            ]
            self._host_code = host_code(
                source if source.is_file() else None, self.loaded.base_dir, modules, skills
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
        settings = loaded_pack.settings
        readable = self._readable(settings, workspace)
        return self.make_commands(
            settings.sandbox, workspace, self.protected_paths, read_only, readable
        )

    def _readable(self, settings: PackSettings, workspace: Path) -> tuple[Path, ...]:
        """The pack's configured skill folders, for its commands to read (ADR 0027)."""
        if not settings.skills.enabled or not settings.skills.folders:
            return ()
        from fabric.infrastructure.additions.skill_folders import readable_folders

        loaded = self.loaded
        return readable_folders(settings.skills, loaded.base_dir, loaded.runs_dir, workspace)

    def _confinement(self, loaded_pack: LoadedPack, workspace: Path) -> Confinement:
        """The workspace's host code and ``commands_for`` it, or why the commands cannot be
        had (the run is then recorded as failed, with the hint to install bubblewrap); and
        the run's additions (``additions``). Called in a thread: it looks through the
        workspace, and the first call probes the machine (tens of ms)."""
        read_only = self.read_only_in(workspace)
        additions = self.additions(loaded_pack, workspace)
        try:
            return read_only, self.commands_for(loaded_pack, workspace, read_only), None, additions
        except SandboxError as exc:
            return read_only, None, exc, additions

    def additions(
        self, loaded_pack: LoadedPack, workspace: Path, *, replay: bool = False
    ) -> tuple[Addition, ...]:
        """What fabric's conventions add to a run of the pack in ``workspace`` (ADR 0025),
        as its settings turn them on (``replay``: for a replay, ``Where.replay``). Reads
        files: call it in a thread."""
        where = Where(
            workspace,
            loaded_pack.settings,
            self.loaded,
            pack=loaded_pack.pack.name,
            secrets=self.secrets,
            protected=self.protected_paths,
            replay=replay,
        )
        return tuple(additions_for(where))

    def _window(self, resolution: Resolution | None) -> tuple[int | None, int | None]:
        """The context window the resolved model has, and the reply's limit (``Kit``)."""
        if resolution is None:
            return None, None
        try:
            backend = self.backends.settings(resolution.backend)
        except ConfigError:  # a backend not in the config (a test's scripted model)
            return None, None
        options = self.backends.options(resolution.model)
        reply = backend.max_tokens if isinstance(backend, AnthropicBackend) else options.max_tokens
        return window_of(resolution.info, backend, options), reply

    def prices(self) -> dict[str, tuple[float | None, float | None]]:
        options = self.loaded.config.llm.model_options
        return {name: (o.input_price, o.output_price) for name, o in options.items()}

    def meta(self, resolution: Resolution | None) -> dict[str, Any]:
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


def _retrieved(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()


def _undone(done: asyncio.Future[tuple[JsonlRunLog, FabricError | None]]) -> None:
    """What ``_logged`` did for a run cancelled while it did it, undone once it is done."""
    if not done.cancelled() and done.exception() is None:
        _discarded(*done.result())


def _discarded(runlog: JsonlRunLog, unrecorded: FabricError | None) -> None:
    """A run that never started: its runlog removed and its ledger window closed."""
    runlog.discard()
    if unrecorded is None:
        with contextlib.suppress(OSError):
            run_ledger.closed(runlog.run_id)


def _logged(
    open_log: Callable[[], JsonlRunLog], workspace: Path
) -> tuple[JsonlRunLog, FabricError | None]:
    """The run's runlog, opened, and the run entered in the run ledger (``_record_start``):
    the two file writes a run starts with, in one trip to a thread."""
    runlog = open_log()
    return runlog, _record_start(runlog.run_id, workspace)


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

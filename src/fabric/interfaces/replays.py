"""``Runner.replay``: re-drive a recorded run with the pack as configured now, into a new run
of its own (``fabric replay``; later the console). With ``live``, the real tools work on a
copy of the recorded workspace, never on the workspace itself."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from fabric.application.additions import Addition, as_recorded
from fabric.application.additions import recorded as recorded_additions
from fabric.application.commands import CommandRunner
from fabric.application.job import Control, Kit
from fabric.application.pack import Pack
from fabric.application.replay import Recording, ReplayReport, replay
from fabric.domain.errors import ConfigError, FabricError, SandboxError
from fabric.infrastructure.packs.registry import LoadedPack
from fabric.infrastructure.runlog import JsonlRunLog, new_run_id, read_runlog
from fabric.infrastructure.runlog.writer import Observer

if TYPE_CHECKING:
    from fabric.infrastructure.mcp.toolbox import McpToolbox


class Runs(Protocol):
    """What a replay needs of the ``Runner`` it runs in (compose.py)."""

    @property
    def protected_paths(self) -> tuple[Path, ...]: ...

    def pack_for(self, started: Mapping[str, Any]) -> LoadedPack: ...

    def commands_for(self, loaded_pack: LoadedPack, workspace: Path) -> CommandRunner | None: ...

    def read_only_in(self, workspace: Path) -> tuple[Path, ...]: ...

    def open_runlog(self, run_id: str, observers: Sequence[Observer]) -> JsonlRunLog: ...

    def mcp_toolbox(self, loaded_pack: LoadedPack, workspace: Path) -> McpToolbox: ...

    def additions(
        self, loaded_pack: LoadedPack, workspace: Path, *, replay: bool = False
    ) -> tuple[Addition, ...]: ...

    def with_delegates(
        self, pack: Pack, loaded_pack: LoadedPack, parent: None, control: Control
    ) -> Pack: ...


def recording_of(path: Path) -> tuple[Recording, list[str]]:
    """The recorded run at ``path`` and what was wrong with its lines (a torn last line...);
    ConfigError when it cannot be replayed at all."""
    events, problems = read_runlog(path)
    try:
        return Recording(events), problems
    except FabricError as exc:
        raise ConfigError(f"{path}: {exc.message}", hint=exc.hint) from exc


async def replay_run(
    runner: Runs, path: Path, *, live: bool = False, recording: Recording | None = None
) -> ReplayReport:
    """Replay the runlog at ``path`` (already read: ``recording``) as a new run in
    ``runner``'s runs folder."""
    if recording is None:
        recording, _ = recording_of(path)
    loaded_pack = runner.pack_for(recording.started)
    recorded = Path(str(recording.started.get("workspace", ".")))
    with _workspace(recorded, live) as workspace:
        commands = None
        if live:
            try:
                commands = runner.commands_for(loaded_pack, workspace)
            except SandboxError as exc:
                message = f"--live-tools cannot run the pack's commands: {exc.message}"
                raise ConfigError(message, hint=exc.hint) from exc
        run_id = new_run_id()
        toolbox = (
            runner.mcp_toolbox(loaded_pack, workspace)
            if live and loaded_pack.settings.mcp
            else None
        )
        # a replay that starts no server has the recorded MCP tools; a delegation's recorded
        # result answers its call (live: the real tool starts a sub-run on the copy)
        additions = await asyncio.to_thread(
            lambda: runner.additions(loaded_pack, workspace, replay=True)
        )
        pack = as_recorded(loaded_pack.pack, additions, [recording.started])
        pack = runner.with_delegates(pack, loaded_pack, None, Control())
        if toolbox is not None:  # live: the servers start as for a run
            try:
                live_tools = await toolbox.open()
            except FabricError as exc:
                raise ConfigError(f"--live-tools: {exc.message}", hint=exc.hint) from exc
            pack = msgspec.structs.replace(pack, tools=(*pack.tools, *live_tools))
        runlog = runner.open_runlog(run_id, ())
        try:
            return await replay(
                recording,
                pack=pack,
                run_id=run_id,
                workspace=workspace,
                kit=Kit(
                    None,  # the recorded replies answer
                    runlog,
                    commands,
                    # recorded tools touch no file: nothing to keep from them
                    runner.protected_paths if live else (),
                    runner.read_only_in(workspace) if live else (),
                    tool_updates=toolbox,
                ),
                live=live,
                run_dir=path.parent,
                sandbox=loaded_pack.settings.sandbox,
                meta=recorded_additions(additions),
            )
        finally:
            runlog.close()
            if toolbox is not None:
                await toolbox.aclose()


@contextmanager
def _workspace(recorded: Path, live: bool) -> Iterator[Path]:
    """The recorded workspace (recorded tools touch nothing), or a copy of it for real tools,
    removed afterwards."""
    if not live:
        yield recorded
        return
    scratch = Path(tempfile.mkdtemp(prefix="fabric-replay-"))
    try:
        workspace = scratch / "workspace"
        if recorded.is_dir():
            shutil.copytree(recorded, workspace, symlinks=True)
        else:
            workspace.mkdir()
        yield workspace
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

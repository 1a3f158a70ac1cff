"""``fabric replay RUN``: re-drive a recorded run with the current pack and say where it
diverges. Exit 0 identical, 1 diverged, 2 usage or configuration error."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fabric.config.loader import LoadedConfig
from fabric.domain.errors import ConfigError, FabricError

if TYPE_CHECKING:
    from fabric.application.commands import CommandRunner
    from fabric.infrastructure.packs.registry import LoadedPack
    from fabric.interfaces.compose import Runner


def run_replay(loaded: LoadedConfig, path: Path, *, live: bool, as_json: bool) -> int:
    """Replay the runlog at ``path``; print the report; return the exit code."""
    from fabric.application.replay import Recording, replay
    from fabric.infrastructure.runlog import JsonlRunLog, new_run_id, read_runlog
    from fabric.interfaces.compose import build_runner

    events, problems = read_runlog(path)
    for problem in problems:
        typer.echo(f"warning: {problem}", err=True)
    try:
        recording = Recording(events)
    except FabricError as exc:
        raise ConfigError(f"{path}: {exc.message}", hint=exc.hint) from exc
    runner = build_runner(loaded)
    loaded_pack = runner.pack_for(recording.started)
    recorded_workspace = Path(str(recording.started.get("workspace", ".")))
    scratch: Path | None = None
    workspace = recorded_workspace
    if live:  # real tools work on a copy, never on the recorded workspace
        scratch = Path(tempfile.mkdtemp(prefix="fabric-replay-"))
        workspace = scratch / "workspace"
        if recorded_workspace.is_dir():
            shutil.copytree(recorded_workspace, workspace, symlinks=True)
        else:
            workspace.mkdir()
    run_id = new_run_id()
    try:
        commands = _commands(runner, loaded_pack, workspace) if live else None
        runlog = JsonlRunLog(runner.runs_dir, run_id, secrets=runner.secrets)
    except OSError as exc:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise ConfigError(f"cannot create the replay's runlog in {runner.runs_dir}: {exc}") from exc
    except ConfigError:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    try:
        report = asyncio.run(
            replay(
                recording,
                pack=loaded_pack.pack,
                runlog=runlog,
                run_id=run_id,
                workspace=workspace,
                live=live,
                run_dir=path.parent,
                sandbox=loaded_pack.settings.sandbox,
                protected=runner.protected_paths,
                read_only=runner.read_only_in(workspace),
                commands=commands,
            )
        )
    finally:
        runlog.close()
        asyncio.run(runner.aclose())
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
    else:
        _print(report.as_dict())
    return 0 if report.identical else 1


def _commands(runner: Runner, loaded_pack: LoadedPack, workspace: Path) -> CommandRunner | None:
    """The confined command runner for ``--live-tools`` of a pack that runs commands."""
    from fabric.domain.errors import SandboxError

    try:
        return runner.commands_for(loaded_pack, workspace)
    except SandboxError as exc:
        message = f"--live-tools cannot run the pack's commands: {exc.message}"
        raise ConfigError(message, hint=exc.hint) from exc


def _print(report: dict[str, Any]) -> None:
    divergence = report["divergence"]
    if divergence is None:
        typer.echo(
            f"identical: replay {report['run_id']} of {report['replay_of']} matched all "
            f"{report['steps_recorded']} step(s); result {report['result']['status']}"
        )
    else:
        typer.echo(
            f"diverged: replay {report['run_id']} of {report['replay_of']}\n"
            f"  step:     {divergence['step']}\n"
            f"  field:    {divergence['field']}\n"
            f"  recorded: {divergence['recorded']}\n"
            f"  now:      {divergence['now']}"
        )
    typer.echo(f"runlog: {report['runlog']}")

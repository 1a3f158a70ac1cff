"""``fabric replay RUN``: re-drive a recorded run with the current pack and say where it
diverges. Exit 0 identical, 1 diverged, 2 usage or configuration error."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fabric.config.loader import LoadedConfig

from .startup import say, settle

if TYPE_CHECKING:
    from fabric.application.replay import ReplayReport


def run_replay(loaded: LoadedConfig, path: Path, *, live: bool, as_json: bool) -> int:
    """Replay the runlog at ``path``; print the report; return the exit code."""
    from fabric.interfaces.compose import build_runner
    from fabric.interfaces.replays import recording_of

    recording, problems = recording_of(path)
    for problem in problems:
        say(f"warning: {problem}")
    runner = build_runner(loaded)

    async def go() -> ReplayReport:
        try:
            return await runner.replay(path, live=live, recording=recording)
        finally:
            await runner.aclose()

    settle()
    report = asyncio.run(go())
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
    else:
        _print(report.as_dict())
    return 0 if report.identical else 1


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

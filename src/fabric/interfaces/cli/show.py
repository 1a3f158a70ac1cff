"""``fabric show``: find a run's runlog, and print its timeline (or its events as JSON), also
following a run that is still going."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from fabric.domain.errors import ConfigError, FabricError
from fabric.domain.runlog import check_versions

from .event_lines import describe_event


def find_runlog(ref: str, runs_dir: Callable[[], Path]) -> Path:
    """A run id, a run folder or a runlog path → the runlog file."""
    from fabric.infrastructure.runlog import RUNLOG_NAME, runlog_path

    path = Path(ref)
    if path.is_file():
        return path
    if path.is_dir() and (path / RUNLOG_NAME).is_file():
        return path / RUNLOG_NAME
    candidate = runlog_path(runs_dir(), ref)
    if candidate.is_file():
        return candidate
    raise ConfigError(
        f"no run {ref!r}: not a runlog file, a run folder, or a run id under {runs_dir()}",
        hint="pass the runlog path printed by `fabric run`, or a folder name under runs/",
    )


def show_events(
    events: list[dict[str, Any]],
    path: Path,
    out: TextIO,
    *,
    step: int | None = None,
    kinds: list[str] | None = None,
    follow: bool = False,
    as_json: bool = False,
) -> None:
    """``fabric show``: the events of one step and/or of some kinds (all by default), as a
    timeline or JSON; with ``follow``, then the lines appended until the run ends."""

    def wanted(event: Mapping[str, Any]) -> bool:
        return (step is None or event.get("step") == step) and (not kinds or event["kind"] in kinds)

    shown = [e for e in events if wanted(e)]
    if as_json and follow:  # a stream: one JSON object a line
        for event in shown:
            out.write(json.dumps(event, ensure_ascii=False) + "\n")
    elif as_json:
        out.write(json.dumps(shown, indent=2, ensure_ascii=False) + "\n")
    else:
        show_timeline(shown, path, out, complete=not (step or kinds or follow))
    if follow and not any(e["kind"] == "run_finished" for e in events):
        after = events[-1]["seq"] if events else -1
        follow_runlog_lines(path, after, wanted, out, as_json=as_json)


def show_timeline(
    events: list[dict[str, Any]], path: Path, out: TextIO, *, complete: bool = True
) -> None:
    """The timeline of ``events``; with ``complete`` (the whole log, unfiltered), also the
    payload, or a note when the run has no end yet. The runs a call delegated to are shown
    under it, indented (ADR 0021)."""
    finished = _timeline(events, path, out, "", {path.parent.name})
    if complete and finished is None:
        out.write("(no run_finished: the run is still going, or it was killed)\n")
    elif complete and finished is not None and finished.get("payload") is not None:
        out.write(json.dumps(finished["payload"], indent=2, ensure_ascii=False) + "\n")
    out.write(f"runlog: {path}\n")


def _timeline(
    events: list[dict[str, Any]], path: Path, out: TextIO, indent: str, seen: set[str]
) -> Mapping[str, Any] | None:
    """Write the timeline lines of ``events`` with ``indent``, each delegated run's below its
    call; return the run's ``run_finished`` (None: none yet)."""
    pending: dict[str, Mapping[str, Any]] = {}
    finished = None
    for event in events:
        if event["kind"] == "run_started":
            out.write(f"{indent}started {event['ts']}\n")
        line = describe_event(event, pending)
        if line is not None:
            out.write("".join(f"{indent}{part}\n" for part in line.split("\n")))
        for child in event.get("child_run_ids") or () if event["kind"] == "tool_result" else ():
            _child_timeline(str(child), path, out, indent + "    │ ", seen)
        if event["kind"] == "run_finished":
            finished = event
    return finished


def _child_timeline(run_id: str, path: Path, out: TextIO, indent: str, seen: set[str]) -> None:
    """A delegated run's timeline, read from its runlog beside ``path``'s run."""
    from fabric.infrastructure.runlog import RUNLOG_NAME, read_runlog

    child = path.parent.parent / run_id / RUNLOG_NAME
    if Path(run_id).name != run_id or run_id in ("", ".", ".."):
        out.write(f"{indent}(delegated run {run_id!r}: not a run id)\n")
        return
    if run_id in seen or not child.is_file():
        out.write(f"{indent}(delegated run {run_id}: no runlog at {child})\n")
        return
    seen.add(run_id)
    try:
        events, _problems = read_runlog(child)
    except FabricError as exc:
        out.write(f"{indent}(delegated run {run_id}: its runlog cannot be read: {exc})\n")
        return
    end = _timeline(events, child, out, indent, seen)
    if end is None:
        out.write(f"{indent}(no run_finished: the delegated run is still going, or was killed)\n")


def follow_runlog_lines(
    path: Path,
    after: int,
    wanted: Callable[[dict[str, Any]], bool],
    out: TextIO,
    *,
    as_json: bool,
) -> None:
    """Print events appended to a runlog after ``after`` until its run_finished (Ctrl-C
    stops following a run that was killed and will never finish)."""
    import asyncio

    from fabric.infrastructure.runlog.tail import follow_runlog

    pending: dict[str, Mapping[str, Any]] = {}

    async def tail() -> None:
        async for event in follow_runlog(path, after=after, is_over=lambda: False):
            if event is None:
                continue
            check_versions([event], str(path))  # a newer fabric may append (resume)
            if not wanted(event):
                continue
            line = (
                json.dumps(event, ensure_ascii=False) if as_json else describe_event(event, pending)
            )
            if line is not None:
                out.write(line + "\n")
                out.flush()

    asyncio.run(tail())

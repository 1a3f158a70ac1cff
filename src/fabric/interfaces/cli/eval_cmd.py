"""``fabric eval SUITE`` and ``fabric eval compare A B``.

Exit codes: 0 the eval ran (whatever its pass rate) or the comparison was printed; 2 bad input
(suite, options, config, an output folder that cannot be continued); 130 stopped by Ctrl-C
(what finished is kept: rerun the same command to continue).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from fabric.domain.errors import ConfigError

from .options import ConfigOpt
from .startup import fail, load, settle

if TYPE_CHECKING:
    from fabric.config.loader import LoadedConfig
    from fabric.interfaces.eval_session import EvalReport, Prepared

INTERRUPTED = 130
COMPARE = "compare"


def eval_command(
    args: Annotated[
        list[str],
        typer.Argument(
            help="SUITE: a suite folder (with suite.yaml) or a suite YAML file. "
            "Or: compare A B, with A and B eval output folders or their results.json.",
            metavar="SUITE | compare A B",
            show_default=False,
        ),
    ],
    repeats: Annotated[int, typer.Option("--repeats", "-n", help="Attempts per case.", min=1)] = 1,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Attempts at once.", min=1)] = 1,
    pack: Annotated[
        str | None, typer.Option("--pack", "-p", help="Run every case with this pack.")
    ] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", "-b", help="A backend name, or auto.")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="A key of llm.models or a model name.")
    ] = None,
    case: Annotated[
        list[str] | None,
        typer.Option(
            "--case",
            help="Only cases whose id matches this glob, or whose tier does with "
            "'tier:GLOB' (e.g. 'fix-*', 'tier:easy'); repeatable.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Output folder (default: evals-out/<suite>-<UTC time>). An eval's folder is "
            "continued: finished attempts are not made again.",
        ),
    ] = None,
    restart: Annotated[
        bool, typer.Option("--restart", help="Empty the --out folder's eval and start over.")
    ] = False,
    config: ConfigOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print results.json (or the comparison) as JSON.")
    ] = False,
) -> None:
    """Run a suite of cases with their packs and measure how many really get done: pass rates
    with 95% intervals, pass@k, false successes, steps, tokens, cost and time. Writes
    results.json and summary.md to the output folder. `fabric eval compare A B` tells which
    pass rates differ by more than the noise."""
    if args and args[0] == COMPARE:
        given = [repeats != 1, jobs != 1, pack, backend, model, case, out, restart, config]
        if len(args) != 3 or any(given):
            fail(
                ConfigError(
                    "compare takes two eval output folders (or results.json files) and --json",
                    hint="fabric eval compare evals-out/a evals-out/b",
                ),
                as_json=as_json,
                code=2,
            )
        _compare(Path(args[1]), Path(args[2]), as_json=as_json)
        return
    if len(args) != 1:
        fail(
            ConfigError(
                f"give one suite, not {len(args)} arguments",
                hint="fabric eval evals/engineering  (or: fabric eval compare A B)",
            ),
            as_json=as_json,
            code=2,
        )
    from fabric.interfaces.eval_session import EvalOptions, prepare

    loaded = load(config, as_json)
    options = EvalOptions(
        suite=Path(args[0]),
        out=out,
        repeats=repeats,
        jobs=jobs,
        pack=pack,
        backend=backend,
        model=model,
        cases=tuple(case or ()),
        restart=restart,
        command=" ".join(["fabric", *(shlex.quote(a) for a in sys.argv[1:])]),
    )
    try:
        prepared = prepare(loaded, options)
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    for problem in prepared.folder.problems:
        typer.echo(f"warning: {problem}", err=True)
    report = _run(prepared, loaded)
    if report is None:
        _stopped(prepared, as_json=as_json)
    _finish(prepared, report, as_json=as_json)


def _run(prepared: Prepared, loaded: LoadedConfig) -> EvalReport | None:
    """Run the attempts with a progress display; the first Ctrl-C (or SIGTERM) stops them
    cleanly, a second one at once (None: so it was)."""
    import asyncio
    import signal

    from fabric.interfaces.eval_session import execute

    from .eval_progress import EvalProgress

    progress = EvalProgress(
        sys.stderr, total=len(prepared.planned), done_before=prepared.done_before
    )

    async def main() -> EvalReport:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        task = asyncio.current_task()
        assert task is not None

        def interrupt() -> None:
            if stop.is_set():
                task.cancel()
                return
            stop.set()
            progress.say("stopping: cancelling the running attempts (Ctrl-C again: at once)")

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, interrupt)
        try:
            return await execute(
                prepared,
                loaded,
                stop=stop,
                on_status=progress.say,
                on_start=progress.started,
                on_finish=progress.finished,
            )
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    with progress:
        try:
            settle()
            return asyncio.run(main())
        except (asyncio.CancelledError, KeyboardInterrupt):  # a second Ctrl-C
            return None


def _stopped(prepared: Prepared, *, as_json: bool) -> NoReturn:
    """After a second Ctrl-C: say what is kept (results.json is written even then)."""
    results = prepared.folder.path / "results.json"
    if as_json and results.is_file():
        typer.echo(results.read_text("utf-8"), nl=False)
    done = len(prepared.folder.records())
    typer.echo(
        f"stopped: {done} attempt(s) of this eval are kept in {prepared.folder.path}; "
        f"continue with: {_continue_command(prepared)}",
        err=True,
    )
    raise typer.Exit(INTERRUPTED)


def _finish(prepared: Prepared, report: EvalReport, *, as_json: bool) -> NoReturn:
    import json

    from fabric.application.evals.summary import render_tables

    run = report.run
    if run.error is not None and not run.finished:  # refused before any attempt ended
        fail(run.error, as_json=as_json, code=2)
    if as_json:
        typer.echo(json.dumps(report.results, indent=2, ensure_ascii=False))
    else:
        typer.echo(render_tables(report.results, only_made=True))
    folder = report.folder
    typer.echo(f"results: {folder / 'results.json'}; summary: {folder / 'summary.md'}", err=True)
    if run.error is not None:
        fail(run.error, as_json=False, code=2)
    if run.left:
        typer.echo(
            f"stopped with {len(run.left)} attempt(s) not made; continue with: "
            f"{_continue_command(prepared)}",
            err=True,
        )
        raise typer.Exit(INTERRUPTED)
    raise typer.Exit(0)


def _continue_command(prepared: Prepared) -> str:
    command = prepared.options.command or "fabric eval"
    if prepared.options.out is None:
        command += f" --out {shlex.quote(str(prepared.folder.path))}"
    return command.replace(" --restart", "")


def _compare(a: Path, b: Path, *, as_json: bool) -> None:
    import json

    from fabric.application.evals.compare import compare, render_compare
    from fabric.interfaces.eval_store import load_results

    try:
        result = compare(load_results(a), load_results(b))
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    if as_json:
        typer.echo(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        typer.echo(render_compare(result), nl=False)

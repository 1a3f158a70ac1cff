"""The ``fabric`` command. Heavy imports happen inside commands so ``fabric --help`` is quick.

Exit codes of ``run`` and ``resume``: 0 the task finished and a check of the pack's confirmed
the work, 3 it finished and every check passed but none could confirm it (read the result), 1
it did not finish, 2 usage or configuration error.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from fabric.domain.errors import FabricError

from .eval_cmd import eval_command
from .startup import fail, load, redact_output

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from fabric.domain.models import RunResult
    from fabric.interfaces.compose import Runner

app = typer.Typer(
    name="fabric",
    help="Run tool-using LLM agents (specialist packs) on your own machine.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="fabric.yaml to use (default: $FABRIC_CONFIG, "
        "./fabric.yaml, then the packaged default).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
YesOpt = Annotated[
    bool,
    typer.Option(
        "--yes",
        "-y",
        help="Approve every tool call the pack's policy asks about, without asking "
        "(by default you are asked at the terminal; with no terminal they are refused).",
    ),
]
BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        "-b",
        help="ollama, openai (any OpenAI-compatible server), anthropic, embedded, or auto "
        "(default: llm.backend in fabric.yaml, or FABRIC_BACKEND).",
    ),
]


@app.callback()
def _before_any_command() -> None:
    # Whatever a command prints leaves without the environment's secrets; once it has read
    # the config, without the configured API keys too (``_load``).
    from fabric.domain.secrets import Secrets

    redact_output(Secrets.from_env(os.environ))


@app.command()
def run(
    task: Annotated[str, typer.Argument(help="What the pack should do.", show_default=False)],
    pack: Annotated[
        str | None, typer.Option("--pack", "-p", help="Pack name (see `fabric packs`).")
    ] = None,
    config: ConfigOpt = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="A key of llm.models or a model name.")
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option("--workspace", "-w", help="Folder the tools work in (default: here)."),
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Model calls at most.", min=1)
    ] = None,
    backend: BackendOpt = None,
    as_json: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    yes: YesOpt = False,
    verify: Annotated[
        str | None,
        typer.Option(
            "--verify",
            help="Check the work with this command (e.g. 'python -m pytest -q') before the "
            "run may end completed, instead of the pack's verify.command.",
        ),
    ] = None,
    no_verify: Annotated[
        bool, typer.Option("--no-verify", help="Do not run the pack's verify.command.")
    ] = False,
) -> None:
    """Run a task with a pack, show each step, print the result and the runlog path.

    Exits 0 when the work was done and confirmed by the pack's checks, 3 when it was done and
    every check passed but none could confirm it (read the result), 1 when it was not done."""

    from fabric.domain.errors import ConfigError
    from fabric.infrastructure.runlog import new_run_id
    from fabric.interfaces.compose import build_runner

    from .approve import cli_approver
    from .render import Progress

    loaded = load(config, as_json)
    name = pack or loaded.config.default_pack
    if name is None:
        fail(
            ConfigError(
                "no pack given",
                hint=f"pass --pack NAME; packs: {', '.join(loaded.config.packs) or 'none'}",
            ),
            as_json=as_json,
            code=2,
        )
    if verify is not None and no_verify:
        problem = ConfigError("--verify and --no-verify contradict each other", hint="pick one")
        fail(problem, as_json=as_json, code=2)
    runner = build_runner(loaded, on_status=None if quiet else _status)
    _refuse_without_search(runner, name, as_json)
    live = sys.stderr.isatty()
    progress = None if quiet else Progress(sys.stderr, live=live, secrets=runner.secrets)
    run_id = new_run_id()

    started = runner.run(
        name,
        task,
        model=model,
        backend=backend,
        workspace=workspace,
        max_steps=max_steps,
        run_id=run_id,
        observers=(progress,) if progress else (),
        on_delta=progress.delta if progress else None,
        approver=cli_approver(yes=yes, progress=progress),
        verify="off" if no_verify else verify,
    )
    # with progress lines on, they have already said why a run failed
    _drive(runner, started, runner.runlog_path(run_id), as_json, explain=quiet)


def _drive(
    runner: Runner, started: Awaitable[RunResult], runlog: Path, as_json: bool, *, explain: bool
) -> NoReturn:
    """Run (or resume) to the end, print the result, exit 0 done / 3 done but unconfirmed /
    1 not done / 2 usage."""
    import asyncio

    from fabric.domain.errors import ConfigError, ModelError
    from fabric.domain.models import RunStatus

    from .render import cancelled_result, describe_failure, exit_code, print_result

    async def go() -> RunResult:
        try:
            return await started
        finally:
            await runner.aclose()

    try:
        result = asyncio.run(go())
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    except ModelError as exc:  # no backend or model could be found: nothing ran
        fail(exc, as_json=as_json, code=1)
    except KeyboardInterrupt:  # Ctrl-C: the run logged its end; say it, and how to go on
        result = cancelled_result(runlog)
        if result.runlog_path is None:
            typer.echo("\ncancelled before the run began", err=True)
        else:
            typer.echo(f"\n{result.status.value}; runlog: {result.runlog_path}", err=True)
        if result.runlog_path and result.status is RunStatus.CANCELLED:
            typer.echo(f"  continue it with: fabric resume {result.run_id}", err=True)
    print_result(result, as_json=as_json)
    if explain and not result.succeeded:
        typer.echo(describe_failure(result), err=True)
    raise typer.Exit(exit_code(result))


def _status(line: str) -> None:
    typer.echo(line, err=True)


def _refuse_without_search(runner: Runner, pack: str, as_json: bool) -> None:
    """Exit 2 before the run when the pack offers web_search and it cannot work (no search
    backend configured, or it does not answer): every search would fail steps later."""
    import asyncio

    from fabric.domain.errors import ConfigError
    from fabric.interfaces.search_check import offers_search, search_problem

    try:
        loaded_pack = runner.pack(pack)
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    if offers_search(loaded_pack):
        problem = asyncio.run(search_problem(pack, loaded_pack))
        if problem is not None:
            fail(problem, as_json=as_json, code=2)


@app.command()
def packs(config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """List the packs in the config: name, description, tools, the model each asks for and
    the model a run of it would use now (which may differ: see `fabric models`)."""
    import asyncio

    from fabric.domain.errors import ConfigError
    from fabric.interfaces.compose import build_runner
    from fabric.interfaces.models_report import packs_report

    from .models_view import print_packs

    loaded = load(config, as_json)
    runner = build_runner(loaded, on_status=_status)

    async def listing() -> list[dict[str, Any]]:
        try:
            return await packs_report(runner, loaded.config.packs)
        finally:
            await runner.aclose()

    try:
        rows = asyncio.run(listing())
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    for row in rows:
        row["model"] = f"{row['model']} ({row['asks']})"
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(f"no packs in {loaded.source}")
    print_packs(rows, sys.stdout)


@app.command()
def models(
    config: ConfigOpt = None,
    backend: BackendOpt = None,
    pack: Annotated[
        str | None, typer.Option("--pack", "-p", help="Whose model key to pick for.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List what each backend offers (tools, context, size) and the model fabric would pick."""
    import asyncio

    from fabric.domain.errors import ConfigError
    from fabric.interfaces.models_report import gather

    from .models_view import print_models

    loaded = load(config, as_json)
    name = pack or loaded.config.default_pack or next(iter(loaded.config.packs), None)
    if name is None:
        fail(ConfigError("the config declares no packs", hint="add one under 'packs:'"),
              as_json=as_json, code=2)  # fmt: skip
    try:
        report = asyncio.run(gather(loaded, name, backend, on_status=_status))
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        print_models(report, sys.stdout)
    raise typer.Exit(0 if report["pick"].get("model") else 1)


@app.command()
def doctor(config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Check how this machine confines commands (bubblewrap, Landlock, seccomp, cgroups) and
    which backend each pack gets. Exit 1 when a pack that runs commands cannot be confined."""
    from .doctor import gather, print_report

    loaded = load(config, as_json)
    report = gather(loaded)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        print_report(report, sys.stdout)
    raise typer.Exit(0 if report["ok"] else 1)


@app.command()
def serve(
    config: ConfigOpt = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Address to bind (default: serve.host).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Port (default: serve.port).", min=0, max=65535)
    ] = None,
) -> None:
    """Run the HTTP task service (POST /tasks, live events, results)."""
    from .serve import run_service

    loaded = load(config, False)
    try:
        run_service(loaded, host=host, port=port)
    except FabricError as exc:
        fail(exc, as_json=False, code=2)


@app.command()
def show(
    run: Annotated[str, typer.Argument(help="A run id, a run folder or a runlog.jsonl path.")],
    config: ConfigOpt = None,
    step: Annotated[int | None, typer.Option("--step", help="Only this step's events.")] = None,
    kind: Annotated[
        list[str] | None, typer.Option("--kind", help="Only events of this kind (repeatable).")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep showing events until the run ends.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show a run's timeline: steps, tool calls with durations, final payload, tokens."""
    from .render import show_events

    path, events = _read(run, lambda: load(config, as_json).runs_dir, as_json)
    try:
        show_events(events, path, sys.stdout, step=step, kinds=kind, follow=follow, as_json=as_json)
    except FabricError as exc:  # a line appended by a newer fabric while following
        fail(exc, as_json=as_json, code=2)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _read(
    run: str, runs_dir: Callable[[], Path], as_json: bool
) -> tuple[Path, list[dict[str, Any]]]:
    """The runlog a run id, run folder or path names, and its events; unreadable lines are
    warnings, a missing or too new runlog exits 2."""
    from fabric.domain.errors import ConfigError
    from fabric.infrastructure.runlog import read_runlog

    from .render import find_runlog

    try:
        path = find_runlog(run, runs_dir)
        events, problems = read_runlog(path)
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    for problem in problems:
        typer.echo(f"warning: {problem}", err=True)
    return path, events


@app.command()
def replay(
    run: Annotated[str, typer.Argument(help="A run id, a run folder or a runlog.jsonl path.")],
    config: ConfigOpt = None,
    live_tools: Annotated[
        bool,
        typer.Option("--live-tools", help="Run the real tools, on a copy of the workspace."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Re-drive a recorded run with the current pack; say where it diverges (exit 1) or that
    it is identical (exit 0)."""
    from fabric.domain.errors import ConfigError

    from .render import find_runlog
    from .replay_cmd import run_replay

    loaded = load(config, as_json)
    try:
        path = find_runlog(run, lambda: loaded.runs_dir)
        code = run_replay(loaded, path, live=live_tools, as_json=as_json)
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    raise typer.Exit(code)


@app.command()
def resume(
    run: Annotated[str, typer.Argument(help="A run id, a run folder or a runlog.jsonl path.")],
    config: ConfigOpt = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            "--max-steps", help="Model calls at most, in all (default: the run's).", min=1
        ),
    ] = None,
    as_json: JsonOpt = False,
    yes: YesOpt = False,
) -> None:
    """Continue an interrupted or cancelled (Ctrl-C) run, or one that hit its step limit (with
    a higher --max-steps), in the same runlog and workspace; completed steps are not sent to
    the model again."""
    from fabric.application.resume import plan_resume
    from fabric.domain.errors import ConfigError
    from fabric.interfaces.compose import build_runner

    from .approve import cli_approver
    from .render import Progress

    loaded = load(config, as_json)
    path, events = _read(run, lambda: loaded.runs_dir, as_json)
    runner = build_runner(loaded, on_status=_status)
    try:
        plan = plan_resume(events, max_steps)  # a run that cannot go on says so first
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    _refuse_without_search(runner, str(plan.started.get("pack", "")), as_json)
    progress = Progress(sys.stderr, live=sys.stderr.isatty(), secrets=runner.secrets)

    started = runner.resume(
        events,
        path,
        max_steps=max_steps,
        observers=(progress,),
        on_delta=progress.delta,
        approver=cli_approver(yes=yes, progress=progress),
    )
    _drive(runner, started, path, as_json, explain=as_json)


app.command(name="eval")(eval_command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()

"""``fabric run`` and ``fabric resume``: drive a run to its end with live progress, print the
result, and exit 0 (done, confirmed), 3 (done, unconfirmed), 1 (not done) or 2 (usage)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from .options import BackendOpt, ConfigOpt, JsonOpt, YesOpt
from .startup import fail, load, read_run, say, settle

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from fabric.application.job import Control, RunRequest
    from fabric.config.loader import LoadedConfig
    from fabric.domain.models import RunResult
    from fabric.interfaces.compose import Runner


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
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", help="Budget: tokens in all (limits.budget).", min=1),
    ] = None,
    max_cost: Annotated[
        float | None,
        typer.Option("--max-cost", help="Budget: US dollars (needs the model's prices).", min=0),
    ] = None,
    max_seconds: Annotated[
        float | None, typer.Option("--max-seconds", help="Budget: wall-clock seconds.", min=0)
    ] = None,
    max_tool_calls: Annotated[
        int | None, typer.Option("--max-tool-calls", help="Budget: tool calls.", min=1)
    ] = None,
    max_model_calls: Annotated[
        int | None, typer.Option("--max-model-calls", help="Budget: model calls.", min=1)
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
    durable: Annotated[
        bool,
        typer.Option(
            "--durable",
            help="Record every model call, tool call and answer in the database of durable "
            "runs (serve.durable_database): if fabric dies, `fabric resume RUN` goes on from "
            "the last recorded step without asking or running anything twice.",
        ),
    ] = False,
) -> None:
    """Run a task with a pack, show each step, print the result and the runlog path.

    Exits 0 when the work was done and confirmed by the pack's checks, 3 when it was done and
    every check passed but none could confirm it (read the result), 1 when it was not done."""

    from fabric.application.job import Control, RunRequest
    from fabric.config.schema import Budget
    from fabric.domain.errors import ConfigError
    from fabric.infrastructure.runlog import new_run_id
    from fabric.interfaces.compose import build_runner

    from .approve import cli_approver
    from .render import Progress

    loaded = load(config, as_json, flags={"--backend": (("llm", "backend"), backend)})
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
    runner = build_runner(loaded, on_status=None if quiet else say)
    live = sys.stderr.isatty()
    progress = None if quiet else Progress(sys.stderr, live=live, secrets=runner.secrets)
    run_id = new_run_id()

    limits = {"tokens": max_tokens, "cost_usd": max_cost, "seconds": max_seconds,
              "tool_calls": max_tool_calls, "model_calls": max_model_calls}  # fmt: skip
    budget = None
    if any(v is not None for v in limits.values()):
        try:
            budget = Budget.model_validate(limits)
        except ValueError as exc:
            fail(ConfigError(f"the run's budget is not valid: {exc}"), as_json=as_json, code=2)
    request = RunRequest(
        name,
        task,
        workspace=workspace,
        model=model,  # a key or a name for this run's pack: no key of the config
        backend=backend,  # llm.backend already; recorded too, for whoever continues a durable run
        max_steps=max_steps,
        verify="off" if no_verify else verify,
        run_id=run_id,
        budget=budget,
    )
    control = Control(
        approver=cli_approver(yes=yes, progress=progress),
        observers=(progress,) if progress else (),
    )
    if durable:
        started = _durably(runner, loaded, control, request=request)
    else:
        started = runner.run(request, control)
    # with progress lines on, they have already said why a run failed
    _drive(runner, started, runner.runlog_path(run_id), as_json, explain=quiet)


async def _durably(
    runner: Runner,
    loaded: LoadedConfig,
    control: Control,
    *,
    request: RunRequest | None = None,
    resume: str | None = None,
) -> RunResult:
    """``request`` as a durable run (ADR 0020), or the continuation of the durable run
    ``resume`` whose process died."""
    from fabric.interfaces.compose import durable_runs

    async with durable_runs(loaded, runner) as durable:
        if resume is not None:
            say(f"continuing durable run {resume} from its last recorded step ({durable.where()})")
            return await durable.continue_run(resume, control)
        assert request is not None
        say(f"durable run: every step is recorded in {durable.where()}")
        return await durable.run(request, control)


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

    settle()
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
    from fabric.application.job import Control
    from fabric.application.resume import ended, plan_resume
    from fabric.domain.errors import ConfigError
    from fabric.interfaces.compose import build_runner

    from .approve import cli_approver
    from .render import Progress

    loaded = load(config, as_json)
    path, events = read_run(run, lambda: loaded.runs_dir, as_json)
    runner = build_runner(loaded, on_status=say)
    try:
        plan_resume(events, max_steps)  # a run that cannot go on says so first
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    progress = Progress(sys.stderr, live=sys.stderr.isatty(), secrets=runner.secrets)

    control = Control(approver=cli_approver(yes=yes, progress=progress), observers=(progress,))
    durable = bool(events and events[0].get("durable")) and ended(events) is None
    if durable and max_steps is not None:
        problem = ConfigError(
            "--max-steps cannot change an unfinished durable run: it goes on as it was started",
            hint="resume it without --max-steps; once it ends at its limit, resume it with more",
        )
        fail(problem, as_json=as_json, code=2)
    if durable:
        run_id = str(events[0].get("run_id"))
        started = _durably(runner, loaded, control, resume=run_id)
    else:
        started = runner.resume(events, path, max_steps=max_steps, control=control)
    _drive(runner, started, path, as_json, explain=as_json)

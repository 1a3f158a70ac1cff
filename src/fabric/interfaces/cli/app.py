"""The ``fabric`` command. Heavy imports happen inside commands so ``fabric --help`` is quick.

Exit codes of ``run`` and ``resume``: 0 the task finished and a check of the pack's confirmed
the work, 3 it finished and every check passed but none could confirm it (read the result), 1
it did not finish, 2 usage or configuration error.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.main import get_command_name

from fabric.domain.errors import ConfigError, FabricError

from .config_cmd import config_app
from .eval_cmd import eval_command
from .export_cmd import export_app
from .mcp_cmd import mcp_app
from .memory_cmd import memory_app
from .options import BackendOpt, ConfigOpt, JsonOpt
from .pack_cmd import init, pack_app
from .run_cmd import resume, run
from .skills_cmd import skills
from .startup import fail, load, output_secrets, read_run, redact_output, say
from .worker import worker

app = typer.Typer(
    name="fabric",
    help="Run tool-using LLM agents (specialist packs) on your own machine.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


@app.callback()
def _before_any_command() -> None:
    # Whatever a command prints leaves without the environment's secrets; once it has read
    # the config, without the configured API keys too (``_load``).
    from fabric.domain.secrets import Secrets

    redact_output(Secrets.from_env(os.environ))


app.command()(run)


@app.command()
def packs(
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Build every pack without running it and say what is wrong where (pack, key, "
            "file and line). Exit 0: all good; 1: a pack has a problem; 2: the config itself "
            "cannot be read.",
        ),
    ] = False,
) -> None:
    """List the packs: name, description, tools, where each comes from (the config, built in,
    or an installed distribution), the model it asks for and the model a run of it would use
    now (which may differ: see `fabric models`)."""
    from .pack_cmd import check_packs, list_packs

    loaded = load(config, as_json)
    if check:
        raise typer.Exit(check_packs(loaded, as_json))
    list_packs(loaded, as_json)


app.command()(init)
app.add_typer(pack_app, name="pack")
app.command()(skills)


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
    try:
        report = asyncio.run(gather(loaded, loaded.pack_name(pack), backend, on_status=say))
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
    api_only: Annotated[
        bool,
        typer.Option(
            "--api-only",
            help="Run no task here: leave them to `fabric worker` processes on the database.",
        ),
    ] = False,
) -> None:
    """Run the HTTP task service (POST /tasks, live events, results)."""
    from .serve import run_service

    flags = {"--host": (("serve", "host"), host), "--port": (("serve", "port"), port)}
    loaded = load(config, False, flags)
    try:
        run_service(loaded, runs_tasks=not api_only)
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
    as_html: Annotated[
        bool,
        typer.Option(
            "--html", help="Write the run as one self-contained HTML file (<run_id>.html here)."
        ),
    ] = False,
    out: Annotated[
        Path | None, typer.Option("--out", help="With --html: the file to write instead.")
    ] = None,
) -> None:
    """Show a run's timeline: steps, tool calls with durations, final payload, tokens; or,
    with --html, write it as a page to open in a browser or send to someone."""
    from .show import show_events

    if out is not None and not as_html:
        fail(ConfigError("--out goes with --html", hint="fabric show RUN --html --out FILE"),
             as_json=as_json, code=2)  # fmt: skip
    if as_html and (follow or as_json or step is not None or kind):
        fail(ConfigError("--html writes the whole run; it takes no --step, --kind, --follow or "
                         "--json", hint="fabric show RUN --html [--out FILE]"),
             as_json=as_json, code=2)  # fmt: skip
    path, events = read_run(run, lambda: load(config, as_json).runs_dir, as_json)
    if as_html:
        from .share import write_share

        try:
            written = write_share(events, path, secrets=output_secrets(), out=out)
        except OSError as exc:
            fail(ConfigError(f"cannot write the HTML file: {exc}",
                             hint="pass --out with a file in a folder you can write"),
                 as_json=False, code=2)  # fmt: skip
        typer.echo(str(written))
        return
    try:
        show_events(events, path, sys.stdout, step=step, kinds=kind, follow=follow, as_json=as_json)
    except FabricError as exc:  # a line appended by a newer fabric while following
        fail(exc, as_json=as_json, code=2)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


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

    from .replay_cmd import run_replay
    from .show import find_runlog

    loaded = load(config, as_json)
    try:
        path = find_runlog(run, lambda: loaded.runs_dir)
        code = run_replay(loaded, path, live=live_tools, as_json=as_json)
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    raise typer.Exit(code)


app.command()(resume)
app.command()(worker)
app.command(name="eval")(eval_command)
app.add_typer(mcp_app, name="mcp")
app.add_typer(config_app, name="config")
app.add_typer(export_app, name="export")
app.add_typer(memory_app, name="memory")


def main() -> None:
    one_command(app, sys.argv[1:])()


def one_command(whole: typer.Typer, args: list[str]) -> typer.Typer:
    """``whole`` holding only the command that ``args`` start with: before running one
    command, typer works out the options of every command it holds (about 40 ms for all of
    fabric's, a tenth of a one-step run), and a command's help, options and errors are its
    own. Anything else (no command, an option first, an unknown name) gets ``whole``, whose
    help and errors list every command."""
    name = args[0] if args else ""
    commands = [
        c for c in whole.registered_commands
        if (c.name or get_command_name(getattr(c.callback, "__name__", ""))) == name
    ]  # fmt: skip
    groups = [g for g in whole.registered_groups if g.name == name]
    if not commands and not groups:
        return whole
    one = copy.copy(whole)
    one.registered_commands, one.registered_groups = commands, groups
    return one


if __name__ == "__main__":
    main()

"""Packs without code: ``fabric init`` (a config with a first YAML pack), ``fabric pack new``
(one more YAML pack in the config) and ``fabric packs --check`` (every pack, each problem
with its key and line)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .options import ConfigOpt
from .startup import fail, load, say

if TYPE_CHECKING:
    from fabric.config.loader import LoadedConfig
    from fabric.infrastructure.packs.entry_points import InstalledPack

FIRST_PACK = "helper"

pack_app = typer.Typer(
    help="Make packs: `fabric pack new NAME` adds a pack written in YAML to fabric.yaml.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def init(
    folder: Annotated[
        Path,
        typer.Argument(
            help="Where to write fabric.yaml (default: here).", metavar="FOLDER", file_okay=False
        ),
    ] = Path(),
    pack: Annotated[str, typer.Option("--pack", help="The first pack's name.")] = FIRST_PACK,
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace an existing fabric.yaml (kept as fabric.yaml.bak)."),
    ] = False,
) -> None:
    """Write a commented fabric.yaml with fabric's packs and a first pack written in YAML, then
    check this machine as `fabric doctor` does. Leaves an existing file alone unless --force."""
    from fabric.config.scaffold import first_config
    from fabric.domain.errors import ConfigError
    from fabric.infrastructure.tools.library import LIBRARY

    _check_name(pack)
    text, line = first_config(pack, list(LIBRARY))
    target = folder / "fabric.yaml"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        kept = _write(target, text, force=force)
    except OSError as exc:
        fail(ConfigError(f"cannot write {target}: {exc}", hint="pick a folder you can write"),
             as_json=False, code=2)  # fmt: skip
    if kept is None:
        typer.echo(f"left {target} alone: it exists already (fabric init --force replaces it, "
                   f"keeping it as {target.name}.bak)")  # fmt: skip
    else:
        typer.echo(f"wrote {target}: fabric's packs and {pack!r}, a pack written in YAML "
                   f"(line {line}){f'; the old file is {kept}' if kept else ''}")  # fmt: skip
        typer.echo(f'try it:      fabric run --pack {pack} "What is in this folder?"')
        typer.echo("add a pack:  fabric pack new NAME")
        typer.echo("check packs: fabric packs --check")
    typer.echo("")
    _doctor(target)


def _write(target: Path, text: str, *, force: bool) -> str | None:
    """Write ``target`` unless it exists (None: left alone) or ``force``; with ``force`` the
    old file is kept beside it. Returns the kept copy's name ('' when there was none)."""
    if target.exists() and not force:
        return None
    kept = ""
    if target.exists():
        backup = target.with_name(target.name + ".bak")
        target.replace(backup)
        kept = str(backup)
    _write_new(target, text)
    return kept


def _write_new(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (a file beside it, renamed over it), keeping the
    permissions of the file it replaces."""
    fresh = path.with_name(f".{path.name}.{os.getpid()}.new")
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        fresh.replace(path)
    except OSError:
        fresh.unlink(missing_ok=True)
        raise


def _doctor(config: Path) -> None:
    from .doctor import gather, print_report

    print_report(gather(load(config, False)), sys.stdout)


@pack_app.command("new")
def new(
    name: Annotated[
        str, typer.Argument(help="The pack's name: letters, digits, - and _.", metavar="NAME")
    ],
    config: ConfigOpt = None,
) -> None:
    """Add a pack written in YAML to fabric.yaml (at the end of its packs), from a template
    with every key explained; then check it with `fabric packs --check`."""
    from fabric.config.loader import PACKAGED
    from fabric.config.scaffold import pack_text, with_pack
    from fabric.domain.errors import ConfigError, FabricError
    from fabric.infrastructure.packs.entry_points import installed_packs
    from fabric.infrastructure.packs.registry import load_pack
    from fabric.infrastructure.tools.library import LIBRARY

    _check_name(name)
    loaded = load(config, False)
    if loaded.source == PACKAGED:
        fail(ConfigError("there is no fabric.yaml here to add the pack to (fabric runs on its "
                         "packaged default)",
                         hint="run `fabric init` first, or name the file with --config"),
             as_json=False, code=2)  # fmt: skip
    installed = installed_packs().get(name)
    if installed is not None and name not in loaded.config.packs:
        fail(ConfigError(f"{name!r} is the name of a pack installed by {installed.origin}: a "
                         "pack of that name in fabric.yaml would hide it",
                         hint=f"choose another name; to give the installed pack settings, "
                         f"declare it with builder: {name}"),
             as_json=False, code=2)  # fmt: skip
    path = Path(loaded.source)
    try:
        text, line = with_pack(loaded.text, loaded.source, name, pack_text(name, list(LIBRARY)))
        _write_new(path, text)
    except ConfigError as exc:
        fail(exc, as_json=False, code=2)
    except OSError as exc:
        fail(ConfigError(f"cannot write {path}: {exc}", hint="check the file's permissions"),
             as_json=False, code=2)  # fmt: skip
    try:
        load_pack(load(path, False), name)
    except FabricError as exc:  # the template and the config disagree: leave it as it was
        _write_new(path, loaded.text)
        fail(exc, as_json=False, code=2)
    typer.echo(f"added pack {name!r} to {path} (line {line}): a pack written in YAML; edit its "
               "system_prompt, tools and finish_schema there")  # fmt: skip
    typer.echo("check it:  fabric packs --check")
    typer.echo(f'try it:    fabric run --pack {name} "a task"')


def _check_name(name: str) -> None:
    from fabric.config.schema import pack_name_problem
    from fabric.domain.errors import ConfigError

    problem = pack_name_problem(name)
    if problem:
        fail(ConfigError(problem, hint="e.g. fabric pack new code-reviewer"),
             as_json=False, code=2)  # fmt: skip


def check_packs(loaded: LoadedConfig, as_json: bool) -> int:
    """``fabric packs --check``: build every pack the config declares or an installed
    distribution offers, without starting a model or a tool; say what is wrong with each and
    where. 0 when all are good, 1 otherwise."""
    from fabric.infrastructure.packs.entry_points import ignored_packs
    from fabric.infrastructure.packs.registry import available_packs

    rows = [
        {"name": name, "origin": origin, **_problem_of(loaded, name)}
        for name, origin in available_packs(loaded).items()
    ]
    default = loaded.config.default_pack
    if default is not None and default not in {row["name"] for row in rows}:
        where = loaded.where("default_pack")
        error = {"code": "config_error", "message": f"{where}: default_pack: no pack named "
                 f"{default!r}", "hint": "name one of the packs listed here"}  # fmt: skip
        rows.append({"name": "(default_pack)", "origin": loaded.source, "ok": False,
                     "error": error})  # fmt: skip
    ignored = [_ignored(p) for p in ignored_packs()]
    ok = all(row["ok"] for row in rows)
    if as_json:
        typer.echo(json.dumps({"ok": ok, "packs": rows, "ignored": ignored}, indent=2))
    else:
        _print_check(rows, ignored)
    return 0 if ok else 1


def _problem_of(loaded: LoadedConfig, name: str) -> dict[str, Any]:
    """``ok``, and the ``error`` when pack ``name`` has problems (all of them, in one)."""
    from fabric.infrastructure.packs.pack_checks import one_error
    from fabric.infrastructure.packs.registry import check_pack

    problems = check_pack(loaded, name)
    if not problems:
        return {"ok": True}
    return {"ok": False, "error": one_error(problems).as_dict()}


def _ignored(pack: InstalledPack) -> dict[str, str]:
    return {
        "name": pack.name,
        "origin": pack.origin,
        "folder": pack.folder,
        "why": f"{pack.origin} is declared in {pack.folder}, a folder on the import path "
        "outside this Python's site-packages (a run may write there); fabric loads packs "
        "only from installed distributions: pip install it to use it",
    }


def _print_check(rows: list[dict[str, Any]], ignored: list[dict[str, str]]) -> None:
    width = max((len(row["name"]) for row in rows), default=0)
    for row in rows:
        mark = "ok     " if row["ok"] else "PROBLEM"
        typer.echo(f"{mark}  {row['name']:<{width}}  ({row['origin']})")
        if not row["ok"]:
            for line in row["error"]["message"].splitlines():
                typer.echo(f"         {line}")
            if row["error"].get("hint"):
                typer.echo(f"         hint: {row['error']['hint']}")
    for pack in ignored:
        typer.echo(f"IGNORED  {pack['name']:<{width}}  {pack['why']}")
    bad = sum(not row["ok"] for row in rows)
    if bad:
        typer.echo(f"problems in {bad} of {len(rows)}: fix what is said above, then run "
                   "`fabric packs --check` again")  # fmt: skip
    else:
        typer.echo(f"all {len(rows)} packs are ready")


def list_packs(loaded: LoadedConfig, as_json: bool) -> None:
    """``fabric packs``: each pack with where it comes from and the model a run would use. A
    config pack that cannot be built stops the listing (exit 2); an installed one is listed
    with its error."""
    import asyncio

    from fabric.domain.errors import ConfigError
    from fabric.infrastructure.packs.entry_points import ignored_packs
    from fabric.infrastructure.packs.registry import available_packs
    from fabric.interfaces.compose import build_runner
    from fabric.interfaces.models_report import packs_report

    from .models_view import print_packs

    runner = build_runner(loaded, on_status=say)

    async def listing() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        try:
            for name, origin in available_packs(loaded).items():
                try:
                    rows += await packs_report(runner, [name])
                except ConfigError as exc:
                    if name in loaded.config.packs:
                        raise
                    rows.append({"name": name, "origin": origin, "error": exc.as_dict()})
        finally:
            await runner.aclose()
        return rows

    try:
        rows = asyncio.run(listing())
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    for pack in ignored_packs():
        say(f"ignored pack {pack.name!r}: {_ignored(pack)['why']}")
    for row in rows:
        if "model" in row:
            row["model"] = f"{row['model']} ({row['asks']})"
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(f"no packs in {loaded.source}")
    print_packs(rows, sys.stdout)

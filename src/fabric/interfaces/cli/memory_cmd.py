"""``fabric memory``: the facts runs kept for later runs (ADR 0030), read and deleted by the
user. ``list`` (a workspace's, or every workspace's), ``show`` (one fact whole), ``search`` (as
a run's ``search_memory`` does) and ``delete`` (facts by id, or a workspace's all; asks first,
unless ``--yes``). The store is fabric's (``config/data.py``), not the config's: no config is
loaded."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar

import typer

from .options import JsonOpt
from .startup import fail

if TYPE_CHECKING:
    from fabric.application.memory import Fact
    from fabric.infrastructure.additions.memory_store import MemoryStore

memory_app = typer.Typer(
    help="Facts runs kept for later runs: list, show, search, delete.",
    no_args_is_help=True,
)

WorkspaceOpt = Annotated[
    Path | None,
    typer.Option(
        "--workspace",
        "-w",
        help="The workspace whose memories (default: the current folder). Symlinks are "
        "followed; a folder that no longer exists is named by the path it had.",
        show_default=False,
    ),
]
_SHORT = 96
"""The most characters of a fact a listing shows (``show`` shows it whole)."""
_T = TypeVar("_T")


@memory_app.command(name="list")
def list_facts(
    workspace: WorkspaceOpt = None,
    every: Annotated[bool, typer.Option("--all", help="Every workspace's memories.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """List a workspace's memories (the current folder's by default): id, when, the fact."""
    if every and workspace is not None:
        _refuse("--all lists every workspace; it takes no --workspace", as_json)
    store = _store()
    key = None if every else _key(workspace)
    facts = _safely(lambda: store.facts(key), as_json)
    if as_json:
        _print_json({"store": str(store.path), "workspace": key, "facts": _json(facts)})
        return
    if not facts:
        where = "any workspace" if key is None else key
        _say(f"no memories of {where} ({_where(store)})")
        return
    shown = None
    for fact in facts:
        if fact.workspace != shown:
            shown = fact.workspace
            count = sum(f.workspace == shown for f in facts)
            _say(f"{shown}: {count} fact{'s' if count != 1 else ''}")
        _say(_line(fact))


@memory_app.command(name="show")
def show(
    fact_id: Annotated[
        int, typer.Argument(metavar="ID", help="The fact's id (fabric memory list).")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Show one memory whole: the fact, its workspace, when it was kept, by which run and
    pack."""
    store = _store()
    facts = _known(store, [fact_id], as_json)
    fact = facts[0]
    if as_json:
        _print_json(fact.as_json())
        return
    _say(
        f"memory {fact.id}\n  workspace: {fact.workspace}\n  kept:      {fact.created}\n"
        f"  run:       {fact.run_id}\n  pack:      {fact.pack}\n  fact:      {fact.text}"
    )


@memory_app.command(name="search")
def search(
    query: Annotated[str, typer.Argument(help="Words to look for (any of them).")],
    workspace: WorkspaceOpt = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="The most facts shown.")] = 10,
    as_json: JsonOpt = False,
) -> None:
    """Search a workspace's memories as a run's search_memory does: the best matches first,
    then the newest."""
    from fabric.application.memory import search_terms

    store = _store()
    key = _key(workspace)
    facts = _safely(lambda: store.search(key, search_terms(query), limit), as_json)
    if as_json:
        _print_json({"store": str(store.path), "workspace": key, "facts": _json(facts)})
        return
    if not facts:
        _say(f"no memory of {key} matches {query!r} ({_where(store)})")
    for fact in facts:
        _say(_line(fact))


@memory_app.command(name="delete")
def delete(
    fact_ids: Annotated[
        list[int] | None, typer.Argument(metavar="[ID]...", help="The facts' ids.")
    ] = None,
    workspace: WorkspaceOpt = None,
    every: Annotated[
        bool, typer.Option("--all", help="With --workspace: every fact of that workspace.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete memories: the facts named by id, or with --workspace DIR --all every fact of a
    workspace. Says what it will delete and asks first, unless --yes."""
    ids = list(fact_ids or ())
    if every == bool(ids) or (every and workspace is None) or (ids and workspace is not None):
        _refuse(
            "name the facts to delete by id, or a workspace with --workspace DIR --all",
            as_json,
            hint="fabric memory delete 12 14, or fabric memory delete --workspace . --all",
        )
    store = _store()
    if ids:
        doomed = _known(store, ids, as_json)
    else:
        doomed = _safely(lambda: store.facts(_key(workspace)), as_json)
        if not doomed:
            _say(f"no memories of {_key(workspace)} ({_where(store)}): nothing to delete")
            return
    if not yes:
        _confirm(doomed, as_json)
    gone = _safely(lambda: store.delete([f.id for f in doomed]), as_json)
    if as_json:
        _print_json({"status": "deleted", "deleted": gone})
    else:
        typer.echo(f"deleted {_memories(len(gone))}")


def _confirm(doomed: list[Fact], as_json: bool) -> None:
    """Ask at the terminal; refuse when there is none to ask at."""
    if not sys.stdin.isatty():
        _refuse(
            f"deleting {_memories(len(doomed))} needs a yes, and there is no terminal to ask at",
            as_json,
            hint="add --yes to delete without asking",
        )
    for fact in doomed[:20]:
        _say(_line(fact), err=True)
    if len(doomed) > 20:
        typer.echo(f"  ... and {len(doomed) - 20} more", err=True)
    if not typer.confirm(f"Delete {_memories(len(doomed))}?", default=False, err=True):
        typer.echo("nothing deleted", err=True)
        raise typer.Exit(1)


def _store() -> MemoryStore:
    from fabric.config.data import memory_path
    from fabric.infrastructure.additions.memory_store import MemoryStore

    return MemoryStore(memory_path())


def _key(workspace: Path | None) -> str:
    from fabric.application.memory import workspace_key

    return workspace_key(Path.cwd() if workspace is None else workspace.expanduser())


def _known(store: MemoryStore, ids: list[int], as_json: bool) -> list[Fact]:
    """The facts with these ids, or exit 2 naming those there are not."""
    from fabric.domain.errors import ConfigError

    if not store.exists():
        fail(
            ConfigError(
                f"there are no memories yet: no store at {store.path}",
                hint="a pack with memory: {enabled: true} keeps facts there when a run "
                "remembers one",
            ),
            as_json=as_json,
            code=2,
        )
    facts = _safely(lambda: store.get(ids), as_json)
    missing = sorted(set(ids) - {f.id for f in facts})
    if missing:
        names = ", ".join(map(str, missing))
        fail(
            ConfigError(
                f"no memory with id {names} in {store.path}",
                hint="fabric memory list --all shows every memory and its id",
            ),
            as_json=as_json,
            code=2,
        )
    return facts


def _safely(call: Callable[[], _T], as_json: bool) -> _T:
    """``call()``, or exit 1 saying why the store cannot be used."""
    from fabric.domain.errors import FabricError

    try:
        return call()
    except FabricError as exc:
        fail(exc, as_json=as_json, code=1)


def _say(text: str, *, err: bool = False) -> None:
    """A line for a person: workspaces are folder names, and nothing in one may drive the
    terminal (``for_terminal``)."""
    from .event_lines import for_terminal

    typer.echo(for_terminal(text), err=err)


def _refuse(message: str, as_json: bool, hint: str = "") -> NoReturn:
    from fabric.domain.errors import ConfigError

    fail(ConfigError(message, hint=hint), as_json=as_json, code=2)


def _where(store: MemoryStore) -> str:
    return f"store {store.path}" if store.exists() else f"no store yet at {store.path}"


def _line(fact: Fact) -> str:
    text = fact.text if len(fact.text) <= _SHORT else fact.text[: _SHORT - 1] + "…"
    return f"  {fact.id:>5}  {fact.created}  {text}"


def _json(facts: list[Fact]) -> list[dict[str, object]]:
    return [f.as_json() for f in facts]


def _print_json(value: object) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _memories(count: int) -> str:
    return f"{count} memor{'y' if count == 1 else 'ies'}"

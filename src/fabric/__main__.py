"""``fabric`` and ``python -m fabric``: guard the import path, then run the command line.

The guard comes first, before any library is imported: a module a run planted in a folder on
the import path (the config folder, the current folder, an editable install's project root)
must never be what a later ``import`` finds (see ``infrastructure/packs/import_guard.py``)."""

from __future__ import annotations

STARTUP_GC_THRESHOLD = 200_000
"""New objects between two collections while fabric starts (Python's default: 700)."""


def main() -> None:
    import gc
    import os
    import sys

    # Start-up builds ~100k long-lived objects (typer, pydantic schemas, the config): the
    # cyclic collector would scan them again and again (76-104 ms of a one-step run). It
    # collects rarely until a command settles down to its work (``startup.settle``).
    gc.set_threshold(STARTUP_GC_THRESHOLD)
    # pydantic looks for plugins in every installed distribution's entry points (20-35 ms);
    # fabric uses none. Set PYDANTIC_DISABLE_PLUGINS= (empty) to have yours loaded.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # httpx imports its own command line (click, rich, pygments: ~30% of what `fabric run`
    # imports) whenever they are installed, as typer installs them; fabric never calls it.
    # A None entry makes that one import fail, which httpx expects (its `main` then only
    # says the extra is missing); the `httpx` command, a process of its own, is unaffected.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    from fabric.infrastructure.packs.import_guard import guard

    guard()
    if sys.argv[1:] == ["--help"] and _top_help():
        return
    from fabric.interfaces.cli.app import main as run_cli

    run_cli()


def _top_help() -> bool:
    """Print ``fabric --help`` from the copy kept beside the command line, as typer renders
    it for a terminal of 80 columns or more (``interfaces/cli/top_help.py``): typer alone
    takes longer to import than the answer should. False (typer answers) for ``python -m
    fabric``, a narrower terminal or a copy that cannot be read. Called after the import
    guard, like every import."""
    import os
    import sys

    # os.path, not pathlib or shutil: importing them would be a quarter to half of the time
    if os.path.basename(sys.argv[0]) != "fabric":  # noqa: PTH119 (`python -m fabric`: typer says so)
        return False
    if _columns() < 80:
        return False
    here = os.path.dirname(__file__)  # noqa: PTH120
    copy = os.path.join(here, "interfaces", "cli", "top_help.txt")  # noqa: PTH118
    try:
        with open(copy, encoding="utf-8") as file:  # noqa: PTH123
            text = file.read()
    except OSError:
        return False
    sys.stdout.write(text)
    sys.stdout.flush()
    return True


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` (click's measure) tells it:
    ``COLUMNS``, else the terminal of standard output, else 80."""
    import os
    import sys

    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


if __name__ == "__main__":
    main()

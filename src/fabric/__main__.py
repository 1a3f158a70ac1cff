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
    from fabric.interfaces.cli.app import main as run_cli

    run_cli()


if __name__ == "__main__":
    main()

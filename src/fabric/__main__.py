"""``fabric`` and ``python -m fabric``: guard the import path, then run the command line.

The guard comes first, before any library is imported: a module a run planted in a folder on
the import path (the config folder, the current folder, an editable install's project root)
must never be what a later ``import`` finds (see ``infrastructure/packs/import_guard.py``)."""

from __future__ import annotations


def main() -> None:
    from fabric.infrastructure.packs.import_guard import guard

    guard()
    from fabric.interfaces.cli.app import main as run_cli

    run_cli()


if __name__ == "__main__":
    main()

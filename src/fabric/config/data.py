"""fabric's data folder: what it keeps for the user across runs, beside its settings and its
caches. Today that is the memory store (ADR 0030): ``$XDG_DATA_HOME/fabric/memory.sqlite3``,
else ``~/.local/share/fabric/memory.sqlite3``, or the file ``FABRIC_MEMORY_DB`` names.

Runs may neither read nor write the store's folder (``compose.build_runner`` protects it), nor
work in it (``application/workspaces.py``); it is read where it is needed, never loaded with
the config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

MEMORY_ENV = "FABRIC_MEMORY_DB"
"""Names the memory store's file instead of the data folder's (tests, a second store); a
relative path is taken from the current folder. Give it a folder of its own: runs may not work
in that folder, nor touch anything in it."""
MEMORY_FILE = "memory.sqlite3"


def data_folder(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/fabric`` when that is an absolute path, else ``~/.local/share/fabric``."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_DATA_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "fabric"
    home = Path(env["HOME"]) if env.get("HOME") else Path("~").expanduser()
    return home / ".local" / "share" / "fabric"


def memory_path(env: Mapping[str, str] | None = None) -> Path:
    """The memory store's file (absolute; it may not exist yet)."""
    env = os.environ if env is None else env
    named = env.get(MEMORY_ENV, "")
    if named:
        return Path(named).expanduser().absolute()
    return data_folder(env) / MEMORY_FILE

"""Which folders a run may work in: one check for ``fabric run --workspace`` and ``POST /tasks``.

A run's tools read and write anything inside its workspace, so the workspace must not be a
place that holds much more than one project, or fabric's own state:

- the filesystem root, the user's home folder, or a folder that contains the home folder;
- fabric's runs folder, or a folder inside it (a run could rewrite other runs' logs);
- fabric's own folders, or a folder inside them: its settings (``~/.config/fabric``, with the
  run ledger, and ``$XDG_CONFIG_HOME/fabric``, the user's config), the service's tasks
  (the folder of ``serve.durable_database`` when it is a file), the API token's folder (that
  of ``serve.token_file``) and the cache (``$XDG_CACHE_HOME/fabric``, else
  ``~/.cache/fabric``), and the memory store's folder (``$XDG_DATA_HOME/fabric``, else
  ``~/.local/share/fabric``, or that of ``FABRIC_MEMORY_DB``: ``config/data.py``).
  Such a folder that is the config's own folder (or holds the home folder) does not count:
  that folder is the usual workspace of ``fabric run``, and fabric's files in it are kept
  from the run's tools one by one instead (ADRs 0009 and 0013). The memory store's folder
  counts wherever it is: the tools and commands never see any of it (ADR 0030), so a run in
  it could read no file of its project.

The service also names the folders a task's workspace must lie under (``serve.workspace_roots``).
Every refusal is a ``ConfigError`` that says why and what to do instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from fabric.config.data import MEMORY_ENV, memory_path
from fabric.config.loader import LoadedConfig, settings_folders
from fabric.domain.errors import ConfigError

from .paths import resolved

_ELSEWHERE = "use a project folder of its own"
_MEMORIES = "memories"


def check_workspace(
    folder: str | os.PathLike[str],
    loaded: LoadedConfig,
    *,
    runs_dir: Path,
    roots: Sequence[Path] = (),
) -> Path:
    """The workspace ``folder`` as a real path (symlinks followed), or a ``ConfigError`` saying
    why no run may work there. ``~`` is the user's home; a relative path is taken from the
    first of ``roots``, or from the current folder when no roots are given."""
    folder = _resolve(folder, roots[0] if roots else None)
    if roots and not any(folder.is_relative_to(resolved(r)) for r in roots):
        listed = ", ".join(str(r) for r in roots)
        raise ConfigError(
            f"workspace {folder} is not under the service's workspace roots ({listed})",
            hint="use a folder under one of them, or add a root to serve.workspace_roots",
        )
    if folder == Path(folder.anchor):
        raise ConfigError(
            f"workspace {folder} is the filesystem root: a run there could read and change "
            "every file on the machine",
            hint=_ELSEWHERE,
        )
    home = _home()
    if home is not None and home.is_relative_to(folder):
        what = "your home folder" if home == folder else f"a folder that contains {home}"
        raise ConfigError(
            f"workspace {folder} is {what}: a run there could read and change all your files "
            "(keys, shell and git settings, other projects)",
            hint=f"{_ELSEWHERE}, e.g. {home / 'projects' / 'name'}",
        )
    settings = loaded.config.serve
    xdg = tuple(
        os.environ.get(name, "")
        for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", MEMORY_ENV)
    )
    key = (loaded.base_dir, settings.durable_database, settings.token_file, runs_dir, home, *xdg)
    if key not in _FOLDERS:  # resolving them costs a few syscalls each: once per process
        _FOLDERS[key] = _fabric_folders(loaded, runs_dir, home)
    for place, holds in _FOLDERS[key].items():
        if folder.is_relative_to(place):
            where = "is" if folder == place else f"lies inside {place},"
            named = _MEMORIES in holds and os.environ.get(MEMORY_ENV)
            raise ConfigError(
                f"workspace {folder} {where} fabric's folder for {holds}: a run there could "
                "change them",
                hint=f"{_ELSEWHERE}, outside {place}"
                + (f"; or name a store in a folder of its own in {MEMORY_ENV}" if named else ""),
            )
    try:
        is_folder = folder.is_dir()
    except OSError as exc:  # e.g. a name too long for the filesystem
        raise ConfigError(
            f"workspace {folder} cannot be used: {exc.strerror or exc}",
            hint="name an existing folder by a plain path",
        ) from exc
    if not is_folder:
        raise ConfigError(
            f"workspace {folder} is not a folder", hint="create it, or name an existing folder"
        )
    return folder


def _resolve(folder: str | os.PathLike[str], base: Path | None) -> Path:
    text = os.fspath(folder)
    if "\0" in text:
        raise ConfigError(
            f"the workspace path {text!r} contains a NUL character, which no path can hold",
            hint="send the folder's path as plain text",
        )
    try:
        path = Path(text).expanduser()
        if base is not None and not path.is_absolute():
            path = base / path
        return resolved(path)
    except (OSError, RuntimeError) as exc:  # a symlink loop, an unknown ~user
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            f"the workspace path {text!r} cannot be used: {reason}",
            hint="name an existing folder by a plain path",
        ) from exc


def _home() -> Path | None:
    try:
        return resolved(Path.home())
    except (OSError, RuntimeError, KeyError):  # no HOME and no passwd entry
        return None


_FOLDERS: dict[tuple[object, ...], Mapping[Path, str]] = {}


def _fabric_folders(loaded: LoadedConfig, runs_dir: Path, home: Path | None) -> Mapping[Path, str]:
    """fabric's folders, each with what it holds; a folder inside one is refused too."""
    settings = loaded.config.serve
    cache = os.environ.get("XDG_CACHE_HOME", "")
    candidates = [
        *((folder, "your settings and the run ledger") for folder in settings_folders()),
        (Path(settings.token_file).parent, "the API token"),
        ((Path(cache) if Path(cache).is_absolute() else Path("~/.cache")) / "fabric", "caches"),
    ]
    if "://" not in settings.durable_database:  # a SQLite file
        database = loaded.base_dir / settings.durable_database
        candidates.append((database.parent, "the service's tasks and durable runs"))
    config_dir = resolved(loaded.base_dir)
    folders = {resolved(runs_dir): ["runlogs"]}
    for place, holds in candidates:
        try:
            real = resolved(place.expanduser())
        except (OSError, RuntimeError):
            continue
        shared = real == config_dir or real == Path(real.anchor)
        if not shared and not (home is not None and home.is_relative_to(real)):
            folders.setdefault(real, []).append(holds)
    # kept from the tools and commands as a whole (compose), wherever it is: never shared
    folders.setdefault(resolved(memory_path().parent), []).append(_MEMORIES)
    return {folder: ", ".join(dict.fromkeys(holds)) for folder, holds in folders.items()}

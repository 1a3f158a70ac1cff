"""Packs from installed Python distributions: the entry points of the group ``fabric.packs``,
each a builder ``module:callable`` named as the pack::

    [project.entry-points."fabric.packs"]
    lint = "fabric_lintpack:build"

Only distributions installed in the interpreter's own folders count (its site-packages and the
user site: ``import_guard.trusted_roots``), as ``pip install`` puts them. Any other folder on
the import path (the config folder, the current folder, ``PYTHONPATH``, an editable project)
may be a run's workspace, and a ``*.dist-info`` folder a run left there would otherwise add a
pack, or take an installed pack's name, at fabric's next start. Such declarations are listed
as ignored and never loaded; ``.pth`` files are read by Python only in site-packages, which
runs cannot write (ADR 0013). A builder's module is imported with the import guard as it
stands: its name is not added to what open folders may provide, so a module of the same name
a run left in the workspace is not what loads.

``importlib.metadata`` is imported only here, and only when a command lists the packs or names
one the config does not declare: never on the way to running a pack of the config.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import Struct

from fabric.config.schema import pack_name_problem

from .import_guard import is_open, trusted_roots

if TYPE_CHECKING:
    from importlib.metadata import Distribution

GROUP = "fabric.packs"


class InstalledPack(Struct, frozen=True):
    """A pack an installed distribution declares."""

    name: str
    target: str
    """The builder, ``module:callable``."""
    distribution: str
    version: str
    folder: str
    """Where the distribution is installed (the folder holding its ``*.dist-info``)."""
    problem: str | None = None
    """Why it cannot be loaded as declared (a bad name or target), or None."""

    @property
    def origin(self) -> str:
        return f"{self.distribution} {self.version}"


def installed_packs() -> dict[str, InstalledPack]:
    """The packs of the distributions installed in the interpreter's own folders, by name,
    sorted. A distribution found twice counts where the import path finds it first; of two
    distributions declaring one name, the one whose name sorts first. Looked for again only
    when one of those folders changed (an install or uninstall changes its folder)."""
    global _cache
    entries = _trusted_entries()
    key = tuple((entry, _changed(entry)) for entry in entries)
    if _cache is None or _cache[0] != key:
        found: dict[str, InstalledPack] = {}
        declared = _declared(entries, trusted=True)
        for pack in sorted(declared, key=lambda p: (p.name, _normal(p.distribution))):
            found.setdefault(pack.name, pack)
        _cache = (key, found)
    return dict(_cache[1])


_cache: tuple[tuple[tuple[str, int], ...], dict[str, InstalledPack]] | None = None


def _changed(folder: str) -> int:
    try:
        return Path(folder).stat().st_mtime_ns
    except OSError:
        return 0


def ignored_packs() -> list[InstalledPack]:
    """Packs declared by distributions in folders of the import path outside the
    interpreter's own (never loaded: a run may have written them)."""
    roots = trusted_roots()
    entries = [e for e in sys.path if is_open(e, roots)]
    return list(_declared(entries, trusted=False))


def untrusted_source(module: str) -> str | None:
    """Where ``module`` (and each package on its way) would be imported from, when that is
    outside the interpreter's own folders (an editable install's finder, a folder on the
    import path), found before any of it runs; None when all of it is installed there. The
    packages on the way are imported to look into them, each only once found trusted."""
    from importlib.util import find_spec

    roots = trusted_roots()
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        try:
            spec = find_spec(".".join(parts[:depth]))
        except (ImportError, ValueError):
            return None  # the import itself fails, and says why
        if spec is None:
            return None
        if spec.has_location and spec.origin and is_open(str(Path(spec.origin).parent), roots):
            return spec.origin
    return None


def _trusted_entries() -> list[str]:
    roots = trusted_roots()
    return [e for e in sys.path if e and not is_open(e, roots)]  # folders only


def _declared(entries: list[str], *, trusted: bool) -> Iterator[InstalledPack]:
    """The ``fabric.packs`` entry points of the distributions in ``entries`` (each
    distribution once, as importlib counts them), in import path order."""
    from importlib.metadata import distributions  # only when packs are listed or looked up

    roots = trusted_roots()
    seen: set[str] = set()
    for dist in distributions(path=entries):
        name = dist.metadata["Name"] if dist.metadata is not None else None
        if not name or _normal(name) in seen:
            continue
        seen.add(_normal(name))
        folder = _folder(dist)
        if trusted and (folder is None or is_open(folder, roots)):
            continue  # a finder that reports distributions from elsewhere: not installed here
        for entry in dist.entry_points.select(group=GROUP):
            problem = pack_name_problem(entry.name) or _target_problem(entry.value)
            yield InstalledPack(entry.name, entry.value, name, dist.version, folder or "?", problem)


def _folder(dist: Distribution) -> str | None:
    """The real path of the folder a distribution is installed in, when it is on disk."""
    try:
        return os.path.realpath(str(dist.locate_file("")))
    except (NotImplementedError, OSError, TypeError):
        return None


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _target_problem(target: str) -> str | None:
    module, sep, attr = target.partition(":")
    if sep and module.strip() and attr.strip() and "[" not in attr:
        return None
    return f"its entry point {target!r} is not 'module:callable'"

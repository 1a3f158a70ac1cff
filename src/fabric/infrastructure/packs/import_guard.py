"""Imports from folders a run can write: only the modules fabric means to load, from source.

Python imports a module from the first folder on ``sys.path`` that has it. Some of those
folders are not the interpreter's own: the config folder (for ``packs.mine:build``), the
current folder of ``python -m``, a project root an editable install adds, ``PYTHONPATH``. A run
may write into them (they are often the workspace), so a file it leaves there, ``brotli.py``
say, would be imported by a library's optional ``try: import brotli`` at the next start of
fabric, with the user's full rights. This guard lets such *open* folders provide only the
top-level names fabric asks for (``fabric``, ``packs`` and the modules pack builders name), as
source files or package folders: no compiled extensions, no bytecode-only modules, no cached
bytecode (a planted ``__pycache__/*.pyc`` would run instead of the source), and no guessing
when a module file and a package folder of the same name both exist.

Standard library only: the ``fabric`` command installs it before it imports anything else.
"""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Iterable, Sequence
from importlib.machinery import FileFinder, ModuleSpec, SourceFileLoader
from types import CodeType

ALWAYS = frozenset({"fabric", "packs"})
"""Top-level names open folders may always provide: fabric itself (an editable install) and
the pack folders."""

_allowed: set[str] = set(ALWAYS)
_open: set[str] = set()
_trusted: list[str] = []
_FABRIC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
"""fabric's own package folder: host code, read-only for runs, imported as usual."""
STARTUP_PATH = tuple(sys.path[1:])
"""The import path as the interpreter set it up before this module was first imported (the
``fabric`` command imports it first): the folders ``sitecustomize`` and ``usercustomize`` were
looked for in at start-up, which no guard can cover (``sys.path[0]``, the script's or the
current folder, is added after start-up)."""


class SourceOnlyLoader(SourceFileLoader):
    """Loads a module from its source every time; never reads or writes ``__pycache__``."""

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        return compile(self.get_data(path), path, "exec", dont_inherit=True)


class GuardedFinder:
    """The finder for one open folder (``top``: only allowed top-level names) or a package
    folder inside one: only from source, never a file a run may have written. A path entry
    finder by its methods (``find_spec``, ``invalidate_caches``): importing ``importlib.abc``
    to subclass one would cost every start ~20 ms."""

    def __init__(self, folder: str, *, top: bool = True) -> None:
        self.folder, self.top = folder, top
        self._files = FileFinder(folder, (SourceOnlyLoader, [".py"]))

    def find_spec(self, fullname: str, target: object = None) -> ModuleSpec | None:
        name = fullname.rpartition(".")[2]
        if self.top and ("." in fullname or fullname not in _allowed):
            return None
        package = os.path.join(self.folder, name)
        module = package + ".py"
        if os.path.isdir(package) and os.path.lexists(module):
            raise ImportError(
                f"both {package}/ and {module} exist; fabric will not guess which one is "
                f"yours (a run may have written one of them): delete the one you did not write",
                name=fullname,
            )
        spec = self._files.find_spec(fullname)
        origin = spec.origin if spec is not None and spec.has_location else None
        from .run_ledger import REFUSAL_HINT, refusal, written_during_a_run  # when found only

        window = written_during_a_run(origin) if origin else None
        if origin and window is not None:
            raise ImportError(f"{refusal(origin, window)}; {REFUSAL_HINT}", name=fullname)
        return spec

    def invalidate_caches(self) -> None:
        self._files.invalidate_caches()


def trusted_roots() -> list[str]:
    """The interpreter's own folders: the standard library and site-packages (a virtualenv
    inside a workspace is made read-only for runs, see ADR 0013)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site:
        roots.add(user_site)
    return sorted(os.path.realpath(r) for r in roots if r)


def is_open(entry: str, roots: Sequence[str] | None = None) -> bool:
    """Whether a ``sys.path`` entry is a folder outside the interpreter's own."""
    if not entry or not os.path.isdir(entry):
        return not entry  # '' is the current folder
    real = os.path.realpath(entry)
    return not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots or [])


def _hook(entry: str) -> GuardedFinder:
    folder = os.path.realpath(entry or os.getcwd())
    if entry in _open or folder in _open:
        return GuardedFinder(folder)
    inside = any(folder.startswith(f.rstrip(os.sep) + os.sep) for f in _open if os.path.isabs(f))
    own = [_FABRIC, *_trusted]  # fabric's source and a virtualenv may lie in an open folder
    if inside and is_open(folder, own):
        return GuardedFinder(folder, top=False)  # a package's folder inside an open one
    raise ImportError("not an open folder")  # the next path hook handles it


def guard(entries: Iterable[str] = (), names: Iterable[str] = ()) -> None:
    """Guard ``entries`` (default: every open entry of ``sys.path`` now) and allow ``names``
    as top-level modules from them. Idempotent; later calls add folders and names."""
    roots = trusted_roots()
    _trusted[:] = roots
    chosen = list(entries) if entries else [e for e in sys.path if is_open(e, roots)]
    _allowed.update(names)
    if _hook not in sys.path_hooks:
        sys.path_hooks.insert(0, _hook)
    for entry in chosen:
        _open.add(entry)
        _open.add(os.path.realpath(entry or os.getcwd()))
        sys.path_importer_cache.pop(entry, None)


def open_folders() -> list[str]:
    """The folders guarded so far (real paths)."""
    return sorted(p for p in _open if os.path.isabs(p))

"""The run ledger: which folder each run worked in, and when. fabric never loads configuration
or imports pack code that a run may have written.

Existing host code is read-only for a run (ADR 0013), but a run can *create* files that
fabric would pick up at its next start: a ``fabric.yaml`` in a folder where fabric ran on its
packaged default, or a pack module a config names but nobody has written yet. No sandbox can
forbid one name in a writable folder, so fabric remembers instead: every run appends its
workspace and start time here, and its end time when it ends. A file whose status-change time
(ctime, which no program can set back) falls inside a run's window, in a folder under that
run's workspace, was written (or renamed, or touched) while the run could write there, and is
refused with a message that says how to accept it: any change the user makes afterwards
moves its ctime past the window.

The ledger lives in ``~/.config/fabric`` (hidden from every command) as JSON lines. A run whose
fabric died without writing its end is closed by the next reader (its window ends then).
Standard library only: the import guard consults it before anything else is imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass

_MAX_BYTES = 4 * 1024 * 1024
_KEEP_RUNS = 20_000
"""When the ledger passes _MAX_BYTES it is rewritten with the newest _KEEP_RUNS runs."""

_cache: tuple[float, int, dict[str, Window]] | None = None


@dataclass
class Window:
    """One run's time in one workspace."""

    run: str
    workspace: str
    start: float
    end: float | None
    pid: int


def ledger_path() -> str:
    return os.path.join(os.path.expanduser("~"), ".config", "fabric", "run-ledger.jsonl")


def opened(run_id: str, workspace: str) -> None:
    """Record that run ``run_id`` starts working in ``workspace`` (a real path), now."""
    _append(
        {"run": run_id, "ws": os.path.realpath(workspace), "start": time.time(), "pid": os.getpid()}
    )


def closed(run_id: str, *, trim: bool = True) -> None:
    """Record that run ``run_id`` has ended: nothing it started runs any more."""
    _append({"run": run_id, "end": time.time()}, trim=trim)


def written_during_a_run(path: str) -> Window | None:
    """The run that could have written ``path`` (its last change lies in the run's window,
    and the run's workspace holds it), or None."""
    try:
        changed = os.stat(path).st_ctime
    except OSError:
        return None
    real = os.path.realpath(path)
    for window in _windows().values():
        inside = real == window.workspace or real.startswith(window.workspace.rstrip("/") + "/")
        ended = window.end if window.end is not None else float("inf")
        if inside and window.start <= changed <= ended:
            return window
    return None


def refusal(path: str, window: Window) -> str:
    """What to tell the user about ``path``, written during ``window``."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(window.start))
    return (
        f"{path} was written while run {window.run} (started {when}) could write in "
        f"{window.workspace}: fabric does not load configuration or code a run may have "
        "planted for its next start"
    )


REFUSAL_HINT = (
    "read it; if it is yours, save it again (a change made after the run counts as yours), "
    "or delete it"
)


def _windows() -> dict[str, Window]:
    """Every run in the ledger, read again only when the file changed; runs whose fabric
    died without an end are closed now."""
    global _cache
    path = ledger_path()
    try:
        info = os.stat(path)
    except OSError:
        return {}
    if _cache is not None and _cache[:2] == (info.st_mtime, info.st_size):
        return _cache[2]
    windows: dict[str, Window] = {}
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as lines:
        for line in lines:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                entry = json.loads(line)
                run = str(entry["run"])
                if "start" in entry:
                    windows[run] = Window(
                        run, str(entry["ws"]), float(entry["start"]), None, int(entry["pid"])
                    )
                elif run in windows:
                    windows[run].end = float(entry["end"])
    for window in windows.values():
        if window.end is None and not _alive(window.pid):
            closed(window.run, trim=False)  # its fabric died: the run cannot write any more
            window.end = time.time()
    _cache = (info.st_mtime, info.st_size, windows)
    return windows


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _append(entry: dict[str, object], *, trim: bool = True) -> None:
    path = ledger_path()
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line)  # one write of one short line: appends do not interleave
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if trim and size > _MAX_BYTES:
        _trim(path)


def _trim(path: str) -> None:
    """Keep the newest runs (open ones always): rewrite beside, then rename over."""
    windows = _windows()
    keep = sorted(windows.values(), key=lambda w: w.start)[-_KEEP_RUNS:]
    keep += [w for w in windows.values() if w.end is None and w not in keep]
    temp = f"{path}.{os.getpid()}.new"
    with open(temp, "w", encoding="utf-8") as out:
        for w in keep:
            start = {"run": w.run, "ws": w.workspace, "start": w.start, "pid": w.pid}
            out.write(json.dumps(start, separators=(",", ":")) + "\n")
            if w.end is not None:
                out.write(json.dumps({"run": w.run, "end": w.end}, separators=(",", ":")) + "\n")
    os.replace(temp, path)

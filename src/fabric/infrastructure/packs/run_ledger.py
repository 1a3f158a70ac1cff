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
fabric died without writing its end is closed by the next reader (its window ends then), which
also audits the run's repositories as its last command's end would have (``git_audit.py``).
Standard library only: the import guard consults it before anything else is imported.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from _thread import _local, get_ident  # threading's own, without importing threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_MAX_BYTES = 256 * 1024
_TRIM_TO = _MAX_BYTES * 3 // 4
_KEEP_RUNS = 5_000
_MERGE_GAP = 1.0
"""When the ledger passes _MAX_BYTES it is rewritten smaller (``_trim``): gone workspaces
dropped, back-to-back windows merged, the newest _KEEP_RUNS windows kept (open ones always),
and no more of the oldest closed ones than fit in _TRIM_TO, so that the next trim is hundreds
of runs away rather than the next run's (a trim reads and writes the whole ledger)."""

_lock_held = _local()
"""Whether this thread holds the ledger's lock (runs open and close windows in threads)."""
_cache: tuple[tuple[str, float, int], list[Window]] | None = None
_audited: list[str] = []
"""What the git audit removed for runs whose fabric died, until ``close_dead`` tells it."""


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
    and the run's workspace holds it), or None. A symlink is judged twice: the link itself
    where it lies, and the file it leads to."""
    places = {os.path.realpath(path)}
    if os.path.islink(path):
        folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        places.add(os.path.join(folder, os.path.basename(path)))
    for place in places:
        try:
            changed = os.lstat(place).st_ctime
        except OSError:
            continue
        for window in _windows():
            inside = place == window.workspace or place.startswith(
                window.workspace.rstrip("/") + "/"
            )
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


def _windows() -> list[Window]:
    """Every window in the ledger, oldest first, read again only when the file changed. A run
    has one window per start (a resumed run has several: each end closes the latest open one);
    windows whose fabric died without an end are closed now."""
    global _cache
    path = ledger_path()
    try:
        info = os.stat(path)
    except OSError:
        return []
    key = (path, info.st_mtime, info.st_size)
    if _cache is not None and _cache[0] == key:
        return _cache[1]
    windows: list[Window] = []
    still_open: dict[str, Window] = {}
    for entry in _entries(path):
        try:  # not contextlib.suppress: this loop runs for every line at every start
            run = str(entry["run"])
            if "start" in entry:
                window = Window(
                    run, str(entry["ws"]), float(entry["start"]), None, int(entry["pid"])
                )
                windows.append(window)
                still_open[run] = window
            elif run in still_open:
                still_open.pop(run).end = float(entry["end"])
        except (KeyError, TypeError, ValueError):
            continue  # a line fabric did not write: it says nothing
    for window in windows:
        if window.end is None and not pid_alive(window.pid):
            closed(window.run, trim=False)  # its fabric died: the run cannot write any more
            window.end = time.time()
            _audit(window)
    _cache = (key, windows)
    return windows


def _entries(path: str) -> list[Any]:
    """The ledger's lines, decoded in one go (a torn last line, left by a crash, is skipped
    by decoding line by line instead)."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    try:
        entries = json.loads("[" + ",".join(line for line in lines if line) + "]")
        return entries if isinstance(entries, list) else []
    except ValueError:
        found = []
        for line in lines:
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
        return found


_open_cache: tuple[tuple[str, int, int], list[tuple[str, int]]] | None = None


def open_runs() -> set[str]:
    """The runs going on now: their window is open and the fabric that runs them is alive
    (the run console's "running"). Read only: unlike the readers that judge files, it closes
    nothing and audits nothing. The ledger is read again only when it changed."""
    global _open_cache
    path = ledger_path()
    try:
        info = os.stat(path)
    except OSError:
        return set()
    key = (path, info.st_mtime_ns, info.st_size)
    if _open_cache is None or _open_cache[0] != key:
        still_open: dict[str, int] = {}
        for entry in _entries(path):
            with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
                run = str(entry["run"])
                if "start" in entry:
                    still_open[run] = int(entry["pid"])
                else:
                    still_open.pop(run, None)
        _open_cache = (key, list(still_open.items()))
    return {run for run, pid in _open_cache[1] if pid_alive(pid)}


def close_dead() -> list[str]:
    """Close the windows of runs whose fabric died (cheap: the ledger is read again only when
    it changed), and audit their repositories, which their last command's end did not: what
    the audit removed, each line told once."""
    _windows()
    told = _audited[:]
    _audited.clear()
    return told


def _audit(window: Window) -> None:
    """The git audit of a dead run's workspace since its start (``git_audit.py``, imported
    only when needed: the import guard imports this module before anything else)."""
    from .git_audit import sweep

    for line in sweep(window.workspace, window.start):
        _audited.append(f"{line} (changed while run {window.run}, whose fabric died, ran)")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts)."""
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
    with _locked(path):  # a trim by another fabric must not lose this line
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if trim and size > _MAX_BYTES:
            _trim(path)


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """The ledger's lock (a file beside it), held while a line is added or the ledger is
    rewritten. Re-entrant within a thread: a trim closes dead windows, adding lines under the
    lock it holds; another thread waits for it like another process."""
    if getattr(_lock_held, "yes", False):
        yield
        return
    fd = os.open(path + ".lock", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _lock_held.yes = True
        yield
    finally:
        _lock_held.yes = False
        os.close(fd)


def _trim(path: str) -> None:
    """Rewrite the ledger (beside, then renamed over) without what can no longer matter:
    windows whose workspace is gone (no file of it can be loaded; one made again later has
    new ctimes), back-to-back windows in one workspace merged (a batch of runs becomes one
    window), and of the closed windows only the newest ``_KEEP_RUNS``, and of those no more
    than fit in ``_TRIM_TO`` beside the open ones; open windows always stay."""
    alive = [w for w in _windows() if w.end is None or os.path.isdir(w.workspace)]
    windows = _merged(alive)
    kept = [(w, _lines(w)) for w in windows if w.end is None]
    room = _TRIM_TO - sum(len(lines.encode()) for _, lines in kept)
    closed = [w for w in reversed(windows) if w.end is not None][:_KEEP_RUNS]  # newest first
    for window in closed:
        lines = _lines(window)
        room -= len(lines.encode())
        if room < 0:
            break
        kept.append((window, lines))
    temp = f"{path}.{os.getpid()}.{get_ident()}.new"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:  # owner-only, like the ledger itself
        out.writelines(lines for _, lines in sorted(kept, key=lambda k: k[0].start))
    os.replace(temp, path)


def _lines(window: Window) -> str:
    """The ledger's lines for ``window``: its start, and its end when it has one."""
    start = {"run": window.run, "ws": window.workspace, "start": window.start, "pid": window.pid}
    lines = json.dumps(start, separators=(",", ":")) + "\n"
    if window.end is not None:
        lines += json.dumps({"run": window.run, "end": window.end}, separators=(",", ":")) + "\n"
    return lines


def _merged(windows: list[Window]) -> list[Window]:
    """Closed windows of one workspace less than ``_MERGE_GAP`` seconds apart, as one (the
    first run's id); oldest first."""
    merged: list[Window] = []
    last: dict[str, Window] = {}
    for window in sorted(windows, key=lambda w: w.start):
        before = last.get(window.workspace)
        if (
            before is not None
            and before.end is not None
            and window.end is not None
            and window.start - before.end <= _MERGE_GAP
        ):
            before.end = max(before.end, window.end)
            continue
        merged.append(window)
        last[window.workspace] = window
    return merged

"""The run ledger (ADR 0013): a file changed while a run could write in its folder is known as
the run's, also after the run was resumed, also through a symlink; a run whose fabric died is
closed by the next reader; a change the user makes after the run is the user's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabric.infrastructure.packs import run_ledger


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def later() -> None:
    """ctime comes from the kernel's coarse clock: step past its granularity."""
    time.sleep(0.05)


def test_a_file_written_in_a_run_is_the_runs_until_the_user_changes_it(home: Path) -> None:
    ws = home / "ws"
    ws.mkdir()
    run_ledger.opened("r1", str(ws))
    later()
    (ws / "fabric.yaml").write_text("planted")
    later()
    run_ledger.closed("r1")
    window = run_ledger.written_during_a_run(str(ws / "fabric.yaml"))
    assert window is not None and window.run == "r1"
    assert "was written while run r1" in run_ledger.refusal(str(ws / "fabric.yaml"), window)
    later()
    os.utime(ws / "fabric.yaml")  # the user saves it again
    assert run_ledger.written_during_a_run(str(ws / "fabric.yaml")) is None


def test_a_resumed_run_keeps_the_window_of_its_first_part(home: Path) -> None:
    ws = home / "ws"
    ws.mkdir()
    run_ledger.opened("r1", str(ws))
    later()
    (ws / "evil.py").write_text("planted")
    later()
    run_ledger.closed("r1")
    later()
    run_ledger.opened("r1", str(ws))  # `fabric resume r1`
    later()
    run_ledger.closed("r1")
    assert run_ledger.written_during_a_run(str(ws / "evil.py")) is not None


def test_a_symlink_a_run_made_is_the_runs_even_to_an_old_file(home: Path) -> None:
    ws, old = home / "ws", home / "old.py"
    ws.mkdir()
    old.write_text("def build(settings): ...\n")
    later()
    run_ledger.opened("r1", str(ws))
    later()
    (ws / "packs.py").symlink_to(old)
    later()
    run_ledger.closed("r1")
    assert run_ledger.written_during_a_run(str(ws / "packs.py")) is not None
    assert run_ledger.written_during_a_run(str(old)) is None  # outside the workspace


def test_a_run_whose_fabric_died_is_closed_by_the_next_reader(home: Path) -> None:
    ws = home / "ws"
    ws.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    run_ledger._append({"run": "r9", "ws": str(ws), "start": time.time(), "pid": int(dead.stdout)})
    later()
    (ws / "fabric.yaml").write_text("planted before fabric was killed")
    later()
    assert run_ledger.written_during_a_run(str(ws / "fabric.yaml")) is not None
    later()
    os.utime(ws / "fabric.yaml")  # after the reader closed the window: the user's change
    assert run_ledger.written_during_a_run(str(ws / "fabric.yaml")) is None
    assert '"run":"r9","end"' in Path(run_ledger.ledger_path()).read_text()


def test_a_long_ledger_is_trimmed_to_what_can_still_matter(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows of workspaces that are gone are dropped, back-to-back runs in one workspace
    become one window; what a kept window says about a file does not change."""
    kept, gone = home / "kept", home / "gone"
    kept.mkdir()
    monkeypatch.setattr(run_ledger, "_MAX_BYTES", 4000)
    run_ledger.opened("first", str(kept))
    later()
    (kept / "fabric.yaml").write_text("planted")
    later()
    run_ledger.closed("first")
    for n in range(40):  # a batch in a folder deleted since, and one in the kept folder
        run_ledger.opened(f"gone{n}", str(gone))
        run_ledger.closed(f"gone{n}")
        run_ledger.opened(f"kept{n}", str(kept))
        run_ledger.closed(f"kept{n}")
    assert len(Path(run_ledger.ledger_path()).read_text()) < 4000  # trimmed as it grew
    run_ledger._trim(run_ledger.ledger_path())  # what the next trim leaves
    text = Path(run_ledger.ledger_path()).read_text()
    assert Path(run_ledger.ledger_path()).stat().st_mode & 0o077 == 0  # still owner-only
    assert "gone" not in text and text.count('"start"') == 1  # one merged window in kept/
    window = run_ledger.written_during_a_run(str(kept / "fabric.yaml"))
    assert window is not None and window.run == "first"


def test_a_trim_leaves_room_so_the_next_runs_do_not_trim_again(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trim keeps the newest windows that fit in three quarters of the limit (and every
    open one, however old), so the ledger is not rewritten again at the next run."""
    folders = [home / f"ws{n}" for n in range(60)]
    for folder in folders:
        folder.mkdir()
    monkeypatch.setattr(run_ledger, "_MAX_BYTES", 8000)
    monkeypatch.setattr(run_ledger, "_TRIM_TO", 6000)
    run_ledger.opened("still-running", str(folders[0]))  # this process: alive, never closed
    for n, folder in enumerate(folders):  # each in its own folder: nothing merges
        run_ledger.opened(f"r{n}", str(folder))
        run_ledger.closed(f"r{n}")
    path = Path(run_ledger.ledger_path())
    text = path.read_text()
    assert len(text.encode()) <= 8000
    assert '"run":"still-running","ws"' in text  # the open window stays
    assert '"run":"r59","ws"' in text and '"run":"r0","ws"' not in text  # newest kept
    run_ledger._trim(str(path))
    assert len(path.read_bytes()) <= 6000
    before = path.stat().st_ino
    run_ledger.opened("next", str(folders[1]))
    run_ledger.closed("next")
    assert path.stat().st_ino == before  # appended to, not rewritten


def test_threads_take_the_ledger_lock_in_turn(home: Path) -> None:
    """Runs open and close their windows in threads: while one thread holds the lock (a
    trim, say), another's line waits for it instead of slipping past."""
    import threading

    ws = home / "ws"
    ws.mkdir()
    path = run_ledger.ledger_path()
    run_ledger.opened("first", str(ws))
    entered, release, done = threading.Event(), threading.Event(), threading.Event()

    def holder() -> None:
        with run_ledger._locked(path):
            entered.set()
            release.wait(10)

    def writer() -> None:
        run_ledger.closed("first")
        done.set()

    first = threading.Thread(target=holder)
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=writer)
    second.start()
    assert not done.wait(0.3)  # held by the other thread: it waits
    release.set()
    first.join(10)
    second.join(10)
    assert done.is_set() and '"run":"first","end"' in Path(path).read_text()

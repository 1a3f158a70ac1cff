"""A run's start (``RunSetup.session``): its runlog is opened and the run entered in the run
ledger in one thread, its confinement looked up in another; a run that never gets past this,
cancelled or broken, leaves no run folder behind and no ledger window open (an open window
would make fabric refuse the user's own later edits in that workspace)."""

from __future__ import annotations

import asyncio
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from fabric.config.loader import load_config
from fabric.infrastructure.packs import run_ledger
from fabric.infrastructure.runlog import JsonlRunLog
from fabric.interfaces.compose import build_runner
from fabric.testing import ScriptedChatClient

CONFIG = """
    llm:
      backends:
        mock: {kind: openai, base_url: "http://127.0.0.1:9/v1", models: {default: m}}
    runs_dir: runs
    packs:
      maker:
        builder: declarative
        description: Makes things.
        system_prompt: You make things.
        tools: [write_file, shell]
        sandbox: {allowed_commands: [python]}
        finish_schema: {type: object, properties: {answer: {type: string}}}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "ws").mkdir()
    (tmp_path / "fabric.yaml").write_text(textwrap.dedent(CONFIG))
    return tmp_path


def _runner(home: Path, **overrides: Any) -> Any:
    loaded = load_config(home / "fabric.yaml")
    return build_runner(loaded, chat_factory=lambda m: ScriptedChatClient([]), **overrides)


def _open_windows(home: Path) -> list[str]:
    ledger = Path(run_ledger.ledger_path())
    text = ledger.read_text() if ledger.exists() else ""
    started = [line for line in text.splitlines() if '"start"' in line]
    ended = {line.split('"')[3] for line in text.splitlines() if '"end"' in line}
    return [line.split('"')[3] for line in started if line.split('"')[3] not in ended]


def test_a_run_cancelled_while_its_runlog_opens_leaves_no_trace(home: Path) -> None:
    asyncio.run(_cancelled_while_opening(home))


async def _cancelled_while_opening(home: Path) -> None:
    runner = _runner(home)
    loaded_pack = runner.pack("maker")
    opening, go_on = threading.Event(), threading.Event()

    def open_log() -> JsonlRunLog:
        opening.set()
        go_on.wait(30)
        return runner.open_runlog("r-cancelled", ())

    async def start() -> None:
        async with runner.setup.session(loaded_pack, home / "ws", None, None, open_log):
            raise AssertionError("the run should not have started")

    task = asyncio.ensure_future(start())
    assert await asyncio.to_thread(opening.wait, 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    go_on.set()  # the thread finishes opening after the run was cancelled
    ledger = Path(run_ledger.ledger_path())
    for _ in range(600):  # its undoing runs on the loop once the thread is done
        if ledger.exists() and '"run":"r-cancelled","end"' in ledger.read_text():
            break
        await asyncio.sleep(0.05)
    assert '"run":"r-cancelled","ws"' in ledger.read_text()  # it was entered, then closed
    assert "r-cancelled" not in _open_windows(home)
    assert not (home / "runs" / "r-cancelled").exists()


def test_a_run_whose_confinement_breaks_leaves_no_trace(home: Path) -> None:
    asyncio.run(_confinement_breaks(home))


async def _confinement_breaks(home: Path) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("an unforeseen failure")

    runner = _runner(home, commands=broken)
    loaded_pack = runner.pack("maker")
    with pytest.raises(RuntimeError, match="unforeseen"):
        async with runner.setup.session(
            loaded_pack, home / "ws", None, None, lambda: runner.open_runlog("r-broken", ())
        ):
            raise AssertionError("the run should not have started")
    assert not (home / "runs" / "r-broken").exists()
    assert "r-broken" not in _open_windows(home)


def test_a_run_that_starts_is_in_the_ledger_until_it_ends(home: Path) -> None:
    asyncio.run(_starts(home))


async def _starts(home: Path) -> None:
    runner = _runner(home)
    loaded_pack = runner.pack("maker")
    async with runner.setup.session(
        loaded_pack, home / "ws", None, None, lambda: runner.open_runlog("r-ok", ())
    ) as session:
        assert session.runlog.run_id == "r-ok"
        assert _open_windows(home) == ["r-ok"]
    assert _open_windows(home) == []
